"""Trust store: named keys, algorithm, validity window, revocation, rotation; keygen curves
and encrypted private keys; the [trust] policy section."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from signing_helpers import KeyPair, make_model

from appliance.config.policy import load_policy
from appliance.errors import PolicyError, SigningError
from appliance.signing import TrustedKey, TrustStore, fingerprint, keygen, sign, verify
from appliance.signing._keys import load_private_key, load_public_key

NOW = dt.datetime.now(dt.UTC)
DAY = dt.timedelta(days=1)


def _entry(pair: KeyPair, name: str = "release", algorithm: str = "P-256",
           not_before: dt.datetime | None = None, not_after: dt.datetime | None = None,
           ) -> TrustedKey:
    return TrustedKey(name, pair.public, algorithm, not_before, not_after)


def _print(pair: KeyPair) -> str:
    return fingerprint(load_public_key(pair.public))


def _refused(model: Path, trust: TrustStore, code: str) -> SigningError:
    with pytest.raises(SigningError) as info:
        verify(model, trust)
    err = info.value
    assert err.code == code, err.diagnostics()
    return err


def test_listed_key_verifies_and_is_named(signed: Path, keys: KeyPair) -> None:
    manifest = verify(signed, TrustStore((_entry(keys),)))
    assert manifest.signer.name == "release"  # type: ignore[attr-defined]
    assert manifest.signer.fingerprint == _print(keys)  # type: ignore[attr-defined]


def test_revoked_key_refused_naming_key_and_reason(signed: Path, keys: KeyPair) -> None:
    err = _refused(signed, TrustStore((_entry(keys),), frozenset({_print(keys)})),
                   "key_revoked")
    assert "'release'" in err.message and _print(keys) in err.message
    assert "revoked" in err.message and err.where == "trust.keys[release]"


def test_expired_key_refused(signed: Path, keys: KeyPair) -> None:
    err = _refused(signed, TrustStore((_entry(keys, not_after=NOW - DAY),)), "key_expired")
    assert "'release'" in err.message and "expired" in err.message


def test_not_yet_valid_key_refused(signed: Path, keys: KeyPair) -> None:
    err = _refused(signed, TrustStore((_entry(keys, not_before=NOW + DAY),)),
                   "key_not_yet_valid")
    assert "'release'" in err.message and "valid only from" in err.message


def test_unlisted_key_refused(signed: Path, other_keys: KeyPair) -> None:
    err = _refused(signed, TrustStore((_entry(other_keys, "other"),)), "key_untrusted")
    assert "other" in err.message


def test_algorithm_mismatch_is_a_trust_store_error(signed: Path, keys: KeyPair) -> None:
    err = _refused(signed, TrustStore((_entry(keys, algorithm="P-384"),)), "trust_key_invalid")
    assert "'release'" in err.message and "P-256" in err.message


def test_rotation_old_key_serves_until_it_expires(tmp_path: Path, keys: KeyPair) -> None:
    new = KeyPair(tmp_path / "new.pem", tmp_path / "new.pub")
    keygen(new.private, new.public, "p384")
    old_model = make_model(tmp_path, "old")
    sign(old_model, keys.private)
    new_model = make_model(tmp_path, "new-model")
    sign(new_model, new.private)
    both = TrustStore((_entry(keys, "old", not_after=NOW + DAY), _entry(new, "new", "P-384")))
    assert verify(old_model, both).signer.name == "old"  # type: ignore[attr-defined]
    assert verify(new_model, both).signer.name == "new"  # type: ignore[attr-defined]
    expired = TrustStore((_entry(keys, "old", not_after=NOW - DAY), _entry(new, "new", "P-384")))
    _refused(old_model, expired, "key_expired")
    verify(new_model, expired)
    revoked = TrustStore(both.keys, frozenset({_print(keys)}))
    _refused(old_model, revoked, "key_revoked")


def test_keygen_p384_encrypted_round_trip(tmp_path: Path) -> None:
    pair = KeyPair(tmp_path / "k.pem", tmp_path / "k.pub")
    printed = keygen(pair.private, pair.public, "p384", b"correct horse")
    assert pair.private.read_bytes().startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    assert b"correct horse" not in pair.private.read_bytes()
    assert printed == _print(pair)
    assert load_public_key(pair.public).curve.name == "secp384r1"
    model = make_model(tmp_path)
    for passphrase, code in ((None, "passphrase_required"), (b"wrong", "passphrase_invalid")):
        with pytest.raises(SigningError) as info:
            sign(model, pair.private, passphrase=passphrase)
        assert info.value.code == code
    sign(model, pair.private, passphrase=b"correct horse")
    assert verify(model, TrustStore((_entry(pair, "k", "P-384"),))).signer.algorithm == "P-384"  # type: ignore[attr-defined]


def test_keygen_refuses_unknown_curve_and_empty_passphrase(tmp_path: Path) -> None:
    for curve, passphrase, code in (("p521", None, "key_unsupported"),
                                    ("p256", b"", "passphrase_invalid")):
        with pytest.raises(SigningError) as info:
            keygen(tmp_path / "a.pem", tmp_path / "a.pub", curve, passphrase)
        assert info.value.code == code
    assert not (tmp_path / "a.pem").exists()


def test_unencrypted_key_loads_without_passphrase(keys: KeyPair) -> None:
    assert load_private_key(keys.private).curve.name == "secp256r1"


def test_trust_policy_section(tmp_path: Path, keys: KeyPair) -> None:
    (tmp_path / "k.pub").write_bytes(keys.public.read_bytes())
    fp = _print(keys)
    (tmp_path / "p.toml").write_text(f'''
[store]
root = "store"
[trust]
revoked = ["SHA256:{fp.upper()}"]
[[trust.keys]]
name = "release-2026"
public_key = "k.pub"
algorithm = "P-256"
not_before = 2026-01-01T00:00:00Z
not_after = 2099-01-01T00:00:00+02:00
''')
    policy = load_policy(tmp_path / "p.toml")
    assert policy.store.root == tmp_path.resolve() / "store"
    (key,) = policy.trust.store().keys
    assert key.public_key == tmp_path.resolve() / "k.pub" and key.algorithm == "P-256"
    assert key.not_before == dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert policy.trust.store().revoked == frozenset({fp})


@pytest.mark.parametrize("body, field", [
    ('[[trust.keys]]\nname = "a"\npublic_key = "k.pub"\nalgorithm = "P-521"\n',
     "trust.keys.0.algorithm"),
    ('[[trust.keys]]\nname = "a"\npublic_key = "k.pub"\nalgorithm = "P-256"\n'
     'not_after = 2027-01-01T00:00:00\n', "trust.keys.0.not_after"),
    ('[[trust.keys]]\nname = "a"\npublic_key = "k.pub"\nalgorithm = "P-256"\n'
     'not_before = 2027-01-01T00:00:00Z\nnot_after = 2026-01-01T00:00:00Z\n', "trust.keys.0"),
    ('[trust]\nrevoked = ["abc"]\n', "trust.revoked"),
    ('[[trust.keys]]\nname = "a"\npublic_key = "k.pub"\nalgorithm = "P-256"\n'
     '[[trust.keys]]\nname = "a"\npublic_key = "j.pub"\nalgorithm = "P-256"\n', "trust.keys"),
    ('[[trust.keys]]\nname = "a"\npublic_key = "k.pub"\nalgorithm = "P-256"\nurl = "x"\n',
     "trust.keys.0.url"),
])
def test_invalid_trust_section_names_the_field(tmp_path: Path, body: str, field: str) -> None:
    (tmp_path / "p.toml").write_text(body)
    with pytest.raises(PolicyError) as info:
        load_policy(tmp_path / "p.toml")
    assert info.value.where is not None and info.value.where.endswith(field)
