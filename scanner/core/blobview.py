"""Zero-copy views over blobs and bounded chunked reading.

A container member stored without compression is analysed through a ``SliceBlob`` (a window
on the outer blob) instead of being copied into memory, so a multi-GiB stored member costs
no memory; scanning code reads any blob in bounded chunks with ``iter_chunks``.
"""

from __future__ import annotations

from collections.abc import Iterator

from scanner.core.context import LimitHit
from scanner.core.model import Blob

CHUNK = 1 << 20  # 1 MiB: read granularity for streaming scans


class SliceBlob:
    """Bytes ``[start, start + size)`` of ``base``, shown as ``name``.

    ``size`` is clamped to what ``base`` holds, so a member whose declared size runs past
    the end of its container reads as truncated, never out of bounds.
    """

    def __init__(self, name: str, base: Blob, start: int, size: int) -> None:
        start = max(0, min(start, base.size))
        self.name = name
        self.base = base
        self.start = start
        self.size = max(0, min(size, base.size - start))

    def read_at(self, offset: int, length: int) -> bytes:
        if offset < 0 or length <= 0 or offset >= self.size:
            return b""
        length = min(length, self.size - offset)
        return self.base.read_at(self.start + offset, length)


def iter_chunks(
    blob: Blob, start: int = 0, end: int | None = None, chunk: int = CHUNK, overlap: int = 0
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, data)`` windows covering ``blob[start:end]``.

    Consecutive windows share ``overlap`` bytes (so a pattern up to ``overlap + 1`` bytes long
    that straddles a chunk boundary is seen whole). Memory: one window at a time.
    """
    stop = blob.size if end is None else min(end, blob.size)
    if chunk <= overlap:
        raise ValueError("chunk must be larger than overlap")
    pos = max(0, start)
    while pos < stop:
        data = blob.read_at(pos, min(chunk, stop - pos))
        if not data:
            return
        yield pos, data
        if pos + len(data) >= stop:
            return
        pos += max(1, len(data) - overlap)


def read_bounded(blob: Blob, limit: int, what: str) -> bytes:
    """All of ``blob``'s bytes, refusing blobs over ``limit`` bytes (raises ``LimitHit``)."""
    if blob.size > limit:
        raise LimitHit(what, limit, blob.size)
    return blob.read_at(0, blob.size)
