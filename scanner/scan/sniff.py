"""Content sniffing: decide a blob's ``Format`` from its bytes, never from its name.

A pickle named ``.safetensors``, ``.json`` or with no extension is a pickle; a zip named
``data.txt`` is a zip. Names are used only as a tie-break for binary that matches no
format (a 3-byte ``x.safetensors`` goes to the safetensors validator, which reports it
malformed, instead of to the generic unknown-binary check).

Reads: the first 4 KiB, the last 64 KiB (end of central directory of a prefixed zip) and
8 bytes at each power-of-two offset where an HDF5 superblock may sit.
"""

from __future__ import annotations

import re

from scanner.core.formats import Format
from scanner.core.model import Blob
from scanner.core.spec import BY_FORMAT, MAGICS, NAME_HINTS
from scanner.formats.compressed import kind_of as compression_of
from scanner.formats.onnx import looks_like_onnx
from scanner.formats.pickle.sniff import TORCH_LEGACY_MAGIC, looks_like_pickle
from scanner.formats.rdata import looks_like_r
from scanner.formats.tar import checksum_ok
from scanner.formats.tensorflow import is_tflite, looks_like_tf
from scanner.formats.xml import looks_like_xml
from scanner.formats.ziplib import parse_eocd_only

HEAD = 4096
HDF5_MAGIC = BY_FORMAT[Format.HDF5].magic[0]
HDF5_MAX_USERBLOCK = 1 << 30
SEVENZIP_MAGIC = BY_FORMAT[Format.SEVENZIP].magic[0]
_ZIP_STARTS = (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08PK\x03\x04", b"PK00PK\x03\x04")
_MAGICS = MAGICS  # from the format registry (scanner.core.spec)
_NAME_HINTS = NAME_HINTS
_PY_LINE = re.compile(
    r"^(?:import [\w.]+|from \.*[\w.]* import |def \w+\s*\(|async def \w+|"
    r"class \w+\s*[(:]|if __name__ ?==)", re.M)
_JINJA_OPEN = re.compile(r"\{[%{#]")
_JINJA_CLOSE = re.compile(r"[%}#]\}")
_JSON_AFTER_BRACKET = set(b'{["-0123456789tfn]')
# C0 control bytes other than tab, LF, VT, FF, CR, ESC (UTF-8 never uses them in
# multi-byte sequences, so counting bytes counts control characters).
_CONTROL_BYTES = bytes(b for b in range(32) if b not in b"\t\n\r\f\v\x1b")


def _suffix(name: str) -> str:
    last = name.rsplit("!", 1)[-1].rsplit("/", 1)[-1].lower()
    dot = last.rfind(".")
    return last[dot:] if dot > 0 else ""


def is_tar_header(head: bytes) -> bool:
    """A header block with a valid checksum: ustar/GNU (magic at offset 257) or pre-POSIX
    (v7, non-empty name)."""
    if len(head) < 512 or not checksum_ok(head[:512]):
        return False
    return head[257:262] == b"ustar" or head[0] != 0


def hdf5_superblock(blob: Blob) -> int | None:
    """Offset of the HDF5 superblock: 0, 512, 1024, 2048, ... (HDF5 spec, userblock)."""
    offset = 0
    while offset + 8 <= blob.size and offset <= HDF5_MAX_USERBLOCK:
        if blob.read_at(offset, 8) == HDF5_MAGIC:
            return offset
        offset = 512 if offset == 0 else offset * 2
    return None


def _safetensors_prefix(head: bytes) -> tuple[bool, bool]:
    """(plausible, strong): an 8-byte little-endian header length below 2**32;
    strong when the header then opens with '{'."""
    if len(head) < 8 or head[4:8] != b"\x00\x00\x00\x00":
        return False, False
    return True, head[8:9] == b"{"


def _text(head: bytes, complete: bool) -> str | None:
    """``head`` as text, or ``None`` for binary (NUL or many control bytes, not UTF-8)."""
    if b"\x00" in head:
        return None
    data = head
    for cut in range(4):  # a multi-byte sequence may straddle the end of the head
        try:
            text = data.decode("utf-8")
            break
        except UnicodeDecodeError:
            if complete or cut == 3:
                return None
            data = data[:-1]
    else:  # pragma: no cover
        return None
    controls = len(data) - len(data.translate(None, _CONTROL_BYTES))
    return None if controls * 20 > max(len(text), 1) else text


def _text_format(text: str, name: str) -> Format:
    body = text.lstrip("\ufeff \t\r\n")
    if body[:1] == "{":
        after = body[1:].lstrip(" \t\r\n")[:1]
        if after in ('"', "}", ""):
            return Format.JSON
    if body[:1] == "[":
        after = body[1:].lstrip(" \t\r\n")[:1]
        if after == "" or ord(after) in _JSON_AFTER_BRACKET:
            return Format.JSON
    if looks_like_xml(text):
        return Format.XML
    suffix = _suffix(name)
    if suffix == ".py":
        return Format.PYTHON
    python = (text.startswith("#!") and "python" in text.split("\n", 1)[0]) or (
        "```" not in text and _PY_LINE.search(text) is not None)
    if python:
        return Format.PYTHON
    if suffix in (".jinja", ".jinja2", ".j2") or (
            _JINJA_OPEN.search(text) and _JINJA_CLOSE.search(text)):
        return Format.JINJA
    return Format.TEXT


def sniff(blob: Blob) -> Format:
    """The format of ``blob``, decided from its content.

    Order: empty; magic numbers at offset 0 (zip, 7z, npy, HDF5, GGUF, compression, R,
    TFLite, tar); safetensors
    with a '{' header; a zip found from its end record (prefixed zips, polyglots: the zip
    analyzer also analyses the prefix); HDF5 after a user block; torch legacy magic;
    pickle opcode streams; other plausible safetensors length prefixes; TensorFlow
    protobufs (by name or TF-Keras marker); ONNX protobuf; the name hint for binary; then
    JSON, XML, Python, Jinja, text; else unknown binary.
    Never raises for any content."""
    if blob.size <= 0:
        return Format.EMPTY
    head = blob.read_at(0, HEAD)
    if head.startswith(_ZIP_STARTS):
        return Format.ZIP
    for magic, fmt in _MAGICS:
        if head.startswith(magic):
            return fmt
    if compression_of(head) is not None:
        return Format.COMPRESSED
    if looks_like_r(head):
        return Format.R
    if is_tflite(head):
        return Format.TFLITE
    if is_tar_header(head):
        return Format.TAR
    plausible, strong = _safetensors_prefix(head)
    if strong:
        return Format.SAFETENSORS
    if blob.size >= 22 and parse_eocd_only(blob):
        return Format.ZIP
    if hdf5_superblock(blob) is not None:
        return Format.HDF5
    if head.startswith(TORCH_LEGACY_MAGIC):
        return Format.TORCH_LEGACY
    if looks_like_pickle(head):
        return Format.PICKLE
    if plausible:
        return Format.SAFETENSORS
    if looks_like_tf(head, blob.name):
        return Format.TENSORFLOW
    if looks_like_onnx(head, blob.size):
        return Format.ONNX
    text = _text(head, complete=len(head) >= blob.size)
    if text is None:
        return _NAME_HINTS.get(_suffix(blob.name), Format.UNKNOWN)
    return _text_format(text, blob.name)
