"""Parallel SHA-256 of a model folder in fixed-size shards, for the import record and the
serve-start check.

A signed manifest holds one SHA-256 per whole file, which one core must compute in order;
a 2 GiB single-file model would then verify at one core's speed. Import therefore also
records the SHA-256 of every ``SHARD_BYTES`` slice of every file, and the serve-start check
re-hashes those slices on all usable cores (``signing.workers``), each thread reading with
``os.preadv`` into its own 1 MiB buffer (``hashlib`` releases the GIL while it hashes).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from appliance.signing import ModelTree, run_parallel

SHARD_BYTES = 64 * 1024 * 1024
"""Slice size of the recorded shard digests (bytes)."""
_CHUNK = 1 << 20


@dataclass(frozen=True)
class FileFacts:
    """What the record keeps per file: size (bytes), inode number and shard digests."""

    size: int
    inode: int
    shards: tuple[str, ...]


class ShardMismatch(Exception):
    """A slice hashed differently from the record: (file, shard index)."""

    def __init__(self, name: str, index: int) -> None:
        super().__init__(name, index)
        self.name = name
        self.index = index


def shard_count(size: int, shard_bytes: int = SHARD_BYTES) -> int:
    return max(1, -(-size // shard_bytes))


def hash_shards(tree: ModelTree, names: list[str],
                expected: Mapping[str, tuple[str, ...]] | None = None,
                shard_bytes: int = SHARD_BYTES) -> dict[str, FileFacts]:
    """Open every named file under ``tree`` (plain files only, see ``ModelTree.open_file``),
    hash its ``shard_bytes`` slices on all usable cores and return name -> ``FileFacts``.

    With ``expected`` (name -> recorded shard digests; every file must be present), a file
    whose size implies another shard count, or a slice that hashes differently, raises
    ``ShardMismatch`` as soon as it is seen; the other threads stop at their next chunk.
    ``SigningError`` from opening propagate; read errors raise ``OSError``."""
    fds: dict[str, int] = {}
    try:
        facts: dict[str, tuple[int, int]] = {}
        tasks: list[tuple[str, int, int, int]] = []
        for name in names:
            fd = tree.open_file(name)
            fds[name] = fd
            info = os.fstat(fd)
            facts[name] = (info.st_size, info.st_ino)
            count = shard_count(info.st_size, shard_bytes)
            if expected is not None and count != len(expected[name]):
                raise ShardMismatch(name, min(count, len(expected[name])) - 1)
            for index in range(count):
                start = index * shard_bytes
                tasks.append((name, index, start, min(shard_bytes, info.st_size - start)))
        tasks.sort(key=lambda task: -task[3])  # biggest first: better balance at the end
        local = threading.local()

        def one(key: str, stop: threading.Event) -> str:
            name, index, start, length = tasks[int(key)]
            buf = getattr(local, "buf", None)
            if buf is None:
                buf = local.buf = memoryview(bytearray(_CHUNK))
            hasher = hashlib.sha256()
            offset, end = start, start + length
            while offset < end:
                if stop.is_set():
                    return ""
                want = min(_CHUNK, end - offset)
                got = os.preadv(fds[name], [buf[:want]], offset)
                if got <= 0:
                    raise ShardMismatch(name, index)  # the file shrank while being hashed
                hasher.update(buf[:got])
                offset += got
            digest = hasher.hexdigest()
            if expected is not None and digest != expected[name][index]:
                raise ShardMismatch(name, index)
            return digest

        results = run_parallel([str(i) for i in range(len(tasks))], one)
        shards: dict[str, list[str]] = {name: [""] * shard_count(facts[name][0], shard_bytes)
                                        for name in names}
        for key, digest in results.items():
            name, index, _start, _length = tasks[int(key)]
            shards[name][index] = digest
        return {name: FileFacts(facts[name][0], facts[name][1], tuple(shards[name]))
                for name in names}
    finally:
        for fd in fds.values():
            os.close(fd)
