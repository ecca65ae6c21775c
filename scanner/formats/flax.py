"""Flax msgpack checkpoints (``flax.serialization.to_bytes``, ``flax_model.msgpack``),
analysed with a hand-written, bounded msgpack walker (no ``msgpack`` package).

A checkpoint is one msgpack map (the state dict: parameter names -> nested maps ->
arrays). Flax encodes arrays as extension type 1 (payload: msgpack ``[shape, dtype name,
buffer]``), complex scalars as type 2 (``[real, imag]``) and NumPy scalars as type 3
(``[dtype name, bytes]``); flax/serialization.py ``_msgpack_ext_pack``. Restoring calls
``np.frombuffer`` on the buffer: data only, so the file is ``format.flax_msgpack_not_allowed``
(policy). Everything that would make ``msgpack.unpackb``/``from_bytes`` fail or read
something else is ``flax.malformed``: the reserved byte 0xC1, a length past its
container or the file, trailing bytes after the map, a string that is not UTF-8, an
array whose buffer is not ``prod(shape) * itemsize`` bytes, a dtype that is not a
numeric NumPy/ml_dtypes name (``object`` arrays cannot be read from a buffer), an
extension type flax does not define.

Recognised from content: a first byte that opens a non-empty map (fixmap, map16, map32)
whose first key is a string, and a head that parses as a valid msgpack prefix.
Bounds: ``MAX_DEPTH`` nesting, ``MAX_OBJECTS`` objects, each count checked against the
bytes left; bin payloads (array buffers) are skipped, not read, and strings are decoded
in 64 KiB windows, so a skipped array costs one small read; the deadline is checked every
4,096 objects.
"""

from __future__ import annotations

import codecs
import math
import struct

from scanner.core.context import LimitHit, ScanContext
from scanner.core.model import Blob, BytesBlob, Finding, Severity, Verdict
from scanner.core.rules import rule
from scanner.core.spec import Format, FormatSpec, Probe

FLAX_NOT_ALLOWED = rule(
    "format.flax_msgpack_not_allowed", Verdict.POLICY, Severity.MEDIUM,
    "Flax msgpack checkpoint: data only, but not an allowed weight format",
    "Export the weights to safetensors (safetensors.flax.save_file).",
)
FLAX_MALFORMED = rule(
    "flax.malformed", Verdict.MALFORMED, Severity.HIGH,
    "msgpack checkpoint is invalid (structure, lengths, UTF-8, array buffers, dtypes, "
    "extension types)",
    "Re-save the checkpoint with flax.serialization.to_bytes; do not load this file.",
)

MAX_DEPTH = 64
MAX_OBJECTS = 1 << 24
MAX_DIMS = 32
WINDOW = 64 << 10
EXT_NDARRAY, EXT_COMPLEX, EXT_SCALAR = 1, 2, 3
DTYPE_BYTES = {
    "bool": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "uint16": 2,
    "uint32": 4, "uint64": 8, "float16": 2, "float32": 4, "float64": 8, "bfloat16": 2,
    "complex64": 8, "complex128": 16, "int4": 1, "uint4": 1, "float8_e4m3fn": 1,
    "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "float8_e4m3b11fnuz": 1,
}
# first byte -> (kind, size of the length/count field or of the fixed payload)
STR, BIN, EXT, ARRAY, MAP, FIXED = range(6)


class _Bad(Exception):
    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


class _Short(Exception):
    """The data ended inside an object (a sniffing head may end anywhere)."""


def _header(first: int) -> tuple[int, int, int]:
    """(kind, inline count or length, bytes of a following length field / fixed payload)
    for a msgpack type byte; raises ``ValueError`` for 0xC1."""
    if first <= 0x7F or first >= 0xE0 or first in (0xC0, 0xC2, 0xC3):
        return FIXED, 0, 0
    if 0x80 <= first <= 0x8F:
        return MAP, first & 0x0F, 0
    if 0x90 <= first <= 0x9F:
        return ARRAY, first & 0x0F, 0
    if 0xA0 <= first <= 0xBF:
        return STR, first & 0x1F, 0
    table = {
        0xC4: (BIN, 1), 0xC5: (BIN, 2), 0xC6: (BIN, 4), 0xC7: (EXT, 1), 0xC8: (EXT, 2),
        0xC9: (EXT, 4), 0xCA: (FIXED, 4), 0xCB: (FIXED, 8), 0xCC: (FIXED, 1),
        0xCD: (FIXED, 2), 0xCE: (FIXED, 4), 0xCF: (FIXED, 8), 0xD0: (FIXED, 1),
        0xD1: (FIXED, 2), 0xD2: (FIXED, 4), 0xD3: (FIXED, 8), 0xD9: (STR, 1),
        0xDA: (STR, 2), 0xDB: (STR, 4), 0xDC: (ARRAY, 2), 0xDD: (ARRAY, 4),
        0xDE: (MAP, 2), 0xDF: (MAP, 4),
    }
    if first in table:
        kind, size = table[first]
        return kind, -1, size
    if 0xD4 <= first <= 0xD8:  # fixext 1, 2, 4, 8, 16
        return EXT, 1 << (first - 0xD4), 0
    raise ValueError("reserved type byte 0xc1")


