"""Moving tensor bytes into a shard: the output sink and the in-kernel copy.

:class:`Sink` writes one tensor's output bytes at explicit offsets (``os.pwrite``) and
hashes them (SHA-256) on one worker thread, in order, while the caller produces the next
piece: hashlib and the I/O calls release the GIL. A piece is either bytes the caller made
(:meth:`Sink.put`: dtype conversion, byte swapping, a strided view gathered) or a range of
the output file the caller has already filled (:meth:`Sink.put_written`): the worker then
reads that range back into one reused buffer and hashes it, so the digest is of the bytes
in the output file.

:class:`Copier` fills such ranges for raw tensors (stored as they are written: same dtype,
little-endian, contiguous) with ``os.copy_file_range`` (Linux copy_file_range(2), kernel
5.3+ for any two files of one filesystem): the kernel copies page-cache pages, or shares
extents where the filesystem has reflinks, and the bytes never pass through a Python
buffer. Per GiB on the 2-core bench host this costs about 0.35 CPU s against 0.55 for
reading into a buffer and writing it out (``bench/README.md``, checkpoint conversion).
Where the call is missing or refused (another OS; ``EXDEV`` across filesystems;
``EINVAL``/``EOPNOTSUPP`` from a filesystem without it; ``ENOSYS``/``EPERM`` from a seccomp
filter) the copier says so once and the caller reads, hashes and writes instead.

:class:`Writeback` starts the disk writes of a shard early: every ``WRITEBACK_BYTES`` of
output in the file (copied, or written by the worker), it asks the kernel to start writing
that range back (``posix_fadvise(POSIX_FADV_DONTNEED)``: Linux mm/fadvise.c starts
writeback of the range's dirty pages without waiting and drops only pages already clean;
these were dirtied just now, so they stay cached for the read-back). The final ``fsync``
of the shard then waits for the last range only, instead of flushing the whole shard
after the hashing is done; it is still what makes the shard durable. Measured on the
2-core bench host: the fsync at the end 0.9 -> 0.02 s for 2 GiB.

Errors: a source that ends early is ``convert_io`` (the source changed or is truncated).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

from appliance.convert._errors import ConvertError

WRITEBACK_BYTES = 256 << 20  # output bytes between two writeback starts
DEPTH = 2  # pieces hashed/written behind the one being produced
COPY_CHUNK = 32 << 20  # bytes per copy_file_range call (one piece hashed behind it)
# Bytes per pwrite. Larger writes make the page cache allocate large folios, which on the
# bench's VM host (free pages returned to the hypervisor) cost 6-20x the kernel CPU of
# 64 KiB writes: 512 MiB in 4 MiB writes 0.9-3.3 s of system time, in 64 KiB 0.12-0.18 s;
# the syscalls added cost ~20 us per MiB elsewhere.
WRITE_PIECE = 64 << 10
BACK_CHUNK = 1 << 20  # read-back buffer for hashing copied ranges (fits the L2 cache)
# copy_file_range errors that mean "not here", not "this file is bad".
NO_KERNEL_COPY = frozenset({errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP,
                            errno.EPERM, errno.ENOTSUP})


def _ended(what: str) -> ConvertError:
    return ConvertError(f"{what}: the file ended while reading tensor data", code="convert_io",
                        where=what, fix="the source changed or is truncated; copy it again")


def pread_into(fd: int, view: memoryview, offset: int, what: str) -> None:
    """Fill ``view`` from ``fd`` at ``offset``; a file that ends first is ``convert_io``."""
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], offset + done)
        if n <= 0:
            raise _ended(what)
        done += n


def pwrite_all(fd: int, data: memoryview | bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset``, at most ``WRITE_PIECE`` bytes per call."""
    view = memoryview(data).cast("B")
    while view:
        n = os.pwrite(fd, view[:WRITE_PIECE], offset)
        view = view[n:]
        offset += n


