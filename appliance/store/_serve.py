"""The serve-start check: prove that a store version still holds the verified bytes, then
hand its read-only folder to the engine without copying it.

Order (cheapest first; the first failure refuses):

1. authenticate the stored ``model.sig`` with the policy's trust store *now* (a key revoked
   or expired since import refuses here) and require its root digest to be the version's
   folder name and to agree with ``record.json`` (``store_record_mismatch``);
2. walk ``model/`` (plain files only) and require exactly the signed names
   (``store_file_added``, ``store_file_missing``), no write permission bit on any file or
   folder (``store_writable``), each file's size and inode as recorded
   (``store_file_changed``, ``store_file_replaced``);
3. content: where import enabled fs-verity, the kernel's measured digest of every file must
   equal the recorded one (O(files), independent of size); otherwise every recorded
   ``SHARD_BYTES`` slice is re-hashed on all usable cores and compared
   (``store_file_changed``).
"""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance import signing
from appliance.errors import SigningError
from appliance.signing import Keys, Manifest
from appliance.store import _verity
from appliance.store._hashing import SHARD_BYTES, ShardMismatch, hash_shards
from appliance.store._layout import (
    BUNDLE,
    MAX_RECORD_BYTES,
    MODEL_DIR,
    RECORD,
    RECORD_SCHEMA,
    Ref,
    Store,
    StoreError,
    io_failure,
    store_error,
)

_REIMPORT = "remove this version and import the signed model again (`appliance import`)"


@dataclass(frozen=True)
class CheckedVersion:
    """A checked store version. ``path`` is the read-only folder the engine loads;
    ``method`` is ``fs-verity`` or ``sha256-parallel``; ``seconds`` the check's wall time;
    ``warnings`` the ownership check's lines (``served_folder``)."""

    name: str
    digest: str
    path: Path
    manifest: Manifest
    method: str
    seconds: float
    warnings: tuple[str, ...] = ()  # lines for ``serve`` to print (``_ownership``)


def read_record(version: Path) -> dict[str, Any]:
    """The version's ``record.json``. Raises ``store_record_invalid``."""
    path = version / RECORD
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_RECORD_BYTES + 1)
        record = json.loads(data)
    except (OSError, ValueError) as exc:
        raise store_error(f"cannot read the import record '{path}': {exc}",
                          "store_record_invalid", path, _REIMPORT) from None
    if len(data) > MAX_RECORD_BYTES or not isinstance(record, dict) \
            or record.get("schema") != RECORD_SCHEMA or not isinstance(record.get("files"),
                                                                      dict):
        raise store_error(f"'{path}' is not an import record of schema {RECORD_SCHEMA}",
                          "store_record_invalid", path, _REIMPORT)
    return record


def _record_files(record: dict[str, Any], manifest: Manifest, where: Path,
                  ) -> dict[str, dict[str, Any]]:
    files: dict[str, dict[str, Any]] = record["files"]
    if record.get("digest") != manifest.root_digest or set(files) != set(manifest) or any(
            not isinstance(files[n], dict) or files[n].get("sha256") != manifest[n]
            for n in manifest):
        raise store_error("the import record does not describe the signed manifest",
                          "store_record_mismatch", where, _REIMPORT)
    if record.get("shard_bytes") != SHARD_BYTES or any(
            not isinstance(files[n].get("shards"), list) or not isinstance(
                files[n].get("size"), int) or not isinstance(files[n].get("inode"), int)
            for n in files):
        raise store_error("the import record lacks shard digests of this version",
                          "store_record_invalid", where, _REIMPORT)
    return files


def _refuse(code: str, name: str, message: str) -> StoreError:
    return StoreError(message, code=code, where=name, fix=_REIMPORT)


