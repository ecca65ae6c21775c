"""``appliance import``: verify a signed model folder against the trust store while copying
it into the store, in one read pass of the source, then commit it with one rename.

Steps: authenticate the bundle (trust store: key, algorithm, window, revocation) and
require the folder to hold exactly the signed plain files; copy each file into a private
``<root>/.tmp/import-*`` folder while hashing the bytes written (a thread per file) and
compare with the signed digest; fsync and make the copy read-only; hash the copy in shards
for the record (``_hashing``); enable fs-verity where supported; write ``model.sig`` and
``record.json``; then, under the store lock, ``rename`` the folder to
``<root>/<name>/<digest>`` and update ``state.json``. Any error removes the temporary folder,
so an interrupted or failed import leaves nothing visible and the store unchanged; what a
killed import (SIGKILL, power loss) left in ``.tmp`` is swept by the next import.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance import signing
from appliance.atomic_file import sync_folder, write_new_file
from appliance.signing import Keys, Manifest
from appliance.store import _verity
from appliance.store._hashing import SHARD_BYTES, hash_shards
from appliance.store._layout import (
    BUNDLE,
    MODEL_DIR,
    RECORD,
    RECORD_SCHEMA,
    Store,
    check_name,
    io_failure,
    store_error,
)

FILE_MODE = 0o444
DIR_MODE = 0o555


@dataclass(frozen=True)
class Imported:
    """Result of an import: the version's name, digest and folder, and whether it was new."""

    name: str
    digest: str
    path: Path
    new: bool
    manifest: Manifest


def _sizes(tree: signing.ModelTree, names: list[str]) -> int:
    total = 0
    for name in names:
        fd = tree.open_file(name)
        try:
            total += os.fstat(fd).st_size
        finally:
            os.close(fd)
    return total


def _check_space(where: Path, needed: int) -> None:
    try:
        info = os.statvfs(where)
    except OSError as exc:
        raise io_failure("cannot read free space", where, exc) from None
    free = info.f_bavail * info.f_frsize
    if needed > free:
        raise store_error(
            f"the model needs {needed / 1e9:.2f} GB but the store's filesystem has "
            f"{free / 1e9:.2f} GB free", "store_disk_full", where,
            "free space on the store's filesystem (or remove old versions with "
            "`appliance models remove`), then import again")


def _copy(tree: signing.ModelTree, manifest: Manifest, dest: Path) -> None:
    """Hash-while-copy every signed file into the new folder ``dest`` (0700 while written);
    fsync each file and make it 0444. Raises ``digest_mismatch`` and open/read codes."""
    os.mkdir(dest, 0o700)
    dest_fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        signing.copy_verified(tree, manifest, dest_fd, durable=True)
        os.fsync(dest_fd)
        os.fchmod(dest_fd, DIR_MODE)
    finally:
        os.close(dest_fd)


def _enable_verity(model: Path, names: list[str]) -> dict[str, str] | None:
    """Enable fs-verity on every file and return name -> measured digest, or None when the
    filesystem does not support it (checked on the first file)."""
    out: dict[str, str] = {}
    for name in names:
        fd = os.open(model / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            if not _verity.enable(fd):
                return None
            measured = _verity.measure(fd)
        finally:
            os.close(fd)
        if measured is None:
            return None
        out[name] = measured
    return out


def _record(name: str, manifest: Manifest, src: Path, facts: dict[str, Any],
            verity: dict[str, str] | None) -> bytes:
    signer = manifest.signer
    doc = {
        "schema": RECORD_SCHEMA, "name": name, "digest": manifest.root_digest,
        "model_name": manifest.model_name,
        "imported_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "source": str(src), "signer": signer.to_dict() if isinstance(
            signer, signing.Signer) else None,
        "shard_bytes": SHARD_BYTES, "verity": verity is not None,
        "files": {
            path: {"sha256": manifest[path], "size": facts[path].size,
                   "inode": facts[path].inode, "shards": list(facts[path].shards),
                   "verity": verity[path] if verity else None}
            for path in manifest},
    }
    return json.dumps(doc, indent=1).encode() + b"\n"


def _write_file(folder: Path, name: str, data: bytes) -> None:
    write_new_file(folder / name, data, 0o600, final_mode=FILE_MODE)


