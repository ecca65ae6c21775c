"""keygen / sign / verify round trips, key handling and the folder walk."""

from __future__ import annotations

import os
import socket
import stat
import tempfile
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from signing_helpers import KeyPair, make_model, read_statement, record_opens, snapshot

from appliance.errors import SigningError
from appliance.signing import Manifest, keygen, sign, verify


def _err(call: object, *args: object) -> SigningError:
    assert callable(call)
    with pytest.raises(SigningError) as info:
        call(*args)
    assert info.value.where and info.value.fix, info.value.diagnostics()
    return info.value


def test_keygen_formats_and_modes(tmp_path: Path) -> None:
    priv, pub = tmp_path / "k.pem", tmp_path / "k.pub"
    keygen(priv, pub)
    assert stat.S_IMODE(priv.stat().st_mode) == 0o600
    assert priv.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS#8
    assert pub.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")  # SPKI
    key = serialization.load_pem_private_key(priv.read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1"
    public = serialization.load_pem_public_key(pub.read_bytes())
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert public.public_numbers() == key.public_key().public_numbers()


@pytest.mark.parametrize("existing", ["private", "public", "same"])
def test_keygen_never_overwrites(tmp_path: Path, existing: str) -> None:
    priv, pub = tmp_path / "k.pem", tmp_path / "k.pub"
    if existing == "same":
        pub = priv
    else:
        (priv if existing == "private" else pub).write_text("keep me")
    assert _err(keygen, priv, pub).code == "key_exists"
    assert [p.read_text() for p in (priv, pub) if p.exists()] in (["keep me"], [])
    assert sorted(os.listdir(tmp_path)) == sorted({p.name for p in (priv, pub) if p.exists()})


def test_sign_default_path_and_verify(model: Path, keys: KeyPair) -> None:
    assert sign(model, keys.private) == model / "model.sig"
    manifest = verify(model, keys.public)
    assert list(manifest) == ["config.json", "model.safetensors", "tokenizer.json"]
    assert read_statement(model / "model.sig")["predicate"]["serialization"][
        "ignore_paths"] == ["model.sig"]


def test_sign_external_signature_path(model: Path, keys: KeyPair, tmp_path: Path) -> None:
    sig = tmp_path / "detached.sig"
    assert sign(model, keys.private, sig) == sig
    assert not (model / "model.sig").exists()
    assert read_statement(sig)["predicate"]["serialization"]["ignore_paths"] == []
    assert len(verify(model, keys.public, sig)) == 3
    # only the signature being verified is excluded: a stray model.sig is an unsigned file
    (model / "model.sig").write_bytes(sig.read_bytes())
    assert len(verify(model, keys.public)) == 3
    assert _err(verify, model, keys.public, sig).code == "unsigned_file_present"


def test_sign_does_not_modify_model_and_leaves_no_temp_files(model: Path,
                                                             keys: KeyPair) -> None:
    before = snapshot(model)
    sign(model, keys.private)
    sign(model, keys.private)  # re-signing replaces model.sig, still excluded
    after = snapshot(model)
    assert after.pop("model.sig")
    assert after == before
    assert sorted(os.listdir(model)) == sorted([*before, "model.sig"])
    verify(model, keys.public)


def test_sign_refuses_symlinks(model: Path, keys: KeyPair, tmp_path: Path) -> None:
    (model / "alias.json").symlink_to("config.json")
    err = _err(sign, model, keys.private)
    assert (err.code, err.where) == ("symlink_not_allowed", "alias.json")
    assert not (model / "model.sig").exists()
    (model / "alias.json").unlink()
    (tmp_path / "d").mkdir()
    (model / "d").symlink_to(tmp_path / "d")
    assert _err(sign, model, keys.private).code == "symlink_not_allowed"


def test_sign_refuses_fifo_without_opening_it(model: Path, keys: KeyPair) -> None:
    os.mkfifo(model / "queue")
    with record_opens() as opened:
        err = _err(sign, model, keys.private)
    assert (err.code, err.where) == ("special_file", "queue")
    assert not [p for p in opened if p.endswith("queue")]


def test_socket_is_special_file(keys: KeyPair) -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as short:  # AF_UNIX paths are short
        model = make_model(Path(short), "m")
        sign(model, keys.private)
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(model / "s"))
            err = _err(verify, model, keys.public)
        assert (err.code, err.where) == ("special_file", "s")


def test_model_dir_checks(tmp_path: Path, keys: KeyPair, model: Path) -> None:
    assert _err(sign, tmp_path / "missing", keys.private).code == "model_not_found"
    (tmp_path / "file").write_text("x")
    assert _err(sign, tmp_path / "file", keys.private).code == "model_not_found"
    (tmp_path / "link").symlink_to(model)
    assert _err(sign, tmp_path / "link", keys.private).code == "symlink_not_allowed"