def _check_tree(model: Path, manifest: Manifest, files: dict[str, dict[str, Any]]) -> None:
    """Names, permission bits, sizes and inodes (no content read)."""
    with signing.ModelTree(model) as tree:
        try:
            signing.compare_names(manifest, tree.walk())
        except SigningError as exc:
            code = {"unsigned_file_present": "store_file_added",
                    "missing_file": "store_file_missing"}.get(exc.code, exc.code)
            raise StoreError(f"store folder '{model}': {exc.message}", code=code,
                             where=exc.where, fix=_REIMPORT) from None
    for root, dirs, names in os.walk(model):
        for entry in [root, *(os.path.join(root, d) for d in dirs)]:
            if os.lstat(entry).st_mode & 0o222:
                raise _refuse("store_writable", entry, f"store folder '{entry}' is writable; "
                              "store versions must be read-only (folders 0555)")
        for entry_name in names:
            path = os.path.join(root, entry_name)
            rel = os.path.relpath(path, model)
            info = os.lstat(path)
            if info.st_mode & 0o222:
                raise _refuse("store_writable", rel, f"store file '{rel}' is writable "
                              f"(mode {stat.filemode(info.st_mode)}); files must be 0444")
            if info.st_ino != files[rel]["inode"]:
                raise _refuse("store_file_replaced", rel, f"store file '{rel}' was replaced "
                              "after import (another inode than the one recorded)")
            if info.st_size != files[rel]["size"]:
                raise _refuse("store_file_changed", rel, f"store file '{rel}' changed after "
                              f"import: {info.st_size} bytes, recorded {files[rel]['size']}")


def _check_verity(model: Path, files: dict[str, dict[str, Any]]) -> None:
    for rel, facts in files.items():
        fd = os.open(model / rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            measured = _verity.measure(fd)
        finally:
            os.close(fd)
        if measured is None or measured != facts.get("verity"):
            raise _refuse("store_file_changed", rel, f"store file '{rel}' changed after "
                          f"import: fs-verity digest {measured or 'missing'}, recorded "
                          f"{facts.get('verity')}")


def open_for_serve(store: Store, ref: Ref, keys: Keys) -> CheckedVersion:
    """Check the store version ``ref`` (``NAME`` = its current version) and return it.

    Raises ``StoreError`` (``store_not_found``, ``store_ambiguous``, ``store_record_invalid``,
    ``store_record_mismatch``, ``store_file_added``, ``store_file_missing``,
    ``store_file_changed``, ``store_file_replaced``, ``store_writable``, ``store_io_error``)
    or ``SigningError`` (bundle and trust-store codes such as ``key_revoked``,
    ``key_expired``; plain-file codes for a symlink, hard link or special file)."""
    started = time.monotonic()
    store.require()
    digest = store.resolve(ref)
    version = store.version_dir(ref.name, digest)
    bundle = version / BUNDLE
    manifest = signing.authenticate_bundle(signing.read_bundle_file(bundle), keys, str(bundle))
    if manifest.root_digest != digest:
        raise store_error(f"the stored signature covers {manifest.root_digest}, not the "
                          f"version folder {digest}", "store_record_mismatch", version,
                          _REIMPORT)
    files = _record_files(read_record(version), manifest, version)
    model = version / MODEL_DIR
    _check_tree(model, manifest, files)
    try:
        if all(facts.get("verity") for facts in files.values()):
            _check_verity(model, files)
            method = "fs-verity"
        else:
            with signing.ModelTree(model) as tree:
                hash_shards(tree, list(manifest),
                            expected={n: tuple(files[n]["shards"]) for n in manifest})
            method = "sha256-parallel"
    except ShardMismatch as exc:
        raise _refuse("store_file_changed", exc.name, f"store file '{exc.name}' changed "
                      f"after import (shard {exc.index} of {SHARD_BYTES} bytes differs from "
                      "the import record)") from None
    except OSError as exc:
        raise io_failure(f"cannot read store version '{version}'", version, exc) from None
    return CheckedVersion(ref.name, digest, model, manifest, method, time.monotonic() - started)
