"""P-384 interop with model_signing 1.1.1 both ways, and our encrypted PKCS#8 key format
(golden/README.md "P-384 and encrypted keys")."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from signing_helpers import GOLDEN, read_bundle, read_statement

from appliance.errors import SigningError
from appliance.signing import TrustedKey, TrustStore, sign, verify
from appliance.signing._keys import load_private_key

P384 = GOLDEN / "p384"
PUB = P384 / "test-key-p384.pub"
PEM = P384 / "test-key-p384.pem"
PASSPHRASE = b"golden-test-passphrase"


def test_model_signing_p384_bundle_verifies_with_trust_store() -> None:
    trust = TrustStore((TrustedKey("golden-p384", PUB, "P-384"),))
    manifest = verify(P384 / "model", trust)
    assert list(manifest) == ["config.json", "model.safetensors", "tokenizer.json"]
    assert manifest.signer.algorithm == "P-384"  # type: ignore[attr-defined]


def test_our_p384_bundle_matches_theirs_and_verifies(tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(P384 / "model", model)
    (model / "model.sig").unlink()
    sig = sign(model, PEM, passphrase=PASSPHRASE)
    ours, theirs = read_statement(sig), read_statement(P384 / "model" / "model.sig")
    for statement in (ours, theirs):
        del statement["predicate"]["serialization"]["ignore_paths"]
    assert ours == theirs
    assert read_bundle(sig)["verificationMaterial"] == read_bundle(
        P384 / "model" / "model.sig")["verificationMaterial"]
    verify(model, PUB)


def test_bundle_model_signing_accepted_verifies_here(tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(P384 / "model", model)
    shutil.copy(P384 / "ours-model.sig", model / "model.sig")
    verify(model, PUB)


def test_encrypted_golden_key_needs_its_passphrase() -> None:
    assert PEM.read_bytes().startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    assert load_private_key(PEM, PASSPHRASE).curve.name == "secp384r1"
    with pytest.raises(SigningError) as info:
        load_private_key(PEM)
    assert info.value.code == "passphrase_required"
