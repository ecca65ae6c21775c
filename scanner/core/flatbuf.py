"""A small bounds-checked reader of FlatBuffer objects, shared by the formats built on
FlatBuffers (ExecuTorch ``.pte`` programs, PyTorch Mobile ``PTMF`` modules).

Layout read (FlatBuffers' public "internals" description; all numbers little-endian): a
table starts with an i32 offset back to its vtable (``table - value``); a vtable is u16
vtable size, u16 table size, then one u16 per field slot (offset of the field from the
table start, 0 = absent); a field holding a reference stores a u32 offset forward from
the field's own position; a string is u32 length, the bytes and a NUL; a vector is u32
count and the elements (references to tables are u32 offsets, each from its own slot).

Hand-written rather than the ``flatbuffers`` package (maintained, used by the tests to
build files): its Python runtime reads through ``flatc``-generated classes and has no
verifier, so a crafted offset raises whatever ``struct`` or indexing raises, or silently
reads another object's bytes. Here every offset, vtable, string and vector is checked
against the region before it is read; any violation raises ``Bad`` (the caller reports
the file as malformed: fail closed). Bounds: ``max_items`` table references followed in
all (``LimitHit`` beyond it).
"""

from __future__ import annotations

from typing import Protocol

from scanner.core.context import LimitHit


class Bad(ValueError):
    """The buffer breaks its format; ``offset`` is a byte offset in the file if known."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset


class Source(Protocol):
    """Random access bytes (a ``Blob``): ``size`` bytes, ``read_at(offset, length)``."""

    @property
    def size(self) -> int: ...

    def read_at(self, offset: int, length: int) -> bytes: ...


class Reader:
    """Bounds-checked reads of FlatBuffer objects inside ``source[0:size]``.

    ``source`` is read in small pieces (each field, vtable, string), never whole; ``what``
    names the region in messages (``"program data"``); ``limit`` names the ``LimitHit``
    raised past ``max_items`` table references."""

    def __init__(self, source: Source, *, what: str = "buffer", max_items: int = 1 << 20,
                 limit: str = "max_flatbuffer_items") -> None:
        self.source = source
        self.size = source.size
        self.what = what
        self.max_items = max_items
        self.limit = limit
        self.items = 0

    def need(self, at: int, size: int, what: str) -> None:
        """Raise ``Bad`` unless ``[at, at + size)`` lies inside the region."""
        if at < 0 or size < 0 or at + size > self.size:
            raise Bad(f"{what} at {at} (+{size} bytes) is outside the {self.what} "
                      f"({self.size} bytes)", at)

    def bytes_at(self, at: int, size: int, what: str = "bytes") -> bytes:
        self.need(at, size, what)
        data = self.source.read_at(at, size)
        if len(data) != size:
            raise Bad(f"{what} at {at} cannot be read ({len(data)} of {size} bytes)", at)
        return data

    def uint(self, at: int, size: int) -> int:
        return int.from_bytes(self.bytes_at(at, size, f"u{8 * size}"), "little")

    def u8(self, at: int) -> int:
        return self.uint(at, 1)

    def u16(self, at: int) -> int:
        return self.uint(at, 2)

    def u32(self, at: int) -> int:
        return self.uint(at, 4)

    def u64(self, at: int) -> int:
        return self.uint(at, 8)

    def deref(self, at: int) -> int:
        """The object a u32 offset stored at ``at`` points to (forward only)."""
        target = at + self.u32(at)
        self.need(target, 4, "referenced object")
        return target

    def field(self, table: int, slot: int) -> int | None:
        """Absolute position of field ``slot`` of the table at ``table``, or None (absent)."""
        back = int.from_bytes(self.bytes_at(table, 4, "table"), "little", signed=True)
        vtable = table - back
        self.need(vtable, 4, "vtable")
        vt_size, obj_size = self.u16(vtable), self.u16(vtable + 2)
        if vt_size < 4 or vt_size % 2:
            raise Bad(f"vtable at {vtable} has an invalid size {vt_size}", vtable)
        self.need(vtable, vt_size, "vtable")
        self.need(table, obj_size, "table")
        if 4 + 2 * slot + 2 > vt_size:
            return None
        offset = self.u16(vtable + 4 + 2 * slot)
        if not offset:
            return None
        if offset < 4 or offset >= obj_size:
            raise Bad(f"field {slot} of the table at {table} lies outside the table", table)
        return table + offset

    def scalar(self, table: int, slot: int, size: int, default: int = 0) -> int:
        """An unsigned scalar field of ``size`` bytes (1, 2, 4 or 8), or ``default``."""
        at = self.field(table, slot)
        return default if at is None else self.uint(at, size)

    def string_at(self, start: int, limit: int = 1 << 20) -> str:
        """The string object at ``start`` (at most ``limit`` bytes, else ``Bad``)."""
        length = self.u32(start)
        if length > limit:
            raise Bad(f"string at {start} is {length} bytes (at most {limit} read)", start)
        data = self.bytes_at(start + 4, length + 1, "string")
        if data[-1] != 0:
            raise Bad(f"string at {start} is not NUL-terminated", start)
        try:
            return data[:-1].decode("utf-8")
        except UnicodeDecodeError:
            raise Bad(f"string at {start} is not UTF-8", start) from None

    def string(self, table: int, slot: int, limit: int = 1 << 20) -> str | None:
        at = self.field(table, slot)
        return None if at is None else self.string_at(self.deref(at), limit)

    def vector(self, table: int, slot: int, element: int = 4) -> tuple[int, int]:
        """(start of the elements, count) of a vector field; (0, 0) when absent."""
        at = self.field(table, slot)
        if at is None:
            return 0, 0
        start = self.deref(at)
        count = self.u32(start)
        self.need(start + 4, count * element, "vector")
        return start + 4, count

    def count(self, n: int) -> None:
        """Charge ``n`` objects against ``max_items`` (``LimitHit`` beyond)."""
        self.items += n
        if self.items > self.max_items:
            raise LimitHit(self.limit, self.max_items, self.items)

    def tables(self, table: int, slot: int) -> list[int]:
        """The tables a vector-of-tables field points to (counted against ``max_items``)."""
        start, count = self.vector(table, slot)
        self.count(count)
        return [self.deref(start + 4 * i) for i in range(count)]
