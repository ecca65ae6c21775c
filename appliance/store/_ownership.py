"""Ownership model of the store at serve time: the serving user must not be able to change
what it serves.

Write bits alone do not prove that: the *owner* of a 0444 file or 0555 folder can
``chmod`` it back and rewrite it. The documented model is "store owned by root (or an admin
user), files 0444, folders 0555, served by the unit's ``appliance`` user". At each
``serve --model NAME`` start, :func:`check_served_version` therefore refuses, for the served
version:

* ``store_owned_by_server`` — any of these owned by the serving process's effective uid:
  the store root's ancestors, the store root, the name folder and its ``state.json``, the
  version folder, ``model.sig``, ``record.json`` and everything under ``model/`` (the owner
  could chmod it writable again, swap ``current``, or rename the version away);
* ``store_writable`` — the store root, the name folder, ``state.json`` or an ancestor
  writable by group or others (an ancestor with the sticky bit, such as ``/tmp``, is
  accepted: others cannot rename what they do not own; a symlinked root is followed and
  its target and the target's ancestors are checked), or any write bit on the version
  folder, ``model.sig`` or ``record.json`` (0555 / 0444). ``model/`` itself is checked by
  ``_serve._check_tree`` (same code).

The uid rule does not apply to **root** (euid 0): root can write any file whoever owns it,
so no ownership proves anything against it, and refusing would refuse every root-run serve
(tests, CI, a container's entry point). It is returned as a warning line instead, which
``appliance serve`` prints. The policy key ``[store] allow_owner_serve = true`` (default
false) skips the uid rule for a non-root user too, with its own warning line: a developer's
own store, a test run as a non-root user. Under systemd the unit's ``PrivateUsers=yes``
maps every uid but root and ``appliance`` to ``nobody``; a store owned by root or an admin
user is accepted, one owned by ``appliance`` is refused. Only ``lstat`` is used: O(files),
no content read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from appliance.store._layout import BUNDLE, MODEL_DIR, RECORD, STATE, StoreError

ROOT_WARNING = (
    "serving as root: the store ownership check does not apply (root can change any store "
    "file); run `appliance serve` as an unprivileged user, such as the unit's `appliance` "
    "user")
OWNER_WARNING = (
    "store.allow_owner_serve is true: a store owned by the serving user is accepted, so the "
    "serving user could change what it serves; never set it in production")
_FIX_OWNER = ("give the store to root or an admin user (`chown -R root:root STORE`) and serve "
              "as another user (the unit's `appliance` user); re-import if it may have "
              "changed")
_FIX_MODE = ("remove the group/other write bits (`chmod go-w PATH`); store folders are 0555 "
             "and files 0444 below the name folder")


def _owned(path: Path, info: os.stat_result, euid: int) -> None:
    if info.st_uid == euid:
        raise StoreError(f"store path '{path}' is owned by uid {euid}, the user serving it: "
                         "the owner can make it writable again", code="store_owned_by_server",
                         where=str(path), fix=_FIX_OWNER)


def _writable(path: Path, info: os.stat_result, bits: int) -> None:
    if info.st_mode & bits:
        raise StoreError(f"store path '{path}' is writable (mode {stat.filemode(info.st_mode)})"
                         "; the serving user must not be able to change the store",
                         code="store_writable", where=str(path), fix=_FIX_MODE)


def check_served_version(root: Path, name: str, digest: str, euid: int | None = None,
                         allow_owner: bool = False) -> list[str]:
    """Check the ownership model for version ``<root>/<name>/<digest>`` as served by
    ``euid`` (default: this process's effective uid); ``allow_owner`` (policy
    ``store.allow_owner_serve``) skips the uid rule. Returns warning lines (serving as root,
    or the uid rule skipped); raises ``StoreError`` (``store_owned_by_server``,
    ``store_writable``, ``store_io_error`` when a path cannot be examined)."""
    euid = os.geteuid() if euid is None else euid
    warnings = [ROOT_WARNING] if euid == 0 else [OWNER_WARNING] if allow_owner else []
    if allow_owner:
        euid = 0  # the uid rule below is skipped for root
    name_dir = root / name
    version = name_dir / digest
    try:
        real = Path(os.path.realpath(root))  # a symlinked root: check where it leads
        for path in [*reversed(real.parents), real]:
            info = os.stat(path)
            if euid != 0:
                _owned(path, info, euid)
            if path != real and info.st_mode & stat.S_ISVTX:
                continue  # /tmp-like: others cannot rename what they do not own
            _writable(path, info, 0o022)
        for path in (name_dir, name_dir / STATE):
            if path.name == STATE and not os.path.lexists(path):
                continue
            info = os.lstat(path)
            if euid != 0:
                _owned(path, info, euid)
            _writable(path, info, 0o022)
        for path in (version, version / BUNDLE, version / RECORD):
            info = os.lstat(path)
            if euid != 0:
                _owned(path, info, euid)
            _writable(path, info, 0o222)
        if euid != 0:
            for folder, dirs, files in os.walk(version / MODEL_DIR):
                for entry in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
                    _owned(Path(entry), os.lstat(entry), euid)
    except OSError as exc:
        raise StoreError(f"cannot examine the store version '{version}': "
                         f"{exc.strerror or exc}", code="store_io_error",
                         where=str(exc.filename or version),
                         fix="check the store's filesystem and its permissions") from None
    return warnings
