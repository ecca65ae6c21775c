"""Replace a small file in one step: the one atomic writer of the appliance.

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
    _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    """fsync ``folder`` so a rename in it is durable. Filesystems that cannot fsync a
    folder (EINVAL, ENOTSUP) are accepted: the file itself is synced. Other errors are
    raised after the rename (``path`` already holds ``data``)."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(descriptor)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(descriptor)