class _Walker:
    def __init__(self, ctx: ScanContext, blob: Blob, *, partial: bool = False) -> None:
        self.ctx, self.blob, self.partial = ctx, blob, partial
        self.start, self.buf = 0, b""
        self.objects = 0
        self.arrays = 0

    def take(self, pos: int, n: int, end: int) -> bytes:
        if pos + n > end:
            if self.partial and end >= self.blob.size:
                raise _Short
            raise _Bad(f"{n} bytes at offset {pos} run past their container", pos)
        if not (self.start <= pos and pos + n <= self.start + len(self.buf)):
            self.start, self.buf = pos, self.blob.read_at(pos, max(n, WINDOW))
        return self.buf[pos - self.start:pos + n - self.start]

    def uint(self, pos: int, n: int, end: int) -> int:
        return int.from_bytes(self.take(pos, n, end), "big")

    def obj(self, pos: int, end: int) -> tuple[int, int, int, int]:
        """(kind, count or length, position of the payload/items, ext code or -1)."""
        at = pos
        try:
            kind, count, size = _header(self.take(pos, 1, end)[0])
        except ValueError as exc:
            raise _Bad(str(exc), at) from None
        pos += 1
        if kind == FIXED:
            if size:
                self.take(pos, size, end)
            return FIXED, size, pos, -1
        if count < 0:
            count = self.uint(pos, size, end)
            pos += size
        code = -1
        if kind == EXT:
            code = struct.unpack(">b", self.take(pos, 1, end))[0]
            pos += 1
        if kind in (STR, BIN, EXT) and pos + count > end:
            if self.partial and end >= self.blob.size:
                raise _Short
            raise _Bad(f"payload of {count} bytes at offset {at} runs past its container",
                       at)
        if kind in (ARRAY, MAP) and count * (2 if kind == MAP else 1) > end - pos \
                and not self.partial:
            raise _Bad(f"{count} items at offset {at} cannot fit in the bytes left", at)
        return kind, count, pos, code

    def utf8(self, pos: int, n: int, end: int) -> str:
        decoder = codecs.getincrementaldecoder("utf-8")()
        out = ""
        try:
            while n > 0:
                chunk = self.take(pos, min(n, WINDOW), end)
                piece = decoder.decode(chunk, final=n <= WINDOW)
                if len(out) < 256:
                    out += piece[:256]
                pos, n = pos + len(chunk), n - len(chunk)
        except UnicodeDecodeError:
            raise _Bad(f"string at offset {pos} is not UTF-8", pos) from None
        return out

    def walk(self, pos: int, end: int, depth: int = 0) -> tuple[int, int]:
        """Walk one object at ``pos``; returns (position after it, objects walked)."""
        stack = [1]  # items left per open container
        before = self.objects
        while stack:
            if stack[-1] == 0:
                stack.pop()
                continue
            stack[-1] -= 1
            self.objects += 1
            if self.objects > MAX_OBJECTS:
                raise LimitHit("msgpack objects", MAX_OBJECTS)
            if not self.objects & 0xFFF:
                self.ctx.check_deadline()
            kind, count, pos, code = self.obj(pos, end)
            if kind == FIXED:
                pos += count
            elif kind == STR:
                self.utf8(pos, count, end)
                pos += count
            elif kind == BIN:
                pos += count
            elif kind == EXT:
                self.ext(code, pos, pos + count, depth)
                pos += count
            else:
                if len(stack) + depth >= MAX_DEPTH:
                    raise LimitHit("msgpack nesting depth", MAX_DEPTH)
                stack.append(count * 2 if kind == MAP else count)
        return pos, self.objects - before

    def value(self, pos: int, end: int, want: int) -> tuple[object, int]:
        """A small scalar, string or int list at ``pos`` (ext payload fields)."""
        kind, count, at, _ = self.obj(pos, end)
        if want == STR and kind == STR and count <= 256:
            return self.utf8(at, count, end), at + count
        if want == ARRAY and kind == ARRAY and count <= MAX_DIMS:
            dims, p = [], at
            for _ in range(count):
                n, p = self.integer(p, end)
                dims.append(n)
            return dims, p
        if want == BIN and kind == BIN:
            return count, at + count
        raise _Bad(f"unexpected msgpack type in extension payload at offset {pos}", pos)

    def integer(self, pos: int, end: int) -> tuple[int, int]:
        first = self.take(pos, 1, end)[0]
        if first <= 0x7F:
            return first, pos + 1
        sizes = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}
        if first in sizes:
            return self.uint(pos + 1, sizes[first], end), pos + 1 + sizes[first]
        raise _Bad(f"array dimension at offset {pos} is not a non-negative integer", pos)

    def ext(self, code: int, pos: int, end: int, depth: int) -> None:
        if code == EXT_NDARRAY:
            if self.take(pos, 1, end) != b"\x93":
                raise _Bad(f"ndarray payload at offset {pos} is not [shape, dtype, buffer]",
                           pos)
            shape, p = self.value(pos + 1, end, ARRAY)
            dtype, p = self.value(p, end, STR)
            buffer, p = self.value(p, end, BIN)
            if not isinstance(shape, list) or not isinstance(dtype, str) or not isinstance(
                    buffer, int):
                raise _Bad(f"ndarray payload at offset {pos} has the wrong types", pos)
            if dtype not in DTYPE_BYTES:
                raise _Bad(f"ndarray dtype {dtype[:40]!r} is not a numeric dtype", pos)
            if math.prod(shape) * DTYPE_BYTES[dtype] != buffer or p != end:
                raise _Bad(f"ndarray {dtype}{shape}: buffer of {buffer} bytes does not "
                           "match its shape", pos)
            self.arrays += 1
        elif code == EXT_SCALAR:
            if self.take(pos, 1, end) != b"\x92":
                raise _Bad(f"scalar payload at offset {pos} is not [dtype, bytes]", pos)
            dtype, p = self.value(pos + 1, end, STR)
            size, p = self.value(p, end, BIN)
            if not isinstance(dtype, str) or DTYPE_BYTES.get(dtype) != size or p != end:
                raise _Bad(f"numpy scalar {str(dtype)[:40]!r} of {size} bytes", pos)
        elif code == EXT_COMPLEX:
            after, _ = self.walk(pos, end, depth + 1)
            if after != end:
                raise _Bad(f"complex payload at offset {pos} has trailing bytes", pos)
        else:
            raise _Bad(f"msgpack extension type {code} is not one flax writes", pos)


