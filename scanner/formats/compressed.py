"""Single-file compression (gzip, bzip2, xz/lzma, zstd, lz4 frames), ``.tar.gz`` included.

The stream is decompressed in bounded chunks (stdlib ``zlib``/``bz2``/``lzma``; never a
whole-file read): the output is charged to ``ScanContext.charge_decompressed`` and a
decompression ratio above ``MAX_RATIO`` (after the first MiB) is a limit hit, so a bomb
stops early. The decompressed bytes are then sniffed and analysed like any file (an R
workspace is checked, a pickle is interpreted). A tar inside (``.tar.gz``, a NeMo
``.nemo``) is streamed instead: walked by ``scanner.formats.tar.analyze_tar_stream`` over a
forward-only view, each member read into memory in turn (memory: a few times the largest
member, not the archive; a member over ``max_member_bytes`` is a limit finding and the walk
goes on), so a config member is judged even when the whole archive is over the limits.
Concatenated gzip members are followed as ``gzip`` does. zstd and lz4 have no stdlib
decoder: refused as ``archive.unsupported`` (fail closed). Every compressed file is at
least ``format.compressed_not_allowed`` (policy).

joblib's containers are opened as ``joblib.load`` opens them (joblib ``compressor.py``
prefixes and ``numpy_pickle_compat.read_zfile``): raw zlib streams (``x``, joblib's
``BinaryZlibFile``), LZMA "alone" streams (``]\\x00``, ``lzma.FORMAT_ALONE``), xz, gzip,
bzip2, and the legacy ``ZF`` file (``ZF``, the decompressed length in hex left-justified
to 19 characters, an optional space, then one zlib stream). Like Python's file readers
(``_compression.DecompressReader``, joblib's ``BinaryZlibFile``), every kind follows a
second stream that starts where one ends; bytes that are no stream end the reading.
A zlib or LZMA-alone head is only claimed when its first bytes decode.
"""

from __future__ import annotations

import bz2
import lzma
import re
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from scanner.core.archive import ARCHIVE_MALFORMED, ARCHIVE_UNSUPPORTED
from scanner.core.blobview import CHUNK
from scanner.core.context import LimitHit, ScanContext
from scanner.core.model import Blob, BytesBlob, Finding, Severity, Verdict
from scanner.core.rules import rule
from scanner.core.spec import Format, FormatSpec, Probe
from scanner.formats.tar import BLOCK, analyze_tar_stream, is_tar_header

COMPRESSED_NOT_ALLOWED = rule(
    "format.compressed_not_allowed", Verdict.POLICY, Severity.MEDIUM,
    "Compressed file (gzip/bzip2/xz/zstd/lz4): not an allowed weight format",
    "Decompress trusted files before packaging and ship safetensors.",
)

MAX_RATIO = 200  # decompressed bytes per compressed byte, checked after RATIO_FREE bytes
RATIO_FREE = 1 << 20
MAGICS: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"), (b"\x04\x22\x4d\x18", "lz4"),
)


ZF_HEADER = 2 + 19  # b"ZF" + hex(len) left-justified to len(hex(2**64)) (joblib < 0.10)
_ZF = re.compile(rb"ZF0x[0-9a-f]{1,17} *")


def kind_of(head: bytes) -> str | None:
    """The compression named by ``head``'s magic bytes, or ``None``."""
    for magic, kind in MAGICS:
        if head.startswith(magic):
            if kind == "bzip2" and not (len(head) > 3 and head[3:4] in b"123456789"):
                continue
            if kind == "gzip" and not (len(head) > 2 and head[2] == 8):  # CM = deflate
                continue
            return kind
    if head[:2] == b"ZF" and _ZF.fullmatch(head[:ZF_HEADER]) and _decodes("zlib", _zf_body(
            head)):
        return "joblib-zf"
    if head[:1] == b"x" and _decodes("zlib", head):
        return "zlib"
    if head[:2] == b"]\x00" and _decodes("lzma", head):
        return "lzma"
    return None


