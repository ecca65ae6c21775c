"""GGUF analyzer (ggml-org/ggml docs/gguf.md, versions 2 and 3).

Every GGUF file is refused by policy from its magic alone (``format.gguf_not_allowed``).
The metadata is then walked only to find ``tokenizer.chat_template`` (checked like any
chat template) and to report malformed files: every length and count is checked against
the bytes left in the file *before* it is used (llama.cpp#19003: an unchecked string length
sized an allocation), tensor dimensions are bounded so byte-size arithmetic cannot overflow
(llama.cpp PR#18674), and tensor data must lie inside the file. Memory: one 1 MiB window
plus the chat template text.
"""

from __future__ import annotations

import math

from scanner.core.context import LimitHit, ScanContext
from scanner.core.model import Blob, Finding, Severity, Verdict
from scanner.core.pathnames import NAME_PATH_ESCAPE, escapes
from scanner.core.rules import rule
from scanner.core.spec import Format, FormatSpec
from scanner.formats.template import check_chat_template
from scanner.formats.template.rules import MAX_TEMPLATE_CHARS

GGUF_NOT_ALLOWED = rule(
    "format.gguf_not_allowed", Verdict.POLICY, Severity.MEDIUM,
    "GGUF file: not an allowed weight format (never handed to a GGUF parser)",
    "Ship safetensors weights for the serving engine.",
)
GGUF_MALFORMED = rule(
    "gguf.malformed", Verdict.MALFORMED, Severity.HIGH,
    "GGUF header, metadata or tensor info is invalid (lengths, dims or offsets)",
    "Regenerate the file with a current gguf writer; do not load this one.",
)

MAGIC = b"GGUF"  # ggml/docs/gguf.md
STRING, ARRAY = 8, 9
_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
# ggml_type -> (block size in elements, bytes per block); ggml/include/ggml.h
GGML_TYPES: dict[int, tuple[int, int]] = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
    9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
    14: (256, 210), 15: (256, 292), 16: (256, 66), 17: (256, 74), 18: (256, 98),
    19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82), 23: (256, 136), 24: (1, 1),
    25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2), 34: (256, 54),
    35: (256, 66), 39: (32, 17),
}
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_KEY = 1 << 16
MAX_ARRAY_DEPTH = 8
WINDOW = 1 << 20
TEMPLATE_KEY = "tokenizer.chat_template"


class _Bad(Exception):
    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


class _Cursor:
    """Sequential little-endian reads; every read is bounds-checked against the file."""

    def __init__(self, blob: Blob, pos: int) -> None:
        self.blob, self.pos = blob, pos
        self.start, self.buf = 0, b""

    def left(self) -> int:
        return self.blob.size - self.pos

    def need(self, n: int, what: str) -> None:
        if n < 0 or n > self.left():
            raise _Bad(f"{what} ({n} bytes) runs past the end of the file", self.pos)

    def read(self, n: int, what: str) -> bytes:
        self.need(n, what)
        end = self.pos + n
        if not (self.start <= self.pos and end <= self.start + len(self.buf)):
            if n > WINDOW:
                data = self.blob.read_at(self.pos, n)
                self.pos = end
                return data
            self.start, self.buf = self.pos, self.blob.read_at(self.pos, WINDOW)
        data = self.buf[self.pos - self.start : end - self.start]
        self.pos = end
        return data

    def uint(self, n: int, what: str) -> int:
        return int.from_bytes(self.read(n, what), "little")

    def skip(self, n: int, what: str) -> None:
        self.need(n, what)
        self.pos += n


