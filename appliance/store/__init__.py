"""The trusted model store: import a signed model once, serve its verified bytes in place.

``import_model`` verifies a signed folder against the policy's trust store while copying it
into ``<root>/<name>/<manifest digest>/model`` (files 0444, folders 0555, one atomic rename);
``open_for_serve`` proves at each start that the version still holds those bytes (fs-verity
digests where the filesystem has it, else a parallel shard re-hash) and returns it as a
``CheckedVersion`` (the folder the engine loads directly: no copy, no extra disk per start;
not :class:`appliance.config.models.ServedModel`, a ``[[models]]`` entry of the policy).
``models_*`` list, show, switch, roll back and remove versions. Layout: ``_layout``; the
ownership model checked at serve time (``served_folder``): ``_ownership``.

Errors are ``StoreError`` (``store_*`` codes) or ``SigningError`` (signature, trust-store and
plain-file codes), both ``ApplianceError``.

May import: :mod:`appliance.signing`, :mod:`appliance.errors`; never the policy (callers pass
the trust store and root) or anything above it.
"""

from __future__ import annotations

from pathlib import Path

from appliance.store._import import Imported, import_model
from appliance.store._layout import Ref, Store, StoreError
from appliance.store._manage import list_models, remove, rollback, show, use
from appliance.store._serve import CheckedVersion, open_for_serve

__all__ = [
    "CheckedVersion", "Imported", "Ref", "Store", "StoreError", "import_model", "is_store_ref",
    "list_models", "open_for_serve", "remove", "rollback", "served_folder", "show", "use",
]


def is_store_ref(text: str) -> bool:
    """True when a ``serve --model`` value names a store model (``NAME`` or
    ``NAME@DIGEST``) rather than a folder path (which contains a ``/``)."""
    return "/" not in text and text not in (".", "..")


def served_folder(policy_store_root: Path, ref: str, trust: object,
                  allow_owner: bool = False) -> CheckedVersion:
    """``serve --model NAME``: check store version ``ref`` under ``policy_store_root``
    against ``trust`` (a ``signing.TrustStore`` or a PEM key path) and return it; the engine
    loads ``.path``. First the ownership model (``_ownership``: nothing of the version owned
    by the serving user, ``store_owned_by_server``; nothing group/other-writable,
    ``store_writable``; ``allow_owner``, policy ``store.allow_owner_serve``, skips the uid
    rule), then what ``open_for_serve`` checks; ``.warnings`` holds the lines ``serve``
    prints (serving as root, uid rule skipped). Raises ``StoreError`` / ``SigningError``."""
    import dataclasses

    from appliance.signing import TrustStore
    from appliance.store._ownership import check_served_version

    keys = trust if isinstance(trust, (TrustStore, Path)) else Path(str(trust))
    store, parsed = Store(policy_store_root), Ref.parse(ref)
    store.require()
    digest = store.resolve(parsed)
    warnings = check_served_version(store.root, parsed.name, digest, allow_owner=allow_owner)
    served = open_for_serve(store, Ref(parsed.name, digest), keys)
    return dataclasses.replace(served, warnings=tuple(warnings))