def _zf_body(data: bytes) -> bytes:
    """The zlib stream of a joblib ``ZF`` file (``read_zfile``: an optional space after
    the 21-byte header is skipped)."""
    at = ZF_HEADER + 1 if data[ZF_HEADER: ZF_HEADER + 1] == b" " else ZF_HEADER
    return data[at:]


def _decodes(kind: str, head: bytes) -> bool:
    """Whether ``head`` is a valid start of a ``kind`` stream (zlib: header checksum and
    deflate method; both: the first bytes decode without error)."""
    if kind == "zlib" and (len(head) < 16 or head[0] & 0x0F != 8 or head[0] >> 4 > 7
                           or (head[0] << 8 | head[1]) % 31 or head[1] & 0x20):
        return False
    dec: Any = _decoder(kind)()
    try:
        dec.decompress(head, 1 << 16)
    except (zlib.error, lzma.LZMAError, EOFError, OSError):
        return False
    return True


def _decoder(kind: str) -> Callable[[], object]:
    if kind == "gzip":
        return lambda: zlib.decompressobj(16 + zlib.MAX_WBITS)
    if kind in ("zlib", "joblib-zf"):
        return zlib.decompressobj
    if kind == "bzip2":
        return bz2.BZ2Decompressor
    if kind == "lzma":
        return lambda: lzma.LZMADecompressor(format=lzma.FORMAT_ALONE)
    return lambda: lzma.LZMADecompressor(format=lzma.FORMAT_XZ)