class _Parse:
    def __init__(self, ctx: ScanContext, blob: Blob) -> None:
        self.ctx, self.blob = ctx, blob
        self.cur = _Cursor(blob, 4)
        self.version = 0
        self.alignment = 32
        self.templates: list[tuple[str, str]] = []
        # (tensor name, why, info offset) of names that are paths out of a folder
        self.path_names: list[tuple[str, str, int]] = []

    def count(self, what: str, min_each: int) -> int:
        n = self.cur.uint(8, what)
        if n * min_each > self.cur.left():
            raise _Bad(f"{what} {n} cannot fit in the {self.cur.left()} bytes left", self.cur.pos)
        return n

    def string(self, what: str, keep: int) -> bytes | None:
        """A gguf_string; returned when at most ``keep`` bytes, else skipped."""
        n = self.cur.uint(8, f"{what} length")
        if n > keep:
            self.cur.skip(n, what)
            return None
        return self.cur.read(n, what)

    def value(self, vtype: int, key: str, depth: int = 0) -> None:
        if vtype in _SCALAR:
            data = self.cur.read(_SCALAR[vtype], f"value of {key!r}")
            if key == "general.alignment":
                self.alignment = int.from_bytes(data, "little")
        elif vtype == STRING:
            template = key == TEMPLATE_KEY or key.startswith(TEMPLATE_KEY + ".")
            keep = MAX_TEMPLATE_CHARS if template else 0
            text = self.string(f"string value of {key!r}", keep)
            if keep and text is None:
                raise LimitHit("gguf chat template bytes", MAX_TEMPLATE_CHARS)
            if keep and text is not None:
                try:
                    self.templates.append((key, text.decode("utf-8")))
                except UnicodeDecodeError:
                    raise _Bad(f"{key} is not UTF-8", self.cur.pos) from None
        elif vtype == ARRAY and depth < MAX_ARRAY_DEPTH:
            itype = self.cur.uint(4, f"array type of {key!r}")
            size = _SCALAR.get(itype)
            n = self.count(f"array length of {key!r}", size or 8)
            if size is not None:
                self.cur.skip(n * size, f"array of {key!r}")
            else:
                for i in range(n):
                    if not i & 0x3FFF:
                        self.ctx.check_deadline()
                    self.value(itype, key + "[]", depth + 1)
        else:
            raise _Bad(f"unknown value type {vtype} for {key!r}", self.cur.pos)

    def run(self) -> None:
        self.version = self.cur.uint(4, "version")
        if self.version not in (2, 3):  # v1 (u32 lengths) is obsolete; llama.cpp refuses it
            raise _Bad(f"unsupported GGUF version {self.version} (or big-endian file)", 4)
        n_tensors = self.count("tensor count", 24)
        n_kv = self.count("metadata key/value count", 13)
        keys: set[str] = set()
        for _ in range(n_kv):
            self.ctx.check_deadline()
            raw = self.string("metadata key", MAX_KEY)
            if raw is None:
                raise _Bad("metadata key longer than 64 KiB", self.cur.pos)
            key = raw.decode("utf-8", "replace")
            if key in keys:
                raise _Bad(f"duplicate metadata key {key!r}", self.cur.pos)
            keys.add(key)
            self.value(self.cur.uint(4, f"value type of {key!r}"), key)
        if self.alignment <= 0 or self.alignment & (self.alignment - 1):
            raise _Bad(f"general.alignment {self.alignment} is not a power of two", 0)
        self.tensors(n_tensors)

    def tensors(self, n: int) -> None:
        infos: list[tuple[str, int, int, int]] = []  # name, offset, nbytes, info position
        names: set[str] = set()
        for _ in range(n):
            self.ctx.check_deadline()
            at = self.cur.pos
            raw = self.string("tensor name", MAX_KEY)
            if raw is None:
                raise _Bad("tensor name longer than 64 KiB", at)
            name = raw.decode("utf-8", "replace")
            if name in names:
                raise _Bad(f"duplicate tensor name {name!r}", at)
            names.add(name)
            why = escapes(name, nul=False)
            if why is not None:
                self.path_names.append((name, why, at))
            n_dims = self.cur.uint(4, "tensor n_dims")
            if not 1 <= n_dims <= MAX_DIMS:
                raise _Bad(f"tensor {name!r} has {n_dims} dims (1..{MAX_DIMS})", at)
            dims = [self.cur.uint(8, "tensor dim") for _ in range(n_dims)]
            ggml_type = self.cur.uint(4, "tensor type")
            offset = self.cur.uint(8, "tensor offset")
            if any(d >= 1 << 63 for d in dims) or math.prod(dims) >= 1 << 63:
                raise _Bad(f"tensor {name!r} dims {dims} overflow int64", at)
            if ggml_type not in GGML_TYPES:
                raise _Bad(f"tensor {name!r} has unknown ggml type {ggml_type}", at)
            block, size = GGML_TYPES[ggml_type]
            if dims[0] % block:
                raise _Bad(f"tensor {name!r} row of {dims[0]} is not a multiple of the "
                           f"block size {block}", at)
            if offset % self.alignment:
                raise _Bad(f"tensor {name!r} offset {offset} is not aligned to "
                           f"{self.alignment}", at)
            infos.append((name, offset, math.prod(dims) // block * size, at))
        data_start = -(-self.cur.pos // self.alignment) * self.alignment
        data_size = self.blob.size - data_start
        for name, offset, nbytes, at in infos:
            if offset + nbytes > data_size:
                raise _Bad(f"tensor {name!r} data [{offset}, {offset + nbytes}) lies outside "
                           f"the {max(data_size, 0)}-byte data section", at)


def _check_templates(path: str, templates: list[tuple[str, str]]) -> list[Finding]:
    """Chat templates found in the metadata, checked like any chat template."""
    out: list[Finding] = []
    for key, text in templates:
        out += check_chat_template(path, text, location=key)
    return out


def analyze_gguf(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Findings for a GGUF blob: always ``format.gguf_not_allowed`` (decided from the magic,
    before any parsing); ``gguf.malformed`` for invalid lengths, dims or offsets; the chat
    template checker's findings for ``tokenizer.chat_template*`` values; ``name.path_escape``
    for tensor names that are paths out of a folder (``scanner.core.pathnames``)."""
    findings = [GGUF_NOT_ALLOWED.finding(blob.name, GGUF_NOT_ALLOWED.title,
                                         evidence="magic 'GGUF'")]
    if blob.read_at(0, 4) != MAGIC:
        return findings + [GGUF_MALFORMED.finding(blob.name, "missing 'GGUF' magic", offset=0)]
    parse = _Parse(ctx, blob)
    try:
        parse.run()
    except _Bad as exc:
        findings.append(GGUF_MALFORMED.finding(blob.name, str(exc), offset=exc.offset))
    except LimitHit as hit:
        findings.append(hit.finding(blob.name))
    findings += [NAME_PATH_ESCAPE.finding(
        blob.name, f"tensor {name[:80]!r} is a path that leaves its folder ({why}): "
        "converters write tensors to files named after them", name[:200], offset=at)
        for name, why, at in parse.path_names[:20]]
    return findings + _check_templates(blob.name, parse.templates)


GGUF = Format("gguf")
SPECS = (FormatSpec(GGUF, analyze_gguf, order=20, magic=(MAGIC,), name_hints=(".gguf",),
                    claims=(".gguf",)),)
