"""Which process of a parallel folder scan (:mod:`scanner.scan.parallel`) analyses which
file: :class:`Claims` (first to meet a group of copies claims it, in shared memory),
:func:`shard_of` (a fixed hash share when there is no table) and :class:`Share` (one
process's share and walk order). Kept apart from ``parallel`` so that the walk
(:mod:`scanner.scan.walk`), which ``parallel`` drives, can name a share without importing
its driver.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import zlib


def _group(name: str, size: int) -> int:
    """CRC-32 of a file's base name and size: copies of one file share it (stable across
    processes and runs, unlike ``hash``)."""
    return zlib.crc32(f"{size}/{name}".encode("utf-8", "surrogateescape"))


def _row(name: str) -> int:
    """The claims row of a base name (CRC-32, stable across processes)."""
    return zlib.crc32(name.encode("utf-8", "surrogateescape")) % Claims.ROWS


def _column(size: int) -> int:
    """The claims column of a size within its name's row (a multiplicative hash: sizes are
    often multiples of 8, so their low bits alone would crowd a few columns)."""
    return ((size * 0x9E3779B1) & 0xFFFFFFFF) >> (32 - Claims.COLUMN_BITS)


def shard_of(name: str, size: int, of: int) -> int:
    """The share (``0 <= share < of``) of a file by a fixed hash of base name and size
    (when there is no ``Claims`` table)."""
    return _group(name, size) % of


class Claims:
    """Which process analyses each group of files (same base name and size: the copies of
    one file), decided by the first process that meets the group in the walk.

    A byte per group slot (0 = unclaimed, else share + 1) in an anonymous shared mapping
    that forked processes inherit, written under a POSIX record lock on an anonymous file
    (``memfd_create``; the kernel drops the lock of a process that dies, so a killed
    helper never blocks the others). Slots form a table of ``ROWS`` rows (by base name)
    of ``2 ** COLUMN_BITS`` columns (by size): groups that collide in a slot share an
    owner (only balance suffers), and two groups collide only when their names share a
    row. Every process walks every entry once (in its own order, ``Share.reverse``) and
    the owner claims a group at the first of its files that it meets, so it meets all the
    others after claiming: every file is analysed by exactly one process, and a process
    stuck on a large file leaves the rest to the others.

    ``marks`` has one 16-bit mask per row: bit ``i`` is set when share ``i`` claims a slot
    of that row (``MAX_JOBS`` <= 16), so a helper can learn, from a file's name alone
    (no ``lstat``), that it owns nothing in the file's row (``Share.cedes``).
    """

    ROWS = 1 << 12
    COLUMN_BITS = 4
    SLOTS = ROWS << COLUMN_BITS

    def __init__(self) -> None:
        self.table = mmap.mmap(-1, self.SLOTS)  # MAP_SHARED | MAP_ANONYMOUS
        self._marks = mmap.mmap(-1, 2 * self.ROWS)
        self.marks = memoryview(self._marks).cast("H")
        try:  # an anonymous file to lock (no tempfile/shutil import on the CLI's path)
            self.lock = os.memfd_create("scanner-claims", os.MFD_CLOEXEC)
        except (AttributeError, OSError):
            import tempfile

            with tempfile.TemporaryFile() as handle:
                self.lock = os.dup(handle.fileno())

    def owner(self, name: str, size: int, me: int) -> int:
        """The share that analyses ``name``/``size``; claims it for ``me`` if nobody has
        (and sets ``me``'s bit in the row's mark)."""
        row = _row(name)
        slot = (row << self.COLUMN_BITS) | _column(size)
        value = self.table[slot]
        if not value:
            fcntl.lockf(self.lock, fcntl.LOCK_EX)
            try:
                value = self.table[slot]
                if not value:
                    value = self.table[slot] = me + 1
                    self.marks[row] |= 1 << me
            finally:
                fcntl.lockf(self.lock, fcntl.LOCK_UN)
        return value - 1

    def close(self) -> None:
        self.table.close()
        self.marks.release()
        self._marks.close()
        os.close(self.lock)


class Share:
    """Share ``index`` of ``of`` processes scanning one folder: which files it analyses
    (``claims``, or ``shard_of`` without one), and its walk order: odd shares walk in
    descending name order, so with claims two processes start at opposite ends of the
    folder and meet in the middle (a large file near either end, such as the last model
    folder's tokenizer, no longer leaves one process waiting for the other)."""

    def __init__(self, index: int, of: int, claims: Claims | None = None) -> None:
        self.index, self.of, self.claims = index, of, claims
        self.reverse = claims is not None and index % 2 == 1
        # Relative paths of the regular files this share took (analysed, or reported when
        # they could not be opened): the processes' union must cover every regular file
        # (``scanner.scan.parallel.judged_by_none``).
        self.owned: set[str] = set()
        # Rows this helper ceded (see ``cedes``); None for the lead or without a table.
        self.ceded = bytearray(Claims.ROWS) if claims is not None and index else None
        self.known: dict[tuple[str, int], int] = {}  # (name, size) -> owner (``mine``)

    def cedes(self, name: str) -> bool:
        """Whether this share leaves every file named ``name`` to the others without
        learning its size (no ``lstat``; a fleet's helper met ~3,900 files it did not own
        and ``lstat``-ed each, 25 ms): true for a helper (never the lead) once the name's
        row is marked by another share and not by this one. A ceded row stays ceded, so
        this share never claims in it: it owns no group of the row, and the lead, which
        never cedes and claims every group nobody holds, or the owner, which never cedes
        its own rows, analyses each of the row's files. (Slots collide only within a row,
        so owning a group means having marked its row.) The mark is read without the lock:
        a stale read misses a bit and only costs the ``lstat`` it would have saved."""
        ceded = self.ceded
        if ceded is None:
            return False
        row = _row(name)
        if ceded[row]:
            return True
        marks = self.claims.marks[row]  # type: ignore[union-attr]  # set with ceded
        if marks and not marks >> self.index & 1:
            ceded[row] = 1
            return True
        return False

    def mine(self, rel: str, name: str, size: int) -> bool:
        """Whether this share analyses file ``rel`` (base ``name``, ``size`` bytes as this
        process saw it); recorded in :attr:`owned` when it does. A group's owner never
        changes once claimed, so each process remembers the owners it has learnt (a
        fleet's lead meets each group of copies once per copy)."""
        key = (name, size)
        owner = self.known.get(key)
        if owner is None:
            if self.claims is not None:
                owner = self.claims.owner(name, size, self.index)
            else:
                owner = shard_of(name, size, self.of)
            self.known[key] = owner
        if owner == self.index:
            self.owned.add(rel)
            return True
        return False