def _pieces(ctx: ScanContext, blob: Blob, kind: str) -> Iterator[bytes]:
    """The decompressed bytes of ``blob`` in pieces of at most ``CHUNK`` bytes, streams
    that follow one another included. Raises ``LimitHit`` (ratio, deadline) or
    ``ValueError`` (corrupt or truncated stream); the caller bounds the total."""
    new = _decoder(kind)
    dec: Any = new()
    total = pos = 0
    if kind == "joblib-zf":
        head = blob.read_at(0, ZF_HEADER + 1)
        pos = ZF_HEADER + 1 if head[ZF_HEADER:] == b" " else ZF_HEADER
    done = False
    while pos < blob.size and not done:
        ctx.check_deadline()
        data = blob.read_at(pos, min(CHUNK, blob.size - pos))
        if not data:
            break
        pos += len(data)
        while True:
            try:
                piece = dec.decompress(data, CHUNK)
            except (OSError, EOFError, lzma.LZMAError, zlib.error) as exc:
                raise ValueError(f"{kind} stream is corrupt: {exc}") from None
            total += len(piece)
            if total > RATIO_FREE and total > MAX_RATIO * pos:
                raise LimitHit("max_decompression_ratio", MAX_RATIO, total // max(pos, 1))
            if piece:
                yield piece
            if dec.eof:
                rest = dec.unused_data
                if rest.strip(b"\x00") and (kind == "gzip" or (
                        kind != "joblib-zf" and _decodes(kind, rest))):
                    dec, data = new(), rest  # another stream follows: readers go on
                    continue
                done = True
                break
            if kind in ("gzip", "zlib", "joblib-zf"):
                data = dec.unconsumed_tail
                if not data:
                    break
            elif dec.needs_input:
                break
            else:
                data = b""
    if not dec.eof:
        raise ValueError(f"{kind} stream ends before its end marker (truncated)")


def decompress(ctx: ScanContext, blob: Blob, kind: str) -> bytes:
    """All decompressed bytes of ``blob`` (bounded). Raises ``LimitHit`` (size, ratio,
    budget) or ``ValueError`` (corrupt stream)."""
    limit = ctx.limits.max_member_bytes
    out: list[bytes] = []
    total = 0
    for piece in _pieces(ctx, blob, kind):
        total += len(piece)
        if total > limit:
            raise LimitHit("max_member_bytes", limit, total)
        out.append(piece)
    ctx.charge_decompressed(total)
    return b"".join(out)


class _Stream:
    """A forward-only view of ``blob``'s decompressed bytes (a tar read member by member:
    ``read_at`` never goes back before the last offset read; what lies before it is
    dropped). ``size`` is an upper bound until the end is reached. Errors of the stream
    surface from ``read_at`` as ``LimitHit``/``ValueError``."""

    def __init__(self, ctx: ScanContext, blob: Blob, kind: str, name: str) -> None:
        self.name = name
        self.size = 1 << 62  # unknown until the end: the walk stops at EOF or the deadline
        self._pieces = _pieces(ctx, blob, kind)
        self._buf = bytearray()
        self._base = 0  # stream offset of _buf[0]
        self._end = False

    def _pull(self) -> bool:
        piece = next(self._pieces, None)
        if piece is None:
            self._end = True
            self.size = self._base + len(self._buf)
            return False
        self._buf += piece
        return True

    def read_at(self, offset: int, length: int) -> bytes:
        if offset < self._base:
            raise ValueError("tar stream read backwards")
        while self._base + len(self._buf) < offset and (self._buf or not self._end):
            self._base += len(self._buf)
            self._buf.clear()
            if not self._pull():
                return b""
        del self._buf[: offset - self._base]
        self._base = offset
        while len(self._buf) < length and self._pull():
            pass
        return bytes(self._buf[:length])


def analyze_compressed(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """A compressed file: policy refusal, then the decompressed content's own findings."""
    kind = kind_of(blob.read_at(0, 4096)) or "unknown"
    findings = [COMPRESSED_NOT_ALLOWED.finding(blob.name, f"{kind}-compressed file",
                                               evidence=kind)]
    if kind in ("zstd", "lz4", "unknown"):
        return findings + [ARCHIVE_UNSUPPORTED.finding(
            blob.name, f"{kind} stream: no verified decoder, its content cannot be analysed",
            evidence=kind)]
    inner = blob.name + "!" + _inner_name(blob.name)
    stream = _Stream(ctx, blob, kind, inner)
    try:
        if is_tar_header(stream.read_at(0, BLOCK)):  # .tar.gz, .nemo: member by member
            return findings + _stream_tar(ctx, stream)
        data = decompress(ctx, blob, kind)
    except ValueError as exc:
        return findings + [ARCHIVE_MALFORMED.finding(blob.name, str(exc), evidence=kind)]
    except LimitHit as hit:
        return findings + [hit.finding(blob.name)]
    return findings + ctx.analyze(BytesBlob(inner, data))


def _stream_tar(ctx: ScanContext, stream: _Stream) -> list[Finding]:
    """The tar inside a compressed stream, one nesting level down (as ``ctx.analyze``
    would put it), its members read one at a time; a corrupt stream is
    ``archive.malformed`` after what was read."""
    if ctx.depth + 1 > ctx.limits.max_nesting_depth:
        return [LimitHit("max_nesting_depth", ctx.limits.max_nesting_depth).finding(
            stream.name)]
    ctx.depth += 1
    try:
        return analyze_tar_stream(ctx, stream)
    except ValueError as exc:
        return [ARCHIVE_MALFORMED.finding(stream.name, str(exc))]
    finally:
        ctx.depth -= 1


def _inner_name(name: str) -> str:
    last = name.rsplit("!", 1)[-1].rsplit("/", 1)[-1]
    for ext in (".gz", ".bz2", ".xz", ".lzma", ".z", ".zst", ".lz4", ".tgz"):
        if last.lower().endswith(ext):
            stem = last[: -len(ext)]
            return stem + ".tar" if ext == ".tgz" else stem
    return last + ".decompressed"


COMPRESSED = Format("compressed")  # single-file gzip/bzip2/xz/zstd/lz4 (tar.gz too)
# joblib.dump(..., compress=...) writes these names too (joblib compressor registry)
JOBLIB_NAMES = (".joblib", ".pkl", ".pickle")
SPECS = (FormatSpec(COMPRESSED, analyze_compressed, claims=JOBLIB_NAMES,
                    probes=(Probe(30, lambda h: kind_of(h.head) is not None),)),)
