"""Hash-while-copy staging of a verified model into a private, read-only directory.

Verifying files by path and then letting the engine open the same paths leaves a window in
which a file can be swapped (verify-then-load TOCTOU; public bug ``unsigned-extra-files`` F).
Staging closes it: the bytes written to the copy are exactly the bytes hashed, and the copy
is compared with the signed digest before anything may load it.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from appliance.atomic_file import NEW_FILE
from appliance.errors import SigningError
from appliance.signing._fs import DIR_FLAGS, ModelTree
from appliance.signing._manifest import Manifest, digest_mismatch, hash_fd, run_parallel

FILE_MODE = 0o444
DIR_MODE = 0o555


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _stage_error(dest: Path, message: str, code: str, fix: str) -> SigningError:
    return SigningError(message, code=code, where=str(dest), fix=fix)


def _make_dest(dest: Path) -> int:
    try:
        os.mkdir(dest, 0o700)
    except FileExistsError:
        raise _stage_error(dest, f"staging directory '{dest}' already exists",
                           "stage_dest_exists", "pass a path that does not exist yet") from None
    except OSError as exc:
        raise _stage_error(dest, f"cannot create staging directory '{dest}': {exc.strerror}",
                           "io_error", "check the parent directory exists and is writable",
                           ) from None
    return os.open(dest, DIR_FLAGS)


def discard_stage(dest: Path) -> None:
    """Remove a staging directory made by ``stage`` (restores write permission first).
    Missing ``dest`` is not an error."""
    dest = Path(dest)
    if not dest.is_dir() or dest.is_symlink():
        return
    for root, dirs, _files in os.walk(dest):
        os.chmod(root, 0o700)
        for name in dirs:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, 0o700)
    shutil.rmtree(dest)


def copy_verified(tree: ModelTree, manifest: Manifest, dest_fd: int, *,
                  durable: bool = False) -> None:
    """Copy every file of ``manifest`` from ``tree`` into the empty folder open as
    ``dest_fd``, hashing exactly the bytes written (a thread per file); files end 0444 and
    subfolders 0555 (``dest_fd`` itself is left to the caller). ``durable``: fsync each
    file before it is made read-only (the store's import).

    Raises ``SigningError`` ``digest_mismatch`` and the open/read codes of ``tree``;
    ``OSError`` from writing."""
    parents = sorted({"/".join(name.split("/")[:i]) for name in manifest
                      for i in range(1, name.count("/") + 1)}, key=lambda p: p.count("/"))
    for sub in parents:
        os.mkdir(sub, 0o700, dir_fd=dest_fd)

    def copy_one(name: str, stop: threading.Event) -> str:
        src = tree.open_file(name)
        try:
            out = os.open(name, NEW_FILE, 0o600, dir_fd=dest_fd)
            try:
                digest = hash_fd(src, lambda chunk: _write_all(out, chunk), stop)
                if durable:
                    os.fsync(out)
                os.fchmod(out, FILE_MODE)
            finally:
                os.close(out)
        finally:
            os.close(src)
        if digest != manifest[name]:
            raise digest_mismatch(name, manifest[name], digest)
        return digest

    run_parallel(list(manifest), copy_one)
    for sub in reversed(parents):
        os.chmod(sub, DIR_MODE, dir_fd=dest_fd)


def stage(tree: ModelTree, manifest: Manifest, dest: Path) -> None:
    """Copy every file of ``manifest`` from ``tree`` into the new directory ``dest``,
    hashing exactly the bytes written (a thread per file), then make the copy read-only
    (files 0444, directories 0555).

    Raises ``SigningError``: ``stage_dest_exists``, ``digest_mismatch`` (the copied bytes
    differ from the signed digest), ``missing_file``, ``symlink_not_allowed``,
    ``special_file``, ``io_error``. On any error ``dest`` is removed."""
    dest = Path(dest)
    dest_fd = _make_dest(dest)
    try:
        copy_verified(tree, manifest, dest_fd)
        os.fchmod(dest_fd, DIR_MODE)
    except BaseException as exc:
        os.close(dest_fd)
        discard_stage(dest)
        if isinstance(exc, OSError):
            raise _stage_error(dest, f"staging into '{dest}' failed: {exc}", "io_error",
                               "check free space and permissions") from None
        raise
    os.close(dest_fd)

