"""The installed feed: one file (the exact bundle bytes that were verified), replaced
atomically under an exclusive lock so two imports cannot both pass the serial check.

Layout: ``<feed>`` (``[preflight] advisory_feed``, default
``/var/lib/appliance/advisories/feed.json``, 0644), ``<feed>.lock`` and ``<feed>.floor``
beside it. The folder is created 0755 when missing. Writes: temporary file in the same
folder, fsync, rename over ``<feed>``, fsync of the folder.

``<feed>.floor`` (the *floor*, :func:`read_floor` / :func:`write_floor`) holds the highest
serial ever installed, as decimal digits and a newline. Only ``advisories import`` (which
raises it) and ``advisories reset-floor`` (the deliberate reset) write it; both run as root,
the folder's owner (``systemd/appliance.tmpfiles``: root 0755, and the unit mounts it
read-only), so the serving user cannot lower it. A list in force below it is a rollback
(:func:`appliance.preflight.feed.list_in_force`).
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


MAX_FLOOR_BYTES = 64


def floor_path(feed: Path) -> Path:
    """Where the floor of the feed installed at ``feed`` is kept: ``<feed>.floor``."""
    return feed.with_name(feed.name + ".floor")


def read_floor(feed: Path) -> int | None:
    """The floor recorded beside ``feed``; ``None`` when none was ever written. Raises
    ``FeedError`` (``feed_floor_invalid``) for a floor file that cannot be read or does not
    hold one serial: fail closed, never "no floor"."""
    path = floor_path(feed)
    try:
        data = read_feed(path)
    except FeedError as exc:
        raise FeedError(f"cannot read the advisory floor '{path}': {exc.message}",
                        code="feed_floor_invalid", where=str(path), fix=_FLOOR_FIX) from None
    if data is None:
        return None
    text = data[:MAX_FLOOR_BYTES + 1].strip()
    if not text.isdigit() or len(text) > 20:
        raise FeedError(f"the advisory floor '{path}' does not hold a serial",
                        code="feed_floor_invalid", where=str(path), fix=_FLOOR_FIX)
    return int(text)


def write_floor(feed: Path, serial: int) -> None:
    """Record ``serial`` as the floor beside ``feed`` (atomically; call under
    :func:`locked`). Raises ``FeedError`` (``feed_install_failed``)."""
    write_atomic(floor_path(feed), f"{serial}\n".encode())


_FLOOR_FIX = ("as root, after checking the feed folder: `appliance advisories reset-floor` "
              "records the serial of the list in force as the floor "
              "(docs/deployment.md#advisory-floor)")


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