def looks_like_msgpack(head: bytes, size: int) -> bool:
    """Sniff: a non-empty top-level map whose first key is a string, valid as far as
    ``head`` goes (and exactly, when ``head`` is the whole blob)."""
    if not head:
        return False
    first = head[0]
    if 0x81 <= first <= 0x8F:
        key_at = 1
    elif first in (0xDE, 0xDF):
        key_at = 3 if first == 0xDE else 5
        if not any(head[1:key_at]):
            return False
    else:
        return False
    key = head[key_at:key_at + 1]
    if not key or not (0xA0 <= key[0] <= 0xBF or key[0] in (0xD9, 0xDA, 0xDB)):
        return False
    walker = _Walker(ScanContext(), BytesBlob("", head), partial=len(head) < size)
    try:
        end, _ = walker.walk(0, len(head))
    except _Short:
        return walker.objects >= 2
    except (_Bad, LimitHit):
        return False
    return end == len(head)


def analyze_flax(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Findings for a msgpack checkpoint blob (see the module docstring)."""
    walker = _Walker(ctx, blob)
    out: list[Finding] = []
    try:
        end, _ = walker.walk(0, blob.size)
        if end != blob.size:
            out.append(FLAX_MALFORMED.finding(
                blob.name, f"{blob.size - end} bytes after the checkpoint map", offset=end))
    except _Bad as bad:
        out.append(FLAX_MALFORMED.finding(blob.name, f"invalid msgpack: {bad}",
                                          offset=bad.offset))
    except LimitHit as hit:
        out.append(hit.finding(blob.name))
    return [FLAX_NOT_ALLOWED.finding(
        blob.name, f"msgpack checkpoint ({walker.arrays} arrays)")] + out


FLAX = Format("flax-msgpack")  # flax.serialization msgpack checkpoint
SPECS = (FormatSpec(FLAX, analyze_flax, name_hints=(".msgpack",),
                    probes=(Probe(105, lambda h: looks_like_msgpack(h.head, h.size)),)),)
