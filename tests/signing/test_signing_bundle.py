"""Bundle and statement decoding: every malformed or unsupported input fails closed with a
stable code before any model file is read."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest
from signing_helpers import (
    KeyPair,
    forge,
    read_bundle,
    read_statement,
    record_opens,
    sha256_hex,
    statement_for,
    write_bundle,
)

import appliance.signing as signing
from appliance.errors import SigningError
from appliance.signing import verify


def _verify_code(model: Path, public: Path) -> str:
    with pytest.raises(SigningError) as info:
        verify(model, public)
    assert info.value.where and info.value.fix, info.value.diagnostics()
    code: str = info.value.code
    return code


def _files(model: Path) -> dict[str, str]:
    return {p.name: sha256_hex(p.read_bytes()) for p in sorted(model.iterdir())
            if p.name != "model.sig"}


def _edit_bundle(sig: Path, path: list[Any], value: Any) -> None:
    bundle = read_bundle(sig)
    node = bundle
    for key in path[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    write_bundle(sig, bundle)


_DELETE = object()


@pytest.mark.parametrize("path, value, code", [
    (["mediaType"], "application/vnd.dev.sigstore.bundle.v0.2+json", "bundle_unsupported"),
    (["mediaType"], _DELETE, "bundle_malformed"),
    (["dsseEnvelope", "payloadType"], "text/plain", "bundle_unsupported"),
    (["dsseEnvelope"], _DELETE, "bundle_malformed"),
    (["dsseEnvelope", "signatures"], [], "bundle_malformed"),
    (["dsseEnvelope", "payload"], "not base64!", "bundle_malformed"),
    (["dsseEnvelope", "payload"], 7, "bundle_malformed"),
    (["dsseEnvelope", "signatures", 0, "sig"], "@@@", "bundle_malformed"),
    (["verificationMaterial", "publicKey"], _DELETE, "bundle_unsupported"),
    (["verificationMaterial", "publicKey", "hint"], 12, "bundle_malformed"),
    (["verificationMaterial"], [], "bundle_malformed"),
])
def test_bundle_field_errors(signed: Path, keys: KeyPair, path: list[Any], value: Any,
                             code: str) -> None:
    _edit_bundle(signed / "model.sig", path, value)
    assert _verify_code(signed, keys.public) == code


def test_two_signatures_refused(signed: Path, keys: KeyPair) -> None:
    bundle = read_bundle(signed / "model.sig")
    sigs = bundle["dsseEnvelope"]["signatures"]
    sigs.append(dict(sigs[0]))
    write_bundle(signed / "model.sig", bundle)
    assert _verify_code(signed, keys.public) == "bundle_malformed"


def test_certificate_bundle_unsupported(signed: Path, keys: KeyPair) -> None:
    bundle = read_bundle(signed / "model.sig")
    bundle["verificationMaterial"] = {
        "x509CertificateChain": {"certificates": [{"rawBytes": "AAAA"}]}, "tlogEntries": []}
    write_bundle(signed / "model.sig", bundle)
    assert _verify_code(signed, keys.public) == "bundle_unsupported"


@pytest.mark.parametrize("raw", [b"[]", b"null", b"{", b"\xef\xbb\xbf{}", b"\xff\xfe"])
def test_bundle_not_an_object(signed: Path, keys: KeyPair, raw: bytes) -> None:
    (signed / "model.sig").write_bytes(raw)
    assert _verify_code(signed, keys.public) == "bundle_malformed"


def test_bundle_duplicate_keys_refused(signed: Path, keys: KeyPair) -> None:
    text = (signed / "model.sig").read_text()
    dup = text.replace('{"mediaType"', '{"mediaType":"x","mediaType"', 1)
    assert dup != text
    (signed / "model.sig").write_text(dup)
    assert _verify_code(signed, keys.public) == "bundle_malformed"


def test_payload_duplicate_keys_refused(signed: Path, keys: KeyPair) -> None:
    statement = read_statement(signed / "model.sig")
    body = json.dumps(statement)
    forged = body.replace('"predicate": {', '"predicate": {"resources": [], ', 1)
    assert forged != body
    forge(signed / "model.sig", forged.encode(), keys.private)
    assert _verify_code(signed, keys.public) == "bundle_malformed"


def test_bundle_too_large(signed: Path, keys: KeyPair, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(signing, "MAX_BUNDLE_BYTES", 100)
    assert _verify_code(signed, keys.public) == "bundle_malformed"


def test_signature_path_is_fifo(signed: Path, keys: KeyPair) -> None:
    sig = signed.parent / "sig.fifo"
    os.mkfifo(sig)
    with pytest.raises(SigningError) as info:
        verify(signed, keys.public, sig)
    assert info.value.code == "bundle_malformed"


@pytest.mark.parametrize("field, value", [
    ("_type", "https://in-toto.io/Statement/v0.1"),
    ("predicateType", "https://model_signing/Digests/v0.1"),
    ("predicateType", "https://example.com/other"),
])
def test_statement_types_unsupported(signed: Path, keys: KeyPair, field: str,
                                     value: str) -> None:
    statement = statement_for(_files(signed))
    statement[field] = value
    forge(signed / "model.sig", statement, keys.private)
    assert _verify_code(signed, keys.public) == "bundle_unsupported"


@pytest.mark.parametrize("overrides", [
    {"method": "shards", "shard_size": 1000000},
    {"hash_type": "blake2b"},
    {"hash_type": "blake3"},
])
def test_other_serializations_unsupported(signed: Path, keys: KeyPair,
                                          overrides: dict[str, Any]) -> None:
    forge(signed / "model.sig", statement_for(_files(signed), **overrides), keys.private)
    assert _verify_code(signed, keys.public) == "unsupported_hashing"


def test_resource_algorithm_unsupported(signed: Path, keys: KeyPair) -> None:
    statement = statement_for(_files(signed))
    statement["predicate"]["resources"][0]["algorithm"] = "sha256-sharded-1000000"
    forge(signed / "model.sig", statement, keys.private)
    assert _verify_code(signed, keys.public) == "unsupported_hashing"


def test_root_digest_inconsistent(signed: Path, keys: KeyPair) -> None:
    forge(signed / "model.sig", statement_for(_files(signed), root="0" * 64), keys.private)
    assert _verify_code(signed, keys.public) == "manifest_inconsistent"


def test_root_digest_covers_listed_order(signed: Path, keys: KeyPair) -> None:
    files = _files(signed)
    reordered = dict(reversed(list(files.items())))
    forge(signed / "model.sig", statement_for(reordered, root=statement_for(files)["subject"]
                                              [0]["digest"]["sha256"]), keys.private)
    assert _verify_code(signed, keys.public) == "manifest_inconsistent"
    forge(signed / "model.sig", statement_for(reordered), keys.private)
    assert dict(verify(signed, keys.public)) == files


@pytest.mark.parametrize("name, code", [
    ("/etc/passwd", "manifest_path_escape"),
    ("..", "manifest_path_escape"),
    ("a/../config.json", "manifest_path_escape"),
    ("sub\\..\\x", "manifest_path_escape"),
    ("config.json\x00.txt", "manifest_path_escape"),
    ("", "bundle_malformed"),
    ("./config.json", "bundle_malformed"),
    ("sub//config.json", "bundle_malformed"),
    ("sub/", "bundle_malformed"),
    ("\udcff", "bundle_malformed"),
    ("config.json", "bundle_malformed"),  # duplicate of a listed name
])
def test_bad_resource_names(signed: Path, keys: KeyPair, name: str, code: str) -> None:
    files = list(_files(signed).items()) + [(name, "1" * 64)]
    root = sha256_hex(b"".join(bytes.fromhex(d) for _, d in files))
    statement = statement_for(dict(files[:-1]), root=root)
    statement["predicate"]["resources"].append(
        {"algorithm": "sha256", "name": name, "digest": "1" * 64})
    forge(signed / "model.sig", json.dumps(statement).encode(), keys.private)
    with record_opens() as opened:
        assert _verify_code(signed, keys.public) == code
    model_files = set(_files(signed))
    assert not [p for p in opened if os.path.basename(p) in model_files]


@pytest.mark.parametrize("digest", ["A" * 64, "1" * 63, "g" * 64, 5])
def test_bad_resource_digest(signed: Path, keys: KeyPair, digest: object) -> None:
    statement = statement_for(_files(signed))
    statement["predicate"]["resources"][0]["digest"] = digest
    forge(signed / "model.sig", statement, keys.private)
    assert _verify_code(signed, keys.public) == "bundle_malformed"


@pytest.mark.parametrize("mutate", [
    lambda s: s.update(subject=[]),
    lambda s: s["subject"].append(dict(s["subject"][0])),
    lambda s: s["predicate"].pop("resources"),
    lambda s: s["predicate"]["serialization"].pop("method"),
    lambda s: s["predicate"]["serialization"].update(ignore_paths="model.sig"),
    lambda s: s["predicate"].update(resources={"a": 1}),
    lambda s: s["predicate"]["resources"].append("config.json"),
])
def test_statement_structure_errors(signed: Path, keys: KeyPair, mutate: Any) -> None:
    statement = statement_for(_files(signed))
    mutate(statement)
    forge(signed / "model.sig", statement, keys.private)
    assert _verify_code(signed, keys.public) == "bundle_malformed"


def test_urlsafe_base64_accepted(signed: Path, keys: KeyPair) -> None:
    bundle = read_bundle(signed / "model.sig")
    env = bundle["dsseEnvelope"]
    for holder, key in ((env, "payload"), (env["signatures"][0], "sig")):
        holder[key] = base64.urlsafe_b64encode(base64.b64decode(holder[key])).decode()
    write_bundle(signed / "model.sig", bundle)
    assert len(verify(signed, keys.public)) == 3
