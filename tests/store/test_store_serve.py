"""Serve-start check: the store version is served in place, and any change after import is
refused at the next start with its own code (tampering done as the store's owner/root)."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import pytest
from store_helpers import Signer, make_model

from appliance.errors import ApplianceError
from appliance.signing import TrustedKey, TrustStore, fingerprint, load_public_key, sign
from appliance.store import Store, import_model, open_for_serve, served_folder
from appliance.store._hashing import SHARD_BYTES
from appliance.store._layout import Ref


def _imported(store: Store, source: Path, signer: Signer) -> Path:
    return import_model(store, source, signer.trust).path / "model"


def _refused(store: Store, trust: TrustStore, code: str, ref: str = "src") -> ApplianceError:
    with pytest.raises(ApplianceError) as info:
        open_for_serve(store, Ref.parse(ref), trust)
    assert info.value.code == code, info.value.diagnostics()
    assert info.value.fix
    return info.value


def _writable(path: Path) -> None:
    os.chmod(path.parent, 0o755)
    os.chmod(path, 0o644)


def _readonly(path: Path) -> None:
    os.chmod(path, 0o444)
    os.chmod(path.parent, 0o555)


def test_source_changed_after_import_does_not_change_what_is_served(
        store: Store, source: Path, signer: Signer) -> None:
    model = _imported(store, source, signer)
    original = (model / "config.json").read_bytes()
    (source / "config.json").write_text('{"model_type": "changed"}\n')
    shutil.rmtree(source / "sub")
    served = open_for_serve(store, Ref("src"), signer.trust)
    assert served.path == model and (served.path / "config.json").read_bytes() == original


def test_store_file_changed_in_place(store: Store, source: Path, signer: Signer) -> None:
    model = _imported(store, source, signer)
    target = model / "config.json"
    _writable(target)
    data = bytearray(target.read_bytes())
    data[3] ^= 1
    with open(target, "r+b") as handle:  # same inode, same size
        handle.write(data)
    _readonly(target)
    err = _refused(store, signer.trust, "store_file_changed")
    assert err.where == "config.json"


def test_store_file_replaced(store: Store, source: Path, signer: Signer) -> None:
    model = _imported(store, source, signer)
    target = model / "sub" / "tokenizer.json"
    os.chmod(target.parent, 0o755)
    (target.parent / "new").write_bytes(target.read_bytes())
    os.replace(target.parent / "new", target)  # identical bytes, another inode (mv/rename)
    _readonly(target)
    assert _refused(store, signer.trust, "store_file_replaced").where == "sub/tokenizer.json"


def test_store_file_added_and_removed(store: Store, source: Path, signer: Signer) -> None:
    model = _imported(store, source, signer)
    os.chmod(model, 0o755)
    (model / "extra.py").write_text("print('hi')\n")
    os.chmod(model / "extra.py", 0o444)
    os.chmod(model, 0o555)
    assert _refused(store, signer.trust, "store_file_added").where == "extra.py"
    os.chmod(model, 0o755)
    (model / "extra.py").unlink()
    (model / "config.json").unlink()
    os.chmod(model, 0o555)
    assert _refused(store, signer.trust, "store_file_missing").where == "config.json"


def test_store_symlink_and_hard_link_refused(store: Store, source: Path, signer: Signer,
                                             tmp_path: Path) -> None:
    model = _imported(store, source, signer)
    os.link(model / "config.json", tmp_path / "handle.json")
    _refused(store, signer.trust, "hard_link_not_allowed")
    os.unlink(tmp_path / "handle.json")
    os.chmod(model, 0o755)
    (model / "config.json").rename(tmp_path / "c.json")
    (model / "config.json").symlink_to(tmp_path / "c.json")
    os.chmod(model, 0o555)
    _refused(store, signer.trust, "symlink_not_allowed")


def test_writable_store_refused(store: Store, source: Path, signer: Signer) -> None:
    model = _imported(store, source, signer)
    os.chmod(model / "config.json", 0o644)
    assert _refused(store, signer.trust, "store_writable").where == "config.json"


def test_later_shard_change_detected(store: Store, tmp_path: Path, signer: Signer) -> None:
    weights = bytearray(SHARD_BYTES + 4096)
    src = make_model(tmp_path, "big", weights=bytes(weights))
    sign(src, signer.private)
    model = import_model(store, src, signer.trust).path / "model"
    target = model / "model.safetensors"
    _writable(target)
    with open(target, "r+b") as handle:
        handle.seek(SHARD_BYTES + 100)
        handle.write(b"\x01")
    _readonly(target)
    err = _refused(store, signer.trust, "store_file_changed", "big")
    assert "shard 1" in err.message


def test_key_revoked_or_expired_after_import_stops_serving(
        store: Store, source: Path, signer: Signer) -> None:
    _imported(store, source, signer)
    key = signer.trust.keys[0]
    revoked = TrustStore((key,), frozenset({fingerprint(load_public_key(signer.public))}))
    assert "'release'" in _refused(store, revoked, "key_revoked").message
    past = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    expired = TrustStore((TrustedKey(key.name, key.public_key, key.algorithm, None, past),))
    _refused(store, expired, "key_expired")
    future = dt.datetime.now(dt.UTC) + dt.timedelta(days=3)
    early = TrustStore((TrustedKey(key.name, key.public_key, key.algorithm, future, None),))
    _refused(store, early, "key_not_yet_valid")


def test_record_and_signature_tied_to_version(store: Store, source: Path,
                                              signer: Signer) -> None:
    version = _imported(store, source, signer).parent
    record = version / "record.json"
    os.chmod(version, 0o755)
    os.chmod(record, 0o644)
    record.write_text(record.read_text().replace('"sha256": "', '"sha256": "0', 1))
    _refused(store, signer.trust, "store_record_mismatch")
    record.write_text("not json")
    _refused(store, signer.trust, "store_record_invalid")


def test_served_folder_hook_and_unknown_name(store: Store, source: Path,
                                             signer: Signer) -> None:
    model = _imported(store, source, signer)
    # allow_owner: a non-root test run serves the store it just imported (test_store_ownership)
    assert served_folder(store.root, "src", signer.trust, allow_owner=True).path == model
    with pytest.raises(ApplianceError) as info:
        served_folder(store.root, "nope", signer.trust, allow_owner=True)
    assert info.value.code == "store_not_found"
