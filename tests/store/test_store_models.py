"""models list/show/use/rollback/remove and the CLI: import, models, verify --policy,
keygen --curve with passphrases, serve --model NAME refusals before any engine starts."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from store_helpers import Signer, make_model

from appliance.cli import main
from appliance.errors import ApplianceError
from appliance.signing import sign
from appliance.store import Store, import_model, list_models, remove, rollback, show, use
from appliance.store._layout import Ref


def _two_versions(store: Store, tmp_path: Path, signer: Signer) -> tuple[str, str]:
    first = make_model(tmp_path, "v1")
    sign(first, signer.private)
    second = make_model(tmp_path, "v2", weights=None)
    (second / "config.json").write_text('{"model_type": "tiny", "v": 2}\n')
    sign(second, signer.private)
    a = import_model(store, first, signer.trust, name="m").digest
    b = import_model(store, second, signer.trust, name="m").digest
    return a, b


def test_use_rollback_remove(store: Store, tmp_path: Path, signer: Signer) -> None:
    a, b = _two_versions(store, tmp_path, signer)
    assert list_models(store) == [{"name": "m", "current": b, "versions": sorted([a, b])}]
    info = show(store, Ref("m"))
    assert info["digest"] == b and info["current"] and info["previous"] == a
    assert info["signer"]["name"] == "release" and info["files"] == 3
    assert rollback(store, "m") == a and store.read_state("m")["current"] == a
    with pytest.raises(ApplianceError) as err:
        rollback(store, "m")
    assert err.value.code == "store_no_previous"
    assert use(store, Ref("m", b[:12])) == b
    with pytest.raises(ApplianceError) as err:
        remove(store, Ref("m", b))
    assert err.value.code == "store_version_current"
    assert remove(store, Ref("m", a)) == [a]
    assert store.versions("m") == [b] and store.read_state("m")["history"] == []
    assert sorted(remove(store, Ref("m"))) == [b]
    assert list_models(store) == [] and not any((store.root / ".tmp").iterdir())


def test_keep_current_and_unknown_version(store: Store, tmp_path: Path, signer: Signer) -> None:
    src = make_model(tmp_path, "x")
    sign(src, signer.private)
    first = import_model(store, src, signer.trust, name="x", make_current=False)
    assert store.read_state("x")["current"] == first.digest  # first import becomes current
    with pytest.raises(ApplianceError) as err:
        use(store, Ref("x", "0" * 12))
    assert err.value.code == "store_not_found"


def _policy(tmp_path: Path, signer: Signer, extra: str = "") -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(f'''
[store]
root = "{tmp_path / 'store'}"
allow_owner_serve = true
[trust]
{extra}
[[trust.keys]]
name = "release"
public_key = "{signer.public}"
algorithm = "P-384"
''')
    return path


def test_cli_import_models_verify(tmp_path: Path, source: Path, signer: Signer,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    policy = _policy(tmp_path, signer)
    assert main(["verify", str(source), "--policy", str(policy)]) == 0
    assert "signer 'release'" in capsys.readouterr().out
    assert main(["import", str(source), "--policy", str(policy), "--name", "tiny"]) == 0
    assert "imported: tiny@" in capsys.readouterr().out
    assert main(["models", "list", "--policy", str(policy), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [item["name"] for item in listed] == ["tiny"]
    assert main(["models", "show", "tiny", "--store", str(tmp_path / "store")]) == 0
    assert "signer:" in capsys.readouterr().out
    assert main(["models", "rollback", "tiny", "--policy", str(policy)]) == 1
    assert "error[store_no_previous]" in capsys.readouterr().err


def test_cli_serve_store_model_refused_before_engine(tmp_path: Path, source: Path,
                                                    signer: Signer,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from appliance.signing import fingerprint, load_public_key

    policy = _policy(tmp_path, signer)
    assert main(["import", str(source), "--policy", str(policy)]) == 0
    printed = fingerprint(load_public_key(signer.public))
    revoked = _policy(tmp_path, signer, f'revoked = ["{printed}"]')
    keys = tmp_path / "api-keys"
    keys.write_text("k" * 32 + "\n")
    assert main(["serve", "--model", "src", "--policy", str(revoked),
                 "--api-key-file", str(keys)]) == 1
    err = capsys.readouterr().err
    assert "error[key_revoked]" in err and "'release'" in err


def test_cli_keygen_curve_and_passphrase_sources(tmp_path: Path, signer: Signer,
                                                 capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEY_PASS", "s3cret phrase")
    priv, pub = tmp_path / "k.pem", tmp_path / "k.pub"
    assert main(["keygen", "--curve", "p384", "--private-key", str(priv), "--public-key",
                 str(pub), "--passphrase-env", "KEY_PASS"]) == 0
    out = capsys.readouterr().out
    assert "encrypted" in out and "fingerprint" in out and "s3cret" not in out
    assert priv.read_bytes().startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    model = make_model(tmp_path, "m")
    assert main(["sign", str(model), "--private-key", str(priv)]) == 1
    assert "error[passphrase_required]" in capsys.readouterr().err
    phrase = tmp_path / "pass.txt"
    phrase.write_text("s3cret phrase\n")
    os.chmod(phrase, 0o600)
    assert main(["sign", str(model), "--private-key", str(priv), "--passphrase-file",
                 str(phrase)]) == 0
    assert main(["verify", str(model), "--public-key", str(pub)]) == 0
    monkeypatch.delenv("KEY_PASS")
    assert main(["sign", str(model), "--private-key", str(priv), "--passphrase-env",
                 "KEY_PASS"]) == 1
    assert "error[passphrase_missing]" in capsys.readouterr().err


def test_a_deleted_or_broken_current_pointer_fails_closed(store: Store, tmp_path: Path,
                                                          signer: Signer) -> None:
    """Issue 31 (trust state cannot roll back): unlike the advisory feed before its floor,
    the store never falls back to another version when ``state.json`` is gone or broken:
    serving ``NAME`` is refused until an admin runs ``models use`` (the deliberate way,
    as is ``models rollback``); the file itself is root's (``store_owned_by_server``)."""
    a, b = _two_versions(store, tmp_path, signer)
    state = store.name_dir("m") / "state.json"
    state.unlink()
    with pytest.raises(ApplianceError) as err:
        store.resolve(Ref("m"))
    assert err.value.code == "store_not_found" and "no current version" in err.value.message
    state.write_text("{not json")
    with pytest.raises(ApplianceError) as err:
        store.resolve(Ref("m"))
    assert err.value.code == "store_state_invalid"
    state.unlink()
    assert use(store, Ref("m", b[:12])) == b and store.resolve(Ref("m")) == b
    assert a != b
