"""Interoperability with sigstore/model-transparency ``model_signing`` 1.1.1.

``golden/model/model.sig`` was written by the real library (CLI ``model_signing sign key``,
see golden/README.md) over ``golden/model`` with ``golden/test-key.pem``. Our verifier must
accept it, and our signer must emit the same structure.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from signing_helpers import GOLDEN, read_bundle, read_statement, sha256_hex

from appliance.errors import SigningError
from appliance.signing import require_servable, sign, verify
from appliance.signing._keys import key_hint, load_public_key

MODEL = GOLDEN / "model"
PUB = GOLDEN / "test-key.pub"
PEM = GOLDEN / "test-key.pem"
EXPECTED_NAMES = ["a/x.txt", "a-b/x.txt", "config.json", "model.safetensors", "tokenizer.json"]


def _copy(tmp_path: Path) -> Path:
    dest = tmp_path / "model"
    shutil.copytree(MODEL, dest, symlinks=True)
    return dest


def test_golden_bundle_from_model_signing_verifies() -> None:
    manifest = verify(MODEL, PUB)
    assert list(manifest) == EXPECTED_NAMES  # path-component order: a/x before a-b/x
    for name, digest in manifest.items():
        assert digest == sha256_hex((MODEL / name).read_bytes())
    assert manifest.model_name == "model"
    assert manifest.root_digest == read_statement(MODEL / "model.sig")["subject"][0]["digest"][
        "sha256"]
    assert "model.sig" in manifest.ignore_paths
    require_servable(manifest)


def test_golden_key_hint_matches_ours() -> None:
    hint = read_bundle(MODEL / "model.sig")["verificationMaterial"]["publicKey"]["hint"]
    assert hint == key_hint(load_public_key(PUB))
    assert hint == hashlib.sha256(PUB.read_bytes()).hexdigest()


def test_golden_tampered_copy_fails(tmp_path: Path) -> None:
    model = _copy(tmp_path)
    (model / "a" / "x.txt").write_text("b\n")
    with pytest.raises(SigningError) as info:
        verify(model, PUB)
    assert (info.value.code, info.value.where) == ("digest_mismatch", "a/x.txt")


def test_golden_git_paths_not_exempt(tmp_path: Path) -> None:
    # model_signing ignores .git* by default and records it; we never honour ignore_paths.
    model = _copy(tmp_path)
    (model / ".gitattributes").write_text("* binary\n")
    with pytest.raises(SigningError) as info:
        verify(model, PUB)
    assert (info.value.code, info.value.where) == ("unsigned_file_present", ".gitattributes")


def _shape(value: Any) -> Any:
    """Field names and JSON types, recursively (list shape = set of element shapes)."""
    if isinstance(value, dict):
        return {key: _shape(item) for key, item in value.items()}
    if isinstance(value, list):
        shapes = {json.dumps(_shape(item), sort_keys=True) for item in value}
        return ["list", sorted(shapes)]
    return type(value).__name__


def test_our_bundle_has_golden_layout(tmp_path: Path) -> None:
    model = _copy(tmp_path)
    (model / "model.sig").unlink()
    sig = sign(model, PEM)
    ours, theirs = read_bundle(sig), read_bundle(MODEL / "model.sig")
    assert _shape(ours) == _shape(theirs)
    assert list(ours) == list(theirs)
    ours_st, theirs_st = read_statement(sig), read_statement(MODEL / "model.sig")
    assert _shape(ours_st) == _shape(theirs_st)
    assert ours_st["predicate"]["serialization"]["ignore_paths"] == ["model.sig"]
    for statement in (ours_st, theirs_st):
        del statement["predicate"]["serialization"]["ignore_paths"]
    assert ours_st == theirs_st  # same names, order, digests, subject and policy
    assert ours["verificationMaterial"] == theirs["verificationMaterial"]


def test_our_payload_is_byte_compatible(tmp_path: Path) -> None:
    """Same JSON text as model_signing once ignore_paths agree (indent, field order)."""
    model = _copy(tmp_path)
    (model / "model.sig").unlink()
    sig = sign(model, PEM)
    ours = base64.b64decode(read_bundle(sig)["dsseEnvelope"]["payload"])
    theirs_st = read_statement(MODEL / "model.sig")
    theirs_st["predicate"]["serialization"]["ignore_paths"] = ["model.sig"]
    assert ours == json.dumps(theirs_st, indent=2).encode()
    verify(model, PUB)
