"""The tamper matrix (the changes ``model_signing`` 1.1.1's ``verify key`` was tried
against: bytes flipped, files added, removed, renamed or swapped, symlinks, ``.git/``, another
key, truncated or edited signatures), each row from a freshly signed model."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from signing_helpers import (
    KeyPair,
    read_bundle,
    read_statement,
    replace_payload,
    sha256_hex,
    statement_for,
    write_bundle,
)

from appliance.errors import SigningError
from appliance.signing import verify


def _fails(model: Path, public: Path, code: str, sig: Path | None = None) -> SigningError:
    with pytest.raises(SigningError) as info:
        verify(model, public, sig)
    err = info.value
    assert err.code == code, err.diagnostics()
    assert err.where and err.fix, err.diagnostics()
    return err


def test_untouched_model_verifies(signed: Path, keys: KeyPair) -> None:
    manifest = verify(signed, keys.public)
    on_disk = {p.name: sha256_hex(p.read_bytes()) for p in signed.iterdir()
               if p.name != "model.sig"}
    assert dict(manifest) == on_disk
    assert manifest.model_name == "model"


def test_byte_flipped_names_path_and_hex_digests(signed: Path, keys: KeyPair) -> None:
    weights = signed / "model.safetensors"
    before = weights.read_bytes()
    data = bytearray(before)
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    err = _fails(signed, keys.public, "digest_mismatch")
    assert err.where == "model.safetensors"
    assert sha256_hex(before) in err.message and sha256_hex(bytes(data)) in err.message


@pytest.mark.parametrize("name, content", [
    ("extra.bin", b"\x00" * 10),
    ("empty.txt", b""),
    ("sub/dir/new.json", b"{}"),
    (".git/config", b"[core]\n"),
    (".gitattributes", b"* text\n"),
])
def test_file_added_is_unsigned(signed: Path, keys: KeyPair, name: str, content: bytes) -> None:
    target = signed / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content)
    err = _fails(signed, keys.public, "unsigned_file_present")
    assert err.where == name and name in err.message


def test_file_removed(signed: Path, keys: KeyPair) -> None:
    (signed / "config.json").unlink()
    err = _fails(signed, keys.public, "missing_file")
    assert err.where == "config.json"


def test_file_renamed(signed: Path, keys: KeyPair) -> None:
    (signed / "model.safetensors").rename(signed / "model-00001-of-00001.safetensors")
    err = _fails(signed, keys.public, "unsigned_file_present")
    assert err.where == "model-00001-of-00001.safetensors"


def test_files_swapped(signed: Path, keys: KeyPair) -> None:
    a, b = signed / "config.json", signed / "tokenizer.json"
    tmp = signed / "swap.tmp"
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)
    err = _fails(signed, keys.public, "digest_mismatch")
    assert err.where in ("config.json", "tokenizer.json")


def test_symlink_added(signed: Path, keys: KeyPair) -> None:
    (signed / "link.json").symlink_to("config.json")
    err = _fails(signed, keys.public, "symlink_not_allowed")
    assert err.where == "link.json"


def test_file_replaced_by_symlink_to_identical_copy(
        signed: Path, keys: KeyPair, tmp_path: Path) -> None:
    outside = tmp_path / "outside-config.json"
    outside.write_bytes((signed / "config.json").read_bytes())
    (signed / "config.json").unlink()
    (signed / "config.json").symlink_to(outside)
    err = _fails(signed, keys.public, "symlink_not_allowed")
    assert err.where == "config.json"


def test_directory_symlink_added(signed: Path, keys: KeyPair, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (signed / "etcdir").symlink_to(tmp_path / "elsewhere")
    _fails(signed, keys.public, "symlink_not_allowed")


def test_wrong_key(signed: Path, other_keys: KeyPair) -> None:
    _fails(signed, other_keys.public, "key_mismatch")


def _drop_hint(sig: Path) -> None:
    bundle = read_bundle(sig)
    del bundle["verificationMaterial"]["publicKey"]["hint"]
    write_bundle(sig, bundle)


def test_hint_removed_and_wrong_key(signed: Path, other_keys: KeyPair) -> None:
    _drop_hint(signed / "model.sig")
    _fails(signed, other_keys.public, "signature_invalid")


def test_hint_removed_right_key_still_checks_signature(signed: Path, keys: KeyPair) -> None:
    _drop_hint(signed / "model.sig")
    assert len(verify(signed, keys.public)) == 3
    (signed / "config.json").write_text("{}")
    _fails(signed, keys.public, "digest_mismatch")


def test_truncated_signature(signed: Path, keys: KeyPair) -> None:
    sig = signed / "model.sig"
    sig.write_bytes(sig.read_bytes()[:200])
    _fails(signed, keys.public, "bundle_malformed")


def test_empty_signature(signed: Path, keys: KeyPair) -> None:
    (signed / "model.sig").write_bytes(b"")
    _fails(signed, keys.public, "bundle_malformed")


def test_signature_missing(signed: Path, keys: KeyPair) -> None:
    (signed / "model.sig").unlink()
    _fails(signed, keys.public, "signature_missing")


def test_payload_digest_edited(signed: Path, keys: KeyPair) -> None:
    sig = signed / "model.sig"
    statement = read_statement(sig)
    files = {r["name"]: r["digest"] for r in statement["predicate"]["resources"]}
    (signed / "config.json").write_text('{"evil": true}')
    files["config.json"] = sha256_hex(b'{"evil": true}')
    replace_payload(sig, statement_for(files))  # consistent root digest, stale signature
    _fails(signed, keys.public, "signature_invalid")


def test_payload_ignore_paths_edited(signed: Path, keys: KeyPair) -> None:
    sig = signed / "model.sig"
    statement = read_statement(sig)
    statement["predicate"]["serialization"]["ignore_paths"].append("model.safetensors")
    replace_payload(sig, statement)
    _fails(signed, keys.public, "signature_invalid")


@pytest.mark.parametrize("index", [0, 10, -1])
def test_signature_byte_flipped(signed: Path, keys: KeyPair, index: int) -> None:
    sig = signed / "model.sig"
    bundle = read_bundle(sig)
    raw = bytearray(base64.b64decode(bundle["dsseEnvelope"]["signatures"][0]["sig"]))
    raw[index] ^= 0x01
    bundle["dsseEnvelope"]["signatures"][0]["sig"] = base64.b64encode(bytes(raw)).decode()
    write_bundle(sig, bundle)
    _fails(signed, keys.public, "signature_invalid")


def test_model_folder_missing(tmp_path: Path, keys: KeyPair, signed: Path) -> None:
    _fails(tmp_path / "nope", keys.public, "model_not_found", signed / "model.sig")


def test_model_folder_is_symlink(tmp_path: Path, keys: KeyPair, signed: Path) -> None:
    link = tmp_path / "current"
    link.symlink_to(signed)
    _fails(link, keys.public, "symlink_not_allowed", signed / "model.sig")


def test_fifo_added_is_never_opened(signed: Path, keys: KeyPair) -> None:
    from signing_helpers import record_opens

    os.mkfifo(signed / "pipe")
    with record_opens() as opened:
        err = _fails(signed, keys.public, "special_file")
    assert err.where == "pipe"
    assert not [p for p in opened if p.endswith("pipe")]