def import_model(store: Store, src: Path, keys: Keys, name: str | None = None,
                 signature: Path | None = None, make_current: bool = True) -> Imported:
    """Import the signed model folder ``src`` into ``store`` (see the module docstring).

    ``name`` defaults to the signed subject name. ``make_current`` switches the name's
    current version to this one (the previous current stays available for rollback).
    Importing a version that is already present only (re)sets current.

    Raises ``SigningError`` (every ``signing.verify`` code, trust-store codes, the
    plain-file codes ``symlink_not_allowed`` / ``hard_link_not_allowed`` / ``special_file``,
    ``manifest_incomplete``) or ``StoreError``: ``store_bad_name``, ``store_disk_full`` (checked
    before copying and on ENOSPC while copying; the store is left unchanged),
    ``store_permission``, ``store_io_error``."""
    src = Path(src)
    with signing.open_signed(src, keys, signature) as folder:
        manifest = folder.manifest
        signing.require_servable(manifest)
        target_name = check_name(name or manifest.model_name)
        digest = manifest.root_digest
        store.ensure()
        version = store.version_dir(target_name, digest)
        if version.is_dir():
            if make_current:
                _set_current(store, target_name, digest)
            return Imported(target_name, digest, version, False, manifest)
        _check_space(store.root, _sizes(folder.tree, list(manifest)))
        try:
            with store.lock():  # a sweep never sees a folder before its .busy lock is held
                sweep_stale(store)
                work = Path(tempfile.mkdtemp(prefix=f"import-{target_name}-",
                                             dir=store.root / ".tmp"))
                busy = _hold(work)
        except OSError as exc:
            raise io_failure("cannot create the import folder", store.root, exc) from None
        try:
            model = work / MODEL_DIR
            _copy(folder.tree, manifest, model)
            with signing.ModelTree(model) as copy:
                facts = hash_shards(copy, list(manifest))
            verity = _enable_verity(model, list(manifest))
            _write_file(work, BUNDLE, folder.bundle)
            _write_file(work, RECORD, _record(target_name, manifest, src.resolve(), facts,
                                              verity))
            new = _commit(store, work, target_name, digest, make_current)
        except OSError as exc:
            signing.discard_stage(work)
            raise io_failure(f"importing '{src}' failed", src, exc) from None
        except BaseException:
            signing.discard_stage(work)
            raise
        finally:
            _release(work, busy)
    return Imported(target_name, digest, version, new, manifest)


def _hold(work: Path) -> int:
    """Create and flock ``<work>.busy`` so ``sweep_stale`` leaves a live import alone."""
    fd = os.open(f"{work}.busy", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _release(work: Path, fd: int) -> None:
    with contextlib.suppress(OSError):
        os.unlink(f"{work}.busy")
    os.close(fd)


def sweep_stale(store: Store) -> list[str]:
    """Delete what killed imports and removals left in ``<root>/.tmp`` (never visible, but
    it holds disk): ``import-*`` folders whose ``.busy`` lock no live import holds, and
    ``removed-*`` folders. Call under ``store.lock()``. Returns the names removed."""
    tmp = store.root / ".tmp"
    removed: list[str] = []
    try:
        entries = sorted(os.listdir(tmp))
    except OSError:
        return removed
    for name in entries:
        path = tmp / name
        if name.startswith("removed-") and path.is_dir():
            signing.discard_stage(path)
            removed.append(name)
            continue
        if not name.startswith("import-") or name.endswith(".busy") or not path.is_dir():
            continue
        try:
            fd = os.open(f"{path}.busy", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # a live import holds it
        try:
            signing.discard_stage(path)
            removed.append(name)
            with contextlib.suppress(OSError):
                os.unlink(f"{path}.busy")
        finally:
            os.close(fd)
    return removed


def _set_current(store: Store, name: str, digest: str) -> None:
    with store.lock():
        state = store.read_state(name)
        if state["current"] != digest:
            history = [d for d in state["history"] if d != digest]
            if state["current"] is not None:
                history.append(state["current"])
            store.write_state(name, digest, history)


def _commit(store: Store, work: Path, name: str, digest: str, make_current: bool) -> bool:
    """Rename ``work`` into place under the lock. Returns False when a concurrent import of
    the same version won (``work`` is then discarded)."""
    version = store.version_dir(name, digest)
    with store.lock():
        try:
            store.name_dir(name).mkdir(mode=0o755, exist_ok=True)
            os.rename(work, version)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            signing.discard_stage(work)
            new = False
        else:
            new = True
            os.chmod(version, DIR_MODE)
            with contextlib.suppress(OSError):
                sync_folder(store.name_dir(name))
    if make_current or not store.read_state(name)["current"]:
        _set_current(store, name, digest)
    return new
