"""Safetensors output, streamed tensor by tensor.

The safetensors library writes from tensors held in memory (``save_file`` takes a dict of
whole tensors; ``serialize_file`` a dict of whole byte strings), so a checkpoint would have
to fit in memory twice. Here the header is computed first from the plan (every shape,
dtype and offset is known before a byte is read: safetensors format, huggingface/
safetensors ``README`` "Format": 8-byte little-endian header length, a JSON header padded
with spaces to a multiple of 8, then the tensors' bytes back to back in header order),
then each tensor's bytes go to their offset in the file. A raw tensor (stored as it is
written) is copied in the kernel and hashed from the output (``appliance.convert._copy``);
any other is read from the source, byteswapped and converted in bounded chunks, hashed and
written. Two tensors are in flight (``LANES``), each with its own hashing thread.
Memory, per lane: none for a copied tensor beyond one read-back buffer; ``DEPTH + 1``
chunks (``CHUNK``) for a contiguous tensor read into Python; for a strided view, the span
of source elements it covers (at most ``max(SPAN_MIN, the tensor's size)``, else read
piecewise) plus ``DEPTH + 1`` output chunks.
Reading the result back with the library (tests, ``appliance scan``) checks the header.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import as_strided

from appliance.convert._copy import (
    BACK_CHUNK,
    DEPTH,
    Copier,
    Sink,
    Writeback,
    pread_into,
    pwrite_all,
)
from appliance.convert._dtypes import convert_array
from appliance.convert._errors import ConvertError
from appliance.convert._plan import TensorPlan

CHUNK = 4 << 20  # bytes read (or emitted) per step of a tensor that is not copied as it is
LANES = 2  # tensors in flight, each hashed on its own thread
TILE = 128  # elements per side of a tile when transposing
SPAN_MIN = 64 << 20  # a strided view whose source span is at most this is read at once


@dataclass(frozen=True)
class Written:
    """One tensor as written: its name, output file, and SHA-256 of its bytes."""

    name: str
    file: str
    sha256: str


def shard_names(count: int) -> list[str]:
    """``model.safetensors`` for one shard, else ``model-0000i-of-0000n.safetensors``."""
    if count == 1:
        return ["model.safetensors"]
    return [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]


def split_shards(tensors: list[TensorPlan], max_bytes: int) -> list[list[TensorPlan]]:
    """Tensors in order, cut into shards of at most ``max_bytes`` (a larger tensor alone)."""
    shards: list[list[TensorPlan]] = [[]]
    size = 0
    for t in tensors:
        if shards[-1] and size + t.nbytes > max_bytes:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += t.nbytes
    return shards if shards[0] else []


def header(tensors: list[TensorPlan]) -> tuple[bytes, list[TensorPlan]]:
    """The 8-byte length plus padded JSON header, and the tensors in data order (wider
    elements first, so every tensor starts aligned to its element size)."""
    ordered = sorted(tensors, key=lambda t: -t.out.size)
    doc: dict[str, object] = {"__metadata__": {"format": "pt"}}
    pos = 0
    for t in ordered:
        doc[t.name] = {"dtype": t.out.name, "shape": list(t.shape),
                       "data_offsets": [pos, pos + t.nbytes]}
        pos += t.nbytes
    raw = json.dumps(doc, separators=(",", ":"), ensure_ascii=True).encode()
    raw += b" " * (-len(raw) % 8)
    return len(raw).to_bytes(8, "little") + raw, ordered


def _source_dtype(t: TensorPlan) -> np.dtype[np.generic]:
    dt: np.dtype[np.generic] = np.dtype(t.dtype.numpy)
    return dt.newbyteorder(">") if t.storage.big_endian else dt


def _emit_array(t: TensorPlan, arr: npt.NDArray[np.generic], sink: Sink) -> None:
    if t.storage.big_endian and t.dtype.size > 1:
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    out = convert_array(arr, t.dtype, t.out)
    sink.put(np.ascontiguousarray(out).reshape(-1).data.cast("B"))


@dataclass
class _Shard:
    """What the tensors of one shard share: the output ``fd``, the hashing/writing thread,
    the in-kernel copier, and buffers made when first needed (``DEPTH + 1`` read buffers
    of ``CHUNK`` for tensors read into Python, one read-back buffer for copied ranges)."""

    fd: int
    pool: ThreadPoolExecutor
    writeback: Writeback
    copier: Copier
    _bufs: list[bytearray] = field(default_factory=list)
    _back: memoryview | None = None

    def bufs(self) -> list[bytearray]:
        if not self._bufs:
            self._bufs = [bytearray(CHUNK) for _ in range(DEPTH + 1)]
        return self._bufs

    def back(self) -> memoryview:
        if self._back is None:
            self._back = memoryview(bytearray(BACK_CHUNK))
        return self._back


def _contiguous(t: TensorPlan, sink: Sink, shard: _Shard) -> None:
    size = t.dtype.size
    start = t.storage.offset + t.offset * size
    total = t.numel * size
    raw = not t.storage.big_endian or size == 1
    raw = raw and t.out is t.dtype
    pos = shard.copier.copy(t.storage.fd, start, total, sink) if raw else 0
    step = CHUNK // size * size
    turn = 0
    while pos < total:
        n = min(step, total - pos)
        bufs = shard.bufs()
        buf = bufs[turn % len(bufs)]  # not in flight: at most DEPTH others are
        turn += 1
        view = memoryview(buf)[:n]
        pread_into(t.storage.fd, view, start + pos, t.source)
        if raw:
            sink.put(view)
        else:
            _emit_array(t, np.frombuffer(buf, dtype=_source_dtype(t), count=n // size), sink)
        pos += n


def _strided(t: TensorPlan, sink: Sink, offset: int, shape: tuple[int, ...],
             stride: tuple[int, ...], budget: int) -> None:
    """Emit the view ``shape``/``stride`` at element ``offset`` in C order."""
    size = t.dtype.size
    if not shape:
        _read_view(t, sink, offset, shape, stride)
        return
    inner = 1 + sum((d - 1) * s for d, s in zip(shape[1:], stride[1:], strict=True))
    per = (budget // size - inner) // stride[0] + 1 if stride[0] else shape[0]
    if per < 1:
        for i in range(shape[0]):
            _strided(t, sink, offset + i * stride[0], shape[1:], stride[1:], budget)
        return
    for i in range(0, shape[0], per):
        k = min(per, shape[0] - i)
        _read_view(t, sink, offset + i * stride[0], (k, *shape[1:]), stride)


def _read_view(t: TensorPlan, sink: Sink, offset: int, shape: tuple[int, ...],
               stride: tuple[int, ...]) -> None:
    size = t.dtype.size
    span = 1 + sum((d - 1) * s for d, s in zip(shape, stride, strict=True))
    buf = bytearray(span * size)
    pread_into(t.storage.fd, memoryview(buf), t.storage.offset + offset * size, t.source)
    base = np.frombuffer(buf, dtype=_source_dtype(t))
    view = as_strided(base, shape=shape, strides=tuple(s * size for s in stride),
                      writeable=False)
    if not shape:
        _emit_array(t, view.reshape(1), sink)
        return
    row = max(1, (view.size // max(1, shape[0])) * size)
    rows = max(1, CHUNK // row)
    for i in range(0, shape[0], rows):
        _emit_array(t, _dense(view[i:i + rows]).reshape(-1), sink)


def _dense(a: npt.NDArray[np.generic]) -> npt.NDArray[np.generic]:
    """``a`` in C order. When its last axis is strided (a transposed weight), copied in
    ``TILE`` x ``TILE`` tiles of the last two axes: both sides of each tile stay in cache,
    about 3x faster than one strided pass."""
    if a.ndim < 2 or a.strides[-1] == a.itemsize:
        return np.ascontiguousarray(a)
    out = np.empty(a.shape, a.dtype)
    for i in range(0, a.shape[-2], TILE):
        for j in range(0, a.shape[-1], TILE):
            out[..., i:i + TILE, j:j + TILE] = a[..., i:i + TILE, j:j + TILE]
    return out


def _produce(t: TensorPlan, lane: _Shard, pos: int) -> Sink:
    """Send ``t``'s output bytes to the shard at offset ``pos`` through ``lane``; the sink,
    whose pieces may still be in flight (on an error they are waited for first)."""
    sink = Sink(lane.fd, lane.pool, pos, lane.back(), lane.writeback, t.source)
    try:
        if t.numel:
            if t.contiguous:
                _contiguous(t, sink, lane)
            else:
                budget = max(SPAN_MIN, t.numel * t.dtype.size)
                _strided(t, sink, t.offset, t.shape, t.stride, budget)
    except BaseException:
        sink.drain()
        raise
    return sink


def _finished(t: TensorPlan, sink: Sink) -> str:
    digest = sink.finish()
    if sink.count != t.nbytes:  # pragma: no cover - a bug in the plan, never in the input
        raise ConvertError(f"tensor {t.name}: wrote {sink.count} bytes, planned {t.nbytes}",
                           code="convert_io", where=t.name, fix="report this bug")
    return digest


def write_tensor(t: TensorPlan, shard: _Shard, pos: int) -> str:
    """Write ``t``'s output bytes to the shard at offset ``pos``; their SHA-256."""
    return _finished(t, _produce(t, shard, pos))


