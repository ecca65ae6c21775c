"""The installed feed: one file (the exact bundle bytes that were verified), replaced
atomically under an exclusive lock so two imports cannot both pass the serial check.

Layout: ``<feed>`` (``[preflight] advisory_feed``, default
``/var/lib/appliance/advisories/feed.json``, 0644) and ``<feed>.lock`` beside it. The folder
is created 0755 when missing. Writes: temporary file in the same folder, fsync, rename over
``<feed>``, fsync of the folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from appliance.atomic_file import replace_file
from appliance.preflight.feed._errors import FeedError

MAX_FEED_BYTES = 16 << 20
_INSTALL_FIX = "run the import as the user that owns the feed's folder (root), or set " \
               "[preflight] advisory_feed to a writable path"


def read_feed(path: Path) -> bytes | None:
    """The bytes of the feed file at ``path``; ``None`` when there is none. Raises
    ``FeedError`` (``feed_unreadable``) for a file that cannot be read, is not a regular
    file or is larger than 16 MiB."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise FeedError(f"cannot open advisory feed '{path}': {exc.strerror}",
                        code="feed_unreadable", where=str(path),
                        fix="check the path and its permissions") from None
    with open(fd, "rb", buffering=0) as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise FeedError(f"advisory feed '{path}' is not a regular file",
                            code="feed_unreadable", where=str(path), fix="pass a regular file")
        data = handle.read(MAX_FEED_BYTES + 1)
    if len(data) > MAX_FEED_BYTES:
        raise FeedError(f"advisory feed '{path}' is larger than 16 MiB", code="feed_unreadable",
                        where=str(path), fix="pass the file `appliance advisories export` wrote")
    return data


def _install_error(path: Path, exc: OSError) -> FeedError:
    return FeedError(f"cannot install the advisory feed at '{path}': {exc.strerror or exc}",
                     code="feed_install_failed", where=str(path), fix=_INSTALL_FIX)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold ``<path>.lock`` exclusively (creating the folder 0755 if needed)."""
    try:
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
                     0o644)
    except OSError as exc:
        raise _install_error(path, exc) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` in one step (:func:`appliance.atomic_file.replace_file`).
    Raises ``FeedError`` (``feed_install_failed``); nothing is left behind on failure."""
    try:
        replace_file(path, data, mode)
    except OSError as exc:
        raise _install_error(path, exc) from None
