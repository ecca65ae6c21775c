"""Bounded, chunked reading of a pickle stream out of a ``Blob``.

The whole blob is never read at once: at most ``CHUNK`` bytes (or one opcode argument of
up to ``INLINE_MAX`` bytes) are buffered; larger arguments are skipped by offset.
"""

from __future__ import annotations

from scanner.core.context import LimitHit
from scanner.core.model import Blob

CHUNK = 1 << 20  # bytes fetched from the blob per refill
INLINE_MAX = 1 << 20  # largest opcode argument read into memory; larger ones are skipped


class Truncated(Exception):
    """The blob ends before the bytes an opcode needs (``offset``: where they start)."""

    def __init__(self, offset: int, need: int) -> None:
        super().__init__(f"needs {need} bytes at offset {offset}, blob ends first")
        self.offset = offset
        self.need = need


class Reader:
    """Sequential reader over ``blob[start:]`` that refuses to pass ``start + max_bytes``.

    Raises ``Truncated`` when the blob ends first and ``LimitHit("max_pickle_bytes")``
    when the stream would run past the limit.

    Frames (protocol 4 ``FRAME``, PEP 3154) are tracked the two ways CPython has read
    them. ``drop_frames=False`` (``pickle.loads`` of bytes; pickletools): reads go
    straight through frame ends. ``drop_frames=True`` (the C unpickler before 3.13.15 /
    3.14.7 reading a file object without ``peek``, such as ``torch.load``'s BytesIO):
    an opcode or argument that does not fit in the rest of the current frame discards
    that rest and is read from the bytes after the frame (python/cpython#154848). Either
    way the first such straddle (or a frame opened inside another) is recorded in
    ``straddled``: the two readings then disagree, and the pure-Python and patched C
    unpicklers refuse the stream.
    """

    def __init__(self, blob: Blob, start: int, max_bytes: int,
                 drop_frames: bool = False) -> None:
        self.blob = blob
        self.size = blob.size
        self.start = start
        self.max_bytes = max_bytes
        self.limit_end = min(self.size, start + max_bytes)
        self.buf = b""
        self.base = start  # absolute offset of buf[0]
        self.i = 0  # read index into buf
        self.drop = drop_frames
        self.frame_end: int | None = None  # absolute end of the current frame
        self.straddled: int | None = None  # offset of the first frame straddle

    # -- frames --------------------------------------------------------------------

    def open_frame(self, n: int) -> None:
        """A FRAME of ``n`` bytes starts at the current position (bounds checked by the
        caller)."""
        fe = self.frame_end
        if fe is not None and self.pos < fe:  # a frame inside an unfinished frame
            self._straddle()
            if self.drop:
                if self.pos + n <= fe:
                    return  # old C: the new frame is inside the buffered one; no change
                self._jump(fe)
                if fe + n > self.size:
                    raise Truncated(fe, n)
        self.frame_end = self.pos + n
        if len(self.buf) > self.frame_end - self.base:
            self.buf = self.buf[: self.frame_end - self.base]

    def _straddle(self) -> None:
        if self.straddled is None:
            self.straddled = self.pos

    def _jump(self, to: int) -> None:
        self.buf, self.base, self.i = b"", to, 0

    def _frame_check(self, n: int) -> None:
        """Before reading ``n`` bytes that the buffer does not hold: end the frame when
        the read reaches past it (recording a straddle; dropping its rest if asked)."""
        fe = self.frame_end
        if fe is None or self.pos + n <= fe:
            return
        if self.pos < fe:
            self._straddle()
            if self.drop:
                self._jump(fe)
        self.frame_end = None

    @property
    def pos(self) -> int:
        """Absolute offset of the next unread byte."""
        return self.base + self.i

    def _bound(self, n: int) -> None:
        end = self.pos + n
        if end > self.limit_end:
            if end > self.size:
                raise Truncated(self.pos, n)
            raise LimitHit("max_pickle_bytes", self.max_bytes, end - self.start)

    def _load(self, n: int) -> None:
        """Make ``buf[i:i+n]`` available (the caller checked the bounds)."""
        keep = self.buf[self.i :]
        fetch_at = self.pos + len(keep)
        want = max(n, CHUNK) - len(keep)
        want = min(want, self.limit_end - fetch_at)
        if self.frame_end is not None and fetch_at < self.frame_end:
            want = min(want, self.frame_end - fetch_at)  # the buffer never crosses a frame
        more = self.blob.read_at(fetch_at, want) if want > 0 else b""
        self.base = self.pos
        self.buf = keep + more
        self.i = 0
        if len(self.buf) < n:  # the blob returned less than its size promised
            raise Truncated(self.pos, n)

    def byte(self) -> int:
        """Read one byte (an opcode or a 1-byte argument)."""
        if self.i >= len(self.buf):
            self._frame_check(1)
            self._bound(1)
            self._load(1)
        b = self.buf[self.i]
        self.i += 1
        return b

    def read(self, n: int) -> bytes:
        """Read exactly ``n`` bytes (``n <= INLINE_MAX``)."""
        if self.i + n > len(self.buf):
            self._frame_check(n)
            self._bound(n)
            self._load(n)
        out = self.buf[self.i : self.i + n]
        self.i += n
        return out

    def skip(self, n: int) -> None:
        """Advance ``n`` bytes without reading them (bounds still checked)."""
        if self.i + n <= len(self.buf):
            self.i += n
            return
        self._frame_check(n)
        self._bound(n)
        new = self.pos + n
        self.buf = b""
        self.base = new
        self.i = 0

    def readline(self, keep: int) -> tuple[bytes, int]:
        """Read through the next ``\\n``; return (first ``keep`` bytes, full length).

        The newline is consumed and not returned. Raises ``Truncated`` when no newline
        comes before the end of the blob.
        """
        start = self.pos
        parts: list[bytes] = []
        kept = 0
        while True:
            j = self.buf.find(b"\n", self.i)
            stop = j if j >= 0 else len(self.buf)
            if kept < keep:
                piece = self.buf[self.i : min(stop, self.i + keep - kept)]
                parts.append(piece)
                kept += len(piece)
            if j >= 0:
                length = self.base + j - start
                self.i = j + 1
                return b"".join(parts), length
            self.i = len(self.buf)
            fe = self.frame_end
            if fe is not None and self.pos >= fe:
                if start < fe:  # the line runs past the frame
                    self._straddle()
                    if self.drop:  # old C: the partial line is dropped, read again
                        parts, kept, start = [], 0, self.pos
                self.frame_end = None
            if self.pos >= self.limit_end:
                if self.limit_end >= self.size:
                    raise Truncated(start, self.pos - start + 1)
                raise LimitHit("max_pickle_bytes", self.max_bytes)
            self._load(1)