def write_shard(path: str, tensors: list[TensorPlan], name: str,
                progress: Callable[[int], None] | None = None) -> list[Written]:
    """Write one safetensors file at ``path`` (created, never overwritten), fsynced once
    at the end (its writeback started early, range by range). Opened read-write: copied
    ranges are read back to be hashed.

    Tensors alternate between ``LANES`` lanes, each with its own hashing thread and
    buffers, so one tensor's digest is taken while the next one is copied: the tensor
    digests do not wait for each other (measured: the tensor path was the critical path,
    with the source file's digest done at about half the time). A lane's tensor is
    finished (its digest taken) before the lane takes the next one."""
    head, ordered = header(tensors)
    out: list[Written] = []
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                 0o644)
    try:
        pwrite_all(fd, head, 0)
        pos = len(head)
        with ExitStack() as stack:
            writeback, copier = Writeback(fd), Copier()
            lanes = [_Shard(fd, stack.enter_context(ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="convert-write")), writeback, copier)
                for _ in range(LANES)]
            open_: deque[tuple[TensorPlan, Sink]] = deque()
            stack.callback(_drain_all, open_)
            for i, t in enumerate(ordered):
                if len(open_) == LANES:
                    _finish_one(open_, name, out, progress)
                open_.append((t, _produce(t, lanes[i % LANES], pos)))
                pos += t.nbytes
            while open_:
                _finish_one(open_, name, out, progress)
        os.fsync(fd)
    finally:
        os.close(fd)
    return out


def _finish_one(open_: deque[tuple[TensorPlan, Sink]], name: str, out: list[Written],
                progress: Callable[[int], None] | None) -> None:
    t, sink = open_.popleft()
    out.append(Written(t.name, name, _finished(t, sink)))
    if progress is not None:
        progress(t.nbytes)


def _drain_all(open_: deque[tuple[TensorPlan, Sink]]) -> None:
    """On an error: wait for every piece still in flight (the fd is closed after)."""
    for _, sink in open_:
        sink.drain()


def file_sha256(fd: int, size: int) -> str:
    """SHA-256 of a whole open file, read by offset in chunks."""
    h = hashlib.sha256()
    view = memoryview(bytearray(BACK_CHUNK))
    pos = 0
    while pos < size:
        n = os.preadv(fd, [view], pos)
        if n <= 0:
            break
        h.update(view[:n])
        pos += n
    return h.hexdigest()
