"""Replace a small file in one step, create a new file durably, make a rename durable: the
appliance's three file-writing primitives.

``replace_file(path, data, mode)`` writes ``data`` (bytes) to a temporary file in
``path``'s own folder (named ``.<name>.<random>.tmp``, so a crash leaves nothing that
looks like the real file), flushes and fsyncs it, sets ``mode`` (e.g. ``0o600`` for
secrets, ``0o644`` otherwise), renames it over ``path`` (POSIX ``rename(2)``: readers
see the old file or the new one, never a mix), then fsyncs the folder so the rename
survives a power cut. On any failure, interrupts included, the temporary file is removed
and ``path`` is left as it was.

Errors: the ``OSError`` of the step that failed, unchanged. Each caller turns it into its
own error with its own code (``SigningError`` ``io_error``, ``StoreError``
``store_disk_full``..., ``FeedError`` ``feed_install_failed``), since what to fix depends
on what was being written. Used for signature bundles, the store's ``state.json``, the
installed advisory feed, the keys file and the gateway's quota state.

``write_new_file(path, data, mode, final_mode=None)`` creates ``path``, which must not
exist (``O_EXCL``: never replaces or truncates anything, and a symlink at ``path`` is not
followed), with ``mode`` (the umask applies), writes all of ``data``, fsyncs it, and then,
if ``final_mode`` is given, sets it exactly (``fchmod``: the umask does not apply; e.g.
``0o444`` for the store's read-only files, or a key file's own mode). Errors:
``FileExistsError`` when ``path`` exists, else the ``OSError`` of the failed step; a file
created before a later step failed is left in place (callers write into folders they
discard on failure). Used for signing keys, the store's bundle and record, and the
converter's index, config and provenance files.

``sync_folder(folder)`` fsyncs ``folder`` so that entries created, renamed or removed in
it survive a power cut. Filesystems that cannot fsync a folder (``EINVAL``, ``ENOTSUP``)
are accepted; other errors are raised.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path


def replace_file(path: Path, data: bytes, mode: int) -> None:
    """Atomically replace ``path`` with ``data`` (mode ``mode``); see the module text."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with open(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    sync_folder(path.parent)  # errors after the rename: ``path`` already holds ``data``


NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def write_new_file(path: str | os.PathLike[str], data: bytes, mode: int, *,
                   final_mode: int | None = None) -> None:
    """Create ``path`` exclusively with ``data``, fsynced; see the module text."""
    fd = os.open(path, NEW_FILE, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        if final_mode is not None:
            os.fchmod(fd, final_mode)
    finally:
        os.close(fd)


def sync_folder(folder: str | os.PathLike[str]) -> None:
    """fsync ``folder`` (durable entries); see the module text."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(descriptor)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(descriptor)
