"""``appliance models list|show|use|rollback|remove``: versions per name, the current one
and rollback. All changes run under the store lock and replace ``state.json`` atomically.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

from appliance import signing
from appliance.store._layout import Ref, Store, io_failure, store_error
from appliance.store._serve import read_record


def list_models(store: Store) -> list[dict[str, Any]]:
    """One entry per name: ``{"name", "current", "versions": [digest...]}``."""
    return [{"name": name, "current": store.read_state(name)["current"],
             "versions": store.versions(name)} for name in store.names()]


def show(store: Store, ref: Ref) -> dict[str, Any]:
    """Record summary of one version (default: current) plus the name's state."""
    store.require()
    digest = store.resolve(ref)
    record = read_record(store.version_dir(ref.name, digest))
    state = store.read_state(ref.name)
    files = record["files"]
    return {
        "name": ref.name, "digest": digest, "current": state["current"] == digest,
        "previous": state["history"][-1] if state["history"] else None,
        "path": str(store.version_dir(ref.name, digest) / "model"),
        "imported_at": record.get("imported_at"), "source": record.get("source"),
        "signer": record.get("signer"), "verity": record.get("verity"),
        "files": len(files), "bytes": sum(int(f.get("size", 0)) for f in files.values()),
        "versions": store.versions(ref.name),
    }


def use(store: Store, ref: Ref) -> str:
    """Make ``ref`` (``NAME@DIGEST``) the current version; the old current is pushed on the
    rollback history. Returns the full digest. Raises ``store_not_found``/``store_bad_name``."""
    if ref.digest is None:
        raise store_error("say which version to use: NAME@DIGEST", "store_bad_name", ref,
                          "see `appliance models show NAME` for the versions")
    store.require()
    with store.lock():
        digest = store.resolve(ref)
        state = store.read_state(ref.name)
        if state["current"] != digest:
            history = [d for d in state["history"] if d != digest]
            if state["current"] is not None:
                history.append(state["current"])
            store.write_state(ref.name, digest, history)
    return digest


def rollback(store: Store, name: str) -> str:
    """Make the previous current version current again. Returns its digest.
    Raises ``store_no_previous`` when there is none left."""
    store.require()
    with store.lock():
        state = store.read_state(name)
        present = set(store.versions(name))
        history = [d for d in state["history"] if d in present and d != state["current"]]
        if not history:
            raise store_error(f"model '{name}' has no previous version to roll back to",
                              "store_no_previous", name,
                              "choose a version with `appliance models use NAME@DIGEST`")
        previous = history.pop()
        store.write_state(name, previous, history)
    return str(previous)


def _discard(store: Store, path: Path) -> None:
    """Move ``path`` out of sight (rename into ``.tmp``), then delete it."""
    store.ensure()
    trash = Path(tempfile.mkdtemp(prefix="removed-", dir=store.root / ".tmp"))
    try:
        os.chmod(path, 0o700)
        os.rename(path, trash / path.name)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.rmdir(trash)
        raise io_failure(f"cannot remove '{path}'", path, exc) from None
    for version in (trash / path.name, *(trash / path.name).iterdir()):
        if version.is_dir() and not version.is_symlink():
            signing.discard_stage(version)
    signing.discard_stage(trash)


def remove(store: Store, ref: Ref) -> list[str]:
    """Remove one version (``NAME@DIGEST``; not the current one: ``store_version_current``)
    or, for a bare ``NAME``, the name with all its versions. Returns the removed digests."""
    store.require()
    with store.lock():
        if ref.digest is None:
            versions = store.versions(ref.name)
            if not store.name_dir(ref.name).is_dir():
                raise store_error(f"no model named '{ref.name}'", "store_not_found", ref,
                                  "list them with `appliance models list`")
            _discard(store, store.name_dir(ref.name))
            return versions
        digest = store.resolve(ref)
        state = store.read_state(ref.name)
        if state["current"] == digest:
            raise store_error(f"'{ref.name}@{digest[:12]}' is the current version",
                              "store_version_current", ref,
                              "switch first (`appliance models use` / `rollback`), or remove "
                              "the whole name")
        _discard(store, store.version_dir(ref.name, digest))
        store.write_state(ref.name, state["current"],
                          [d for d in state["history"] if d != digest])
        return [digest]