class Writeback:
    """Early writeback of one shard (see the module doc); called on the writer's thread
    with the end of each range that is in the file, in increasing order. Advice only: where
    ``posix_fadvise`` is missing or fails, it stops advising."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.start = 0
        self.on = hasattr(os, "posix_fadvise")

    def done(self, end: int) -> None:
        if not self.on or end - self.start < WRITEBACK_BYTES:
            return
        try:
            os.posix_fadvise(self.fd, self.start, end - self.start, os.POSIX_FADV_DONTNEED)
        except OSError:
            self.on = False
        self.start = end


class Sink:
    """One tensor's output bytes, written from ``pos`` on and hashed on ``pool``'s single
    thread. At most ``DEPTH`` pieces are in flight: a caller that reuses buffers keeps
    ``DEPTH + 1`` of them. ``back``: the shard's read-back buffer (worker thread only);
    ``writeback``: its early writeback, told on the caller's thread of each range that is
    in the file (copied, or a piece the worker has written), so the writeback's CPU is
    not spent on the worker, which the hashing keeps busy."""

    def __init__(self, fd: int, pool: ThreadPoolExecutor, pos: int, back: memoryview,
                 writeback: Writeback, what: str) -> None:
        self.fd = fd
        self.writeback = writeback
        self.pool = pool
        self.pos = pos
        self.back = back
        self.what = what
        self.hash = hashlib.sha256()
        self.count = 0
        self.pending: deque[tuple[Future[None], int]] = deque()

    def _bytes(self, data: memoryview | bytes, pos: int) -> None:
        self.hash.update(data)
        pwrite_all(self.fd, data, pos)

    def _written(self, pos: int, n: int) -> None:
        end = pos + n
        while pos < end:
            view = self.back[:min(len(self.back), end - pos)]
            pread_into(self.fd, view, pos, self.what)
            self.hash.update(view)
            pos += len(view)

    def _wait(self) -> None:
        done, end = self.pending.popleft()
        done.result()
        self.writeback.done(end)

    def _submit(self, n: int, fn: object, *args: object) -> None:
        while len(self.pending) >= DEPTH:
            self._wait()
        self.pending.append((self.pool.submit(fn, *args), self.pos + n))  # type: ignore[arg-type]
        self.pos += n
        self.count += n

    def put(self, data: memoryview | bytes) -> None:
        """Hash and write ``data`` next (the caller keeps it unchanged until it is done)."""
        self._submit(len(data), self._bytes, data, self.pos)

    def put_written(self, n: int) -> None:
        """The next ``n`` output bytes are already in the file: hash them from there."""
        self.writeback.done(self.pos + n)
        self._submit(n, self._written, self.pos, n)

    def drain(self) -> None:
        """Wait for every piece, ignoring their errors (after an error of the caller)."""
        while self.pending:
            done, _ = self.pending.popleft()
            with contextlib.suppress(Exception):  # the caller's error is the one raised
                done.result()

    def finish(self) -> str:
        """Wait for every piece; the SHA-256 of the tensor's bytes."""
        while self.pending:
            self._wait()
        return self.hash.hexdigest()


class Copier:
    """In-kernel copies from source files into one shard, until the kernel refuses."""

    def __init__(self) -> None:
        self.kernel = hasattr(os, "copy_file_range")

    def copy(self, src: int, start: int, total: int, sink: Sink) -> int:
        """Copy up to ``total`` bytes at ``start`` of ``src`` to the sink's position; the
        bytes done. Fewer than ``total`` only when in-kernel copying is not available (then
        ``self.kernel`` is false and the caller copies the rest itself)."""
        done = 0
        while done < total and self.kernel:
            n = min(COPY_CHUNK, total - done)
            try:
                got = os.copy_file_range(src, sink.fd, n, start + done, sink.pos)
            except OSError as exc:
                if exc.errno not in NO_KERNEL_COPY:
                    raise
                self.kernel = False
                break
            if got <= 0:
                raise _ended(sink.what)
            sink.put_written(got)
            done += got
        return done
