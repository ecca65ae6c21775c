"""A bounded protobuf wire-format walker (no ``protobuf`` package), shared by the
PaddlePaddle and CoreML analyzers.

The caller gives a schema: message kind -> {field number: kind of that length-delimited
field, or ``LEAF``}. The walker visits the whole message tree depth-first, in file order,
descending only into fields the schema names; every other field is skipped by its wire
type without being read. ``LEAF`` fields are handed to the visitor (at most ``MAX_LEAF``
bytes of a string, or the varint's value). Every tag, varint and length is checked
against the enclosing message before it is used (``ProtoError``); nesting deeper than
``max_depth`` is a ``LimitHit``; the scan deadline is checked every 4,096 fields.
Memory: one 64 KiB read window (a skipped field costs no read). Wire format:
protobuf.dev/programming-guides/encoding.
"""

from __future__ import annotations

from typing import Protocol

from scanner.core.context import LimitHit, ScanContext
from scanner.core.model import Blob, Finding
from scanner.core.rules import Rule

LEAF = -1
MAX_LEAF = 4096
WINDOW = 64 << 10


class ProtoError(Exception):
    """The bytes are not a valid protobuf message (``offset``: where it went wrong)."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


class Visitor(Protocol):
    def open(self, kind: int) -> None: ...

    def leaf(self, kind: int, field: int, value: bytes | int, offset: int) -> None: ...

    def close(self, kind: int) -> None: ...


class Reader:
    """Random access to ``blob`` through a ``window``-byte read window (default 64 KiB)."""

    def __init__(self, blob: Blob, window: int = WINDOW) -> None:
        self.blob, self.window = blob, window
        self.start, self.buf = 0, b""

    def byte(self, pos: int) -> int:
        if not self.start <= pos < self.start + len(self.buf):
            self.start, self.buf = pos, self.blob.read_at(pos, self.window)
            if not self.buf:
                raise ProtoError("unexpected end of data", pos)
        return self.buf[pos - self.start]

    def varint(self, pos: int) -> tuple[int, int]:
        """(value, position after it); at most 10 bytes."""
        value = 0
        for shift in range(0, 70, 7):
            b = self.byte(pos)
            pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value, pos
        raise ProtoError("varint longer than 10 bytes", pos)


def walk(ctx: ScanContext, blob: Blob, schema: dict[int, dict[int, int]], root: int,
         visitor: Visitor, *, start: int = 0, end: int | None = None,
         max_depth: int = 64) -> int:
    """Walk the message of kind ``root`` in ``blob[start:end]``; returns the number of
    fields read. Raises ``ProtoError`` or ``LimitHit``."""
    reader = Reader(blob)
    stop = blob.size if end is None else end
    frames: list[list[int]] = [[root, start, stop]]  # [kind, position, end]
    visitor.open(root)
    fields = 0
    while frames:
        frame = frames[-1]
        kind, pos, end_ = frame
        if pos >= end_:
            if pos != end_:
                raise ProtoError("field runs past its message", end_)
            frames.pop()
            visitor.close(kind)
            continue
        fields += 1
        if not fields & 0xFFF:
            ctx.check_deadline()
        at = pos
        tag, pos = reader.varint(pos)
        field, wire = tag >> 3, tag & 7
        if field == 0 or wire not in (0, 1, 2, 5):
            raise ProtoError(f"invalid field tag {tag}", at)
        sub = schema.get(kind, {}).get(field)
        if wire == 0:
            value, pos = reader.varint(pos)
            if sub == LEAF:
                visitor.leaf(kind, field, value, at)
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            length, pos = reader.varint(pos)
            if pos + length > end_:
                raise ProtoError(f"field {field} ({length} bytes) runs past its message",
                                 at)
            if sub == LEAF:
                visitor.leaf(kind, field, blob.read_at(pos, min(length, MAX_LEAF)), at)
            elif sub is not None:
                if len(frames) >= max_depth:
                    raise LimitHit("protobuf message nesting depth", max_depth)
                frame[1] = pos + length
                frames.append([sub, pos, pos + length])
                visitor.open(sub)
                continue
            pos += length
        frame[1] = pos
    return fields


def walk_findings(ctx: ScanContext, blob: Blob, schema: dict[int, dict[int, int]], root: int,
                  visitor: Visitor, malformed: Rule, what: str) -> list[Finding]:
    """:func:`walk` the whole blob; ``[]`` when it reads, else the one finding that ends
    it: ``malformed`` ("invalid <what> protobuf: ...", with the offset) or the limit hit."""
    try:
        walk(ctx, blob, schema, root, visitor)
    except ProtoError as exc:
        return [malformed.finding(blob.name, f"invalid {what} protobuf: {exc}",
                                  offset=exc.offset)]
    except LimitHit as hit:
        return [hit.finding(blob.name)]
    return []