def test_nested_order_and_hidden_files(tmp_path: Path, keys: KeyPair) -> None:
    model = make_model(tmp_path)
    for name in ("a-b/x", "a/x", "a/b/c/d", ".hidden/h", "A/x", "b.txt"):
        (model / name).parent.mkdir(parents=True, exist_ok=True)
        (model / name).write_text(name)
    sign(model, keys.private)
    names = list(verify(model, keys.public))
    assert names == [".hidden/h", "A/x", "a/b/c/d", "a/x", "a-b/x", "b.txt", "config.json",
                     "model.safetensors", "tokenizer.json"]


def test_many_files_in_parallel(tmp_path: Path, keys: KeyPair) -> None:
    model = make_model(tmp_path)
    for index in range(60):
        (model / f"shard-{index:03d}.bin").write_bytes(os.urandom(3000 + index))
    (model / "big.bin").write_bytes(os.urandom(3 * (1 << 20) + 17))  # several 1 MiB chunks
    sign(model, keys.private)
    assert len(verify(model, keys.public)) == 64
    with (model / "big.bin").open("r+b") as handle:
        handle.seek(2 * (1 << 20) + 5)
        handle.write(b"\x00\x01")
    assert _err(verify, model, keys.public).code == "digest_mismatch"


def test_bad_file_names_refused(model: Path, keys: KeyPair) -> None:
    bad = os.path.join(os.fsencode(model), b"bad\xffname")
    with open(bad, "wb") as handle:
        handle.write(b"x")
    assert _err(sign, model, keys.private).code == "bad_file_name"
    os.unlink(bad)
    (model / "back\\slash").write_text("x")
    assert _err(sign, model, keys.private).code == "bad_file_name"


def test_too_deep(model: Path, keys: KeyPair) -> None:
    deep = model.joinpath(*["d"] * 40)
    deep.mkdir(parents=True)
    (deep / "f").write_text("x")
    assert _err(sign, model, keys.private).code == "model_too_deep"


def _write_key(path: Path, key: object, password: bytes | None = None) -> None:
    assert isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey))
    enc: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password) if password
        else serialization.NoEncryption())
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8, enc))
    (path.with_suffix(".pub")).write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def test_p384_round_trip(model: Path, tmp_path: Path) -> None:
    _write_key(tmp_path / "p384.pem", ec.generate_private_key(ec.SECP384R1()))
    sign(model, tmp_path / "p384.pem")
    assert len(verify(model, tmp_path / "p384.pub")) == 3


def test_key_errors(model: Path, tmp_path: Path, keys: KeyPair) -> None:
    _write_key(tmp_path / "rsa.pem", rsa.generate_private_key(65537, 2048))
    assert _err(sign, model, tmp_path / "rsa.pem").code == "key_unsupported"
    _write_key(tmp_path / "k1.pem", ec.generate_private_key(ec.SECP256K1()))
    assert _err(sign, model, tmp_path / "k1.pem").code == "key_unsupported"
    _write_key(tmp_path / "enc.pem", ec.generate_private_key(ec.SECP256R1()), b"secret")
    assert _err(sign, model, tmp_path / "enc.pem").code == "passphrase_required"
    (tmp_path / "junk.pem").write_text("not a key")
    assert _err(sign, model, tmp_path / "junk.pem").code == "key_invalid"
    assert _err(sign, model, tmp_path / "none.pem").code == "key_missing"
    assert not (model / "model.sig").exists()
    sign(model, keys.private)
    assert _err(verify, model, tmp_path / "rsa.pub").code == "key_unsupported"
    assert _err(verify, model, tmp_path / "junk.pem").code == "key_invalid"
    assert _err(verify, model, keys.private).code == "key_invalid"  # private, not public


def test_signature_path_is_directory(model: Path, keys: KeyPair, tmp_path: Path) -> None:
    (tmp_path / "sigdir").mkdir()
    assert _err(sign, model, keys.private, tmp_path / "sigdir").code == "io_error"
    assert os.listdir(tmp_path / "sigdir") == []


def test_manifest_mapping() -> None:
    manifest = Manifest("m", [("b", "0" * 64), ("a", "1" * 64)], ["model.sig"])
    assert list(manifest) == ["b", "a"] and manifest["a"] == "1" * 64 and len(manifest) == 2
    assert manifest.to_dict()["files"] == {"b": "0" * 64, "a": "1" * 64}
    assert manifest.root_digest != Manifest("m", [("a", "1" * 64), ("b", "0" * 64)]).root_digest
    with pytest.raises(TypeError):
        manifest._files["c"] = "2" * 64  # type: ignore[index]


def test_first_failure_stops_running_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from appliance.signing import _manifest

    monkeypatch.setattr(_manifest, "workers", lambda count: 2)  # even on a 1-CPU runner

    seen: dict[str, bool] = {}

    def task(name: str, stop: threading.Event) -> str:
        if name == "bad":
            raise SigningError("boom", code="digest_mismatch", where="bad", fix="none")
        seen[name] = stop.wait(timeout=5)  # a long hash polls ``stop`` between chunks
        return "0" * 64

    with pytest.raises(SigningError) as info:
        _manifest.run_parallel(["slow", "bad"], task)
    assert info.value.code == "digest_mismatch"
    assert seen == {"slow": True}
