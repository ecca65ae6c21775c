"""Regression tests for the public signing bugs in tests/fixtures/public-bugs.jsonl:
``empty-model-signature``, ``unsigned-extra-files`` (A-F) and
``manifest-path-escape-and-symlink``."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from signing_helpers import (
    KeyPair,
    forge,
    make_model,
    read_statement,
    record_opens,
    safetensors_bytes,
    sha256_hex,
    statement_for,
)

from appliance.errors import SigningError
from appliance.signing import (
    Manifest,
    discard_stage,
    require_servable,
    sign,
    verify,
    verify_and_stage,
)


def _code(call: object, *args: object) -> SigningError:
    assert callable(call)
    with pytest.raises(SigningError) as info:
        call(*args)
    assert info.value.where and info.value.fix
    return info.value


# --- empty-model-signature (sigstore/model-transparency#661) ---------------------------

def test_empty_model_signature_empty_folder_refused(tmp_path: Path, keys: KeyPair) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    assert _code(sign, folder, keys.private).code == "empty_model"
    assert not (folder / "model.sig").exists()
    (folder / "nested" / "dirs").mkdir(parents=True)  # directories alone are not content
    assert _code(sign, folder, keys.private).code == "empty_model"


def test_empty_model_signature_only_signature_file(tmp_path: Path, keys: KeyPair) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.sig").write_text("old signature")
    assert _code(sign, folder, keys.private).code == "empty_model"
    assert (folder / "model.sig").read_text() == "old signature"


def test_empty_model_signature_excluded_files_are_signed_not_ignored(
        tmp_path: Path, keys: KeyPair) -> None:
    # Step 2: there is no ignore list, so these files are covered rather than dropped; the
    # resulting manifest is still refused for deployment.
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / ".gitattributes").write_text("*.safetensors filter=lfs\n")
    (folder / "README.md").write_text("# readme\n")
    sign(folder, keys.private)
    manifest = verify(folder, keys.public)
    assert set(manifest) == {".gitattributes", "README.md"}
    assert _code(require_servable, manifest).code == "manifest_incomplete"
    (folder / ".gitattributes").write_text("changed\n")
    assert _code(verify, folder, keys.public).code == "digest_mismatch"


@pytest.mark.parametrize("populated", [False, True])
def test_empty_model_signature_zero_resource_bundle(
        tmp_path: Path, keys: KeyPair, populated: bool) -> None:
    folder = make_model(tmp_path) if populated else tmp_path / "model"
    folder.mkdir(exist_ok=True)
    forge(folder / "model.sig", statement_for({}), keys.private)
    assert _code(verify, folder, keys.public).code == "empty_model"


@pytest.mark.parametrize("files, lacking", [
    ({"config.json"}, "safetensors"),
    ({"model.safetensors"}, "config.json"),
    ({"config.json", "sub/model.safetensors"}, "safetensors"),
    ({"config.json", "model.safetensors.bak"}, "safetensors"),
    (set(), "config.json"),
])
def test_empty_model_signature_require_servable(files: set[str], lacking: str) -> None:
    manifest = Manifest("m", [(name, "0" * 64) for name in sorted(files)])
    err = _code(require_servable, manifest)
    assert err.code == "manifest_incomplete" and lacking in err.message


def test_empty_model_signature_servable_manifest_accepted(signed: Path, keys: KeyPair) -> None:
    require_servable(verify(signed, keys.public))


# --- unsigned-extra-files (sigstore/model-transparency PR#502) ---------------------------

def _bug_model(tmp_path: Path, keys: KeyPair) -> Path:
    folder = make_model(tmp_path)
    sign(folder, keys.private)
    return folder


def test_unsigned_extra_files_a_chat_template(tmp_path: Path, keys: KeyPair) -> None:
    folder = _bug_model(tmp_path, keys)
    (folder / "tokenizer_config.json").write_text('{"chat_template": "{{ x }}"}')
    err = _code(verify, folder, keys.public)
    assert (err.code, err.where) == ("unsigned_file_present", "tokenizer_config.json")


def test_unsigned_extra_files_b_python_module(tmp_path: Path, keys: KeyPair) -> None:
    folder = _bug_model(tmp_path, keys)
    (folder / "modeling_x.py").write_text("import os\n")
    err = _code(verify, folder, keys.public)
    assert (err.code, err.where) == ("unsigned_file_present", "modeling_x.py")


def test_unsigned_extra_files_c_hidden_file(tmp_path: Path, keys: KeyPair) -> None:
    folder = _bug_model(tmp_path, keys)
    (folder / ".cache").mkdir()
    (folder / ".cache" / "x").write_bytes(b"")
    err = _code(verify, folder, keys.public)
    assert (err.code, err.where) == ("unsigned_file_present", ".cache/x")


def test_unsigned_extra_files_d_rename(tmp_path: Path, keys: KeyPair) -> None:
    folder = _bug_model(tmp_path, keys)
    (folder / "model.safetensors").rename(folder / "model-00001-of-00001.safetensors")
    assert _code(verify, folder, keys.public).code in ("unsigned_file_present", "missing_file")
    (folder / "model-00001-of-00001.safetensors").unlink()
    assert _code(verify, folder, keys.public).code == "missing_file"


def test_unsigned_extra_files_e_byte_flip(tmp_path: Path, keys: KeyPair) -> None:
    folder = _bug_model(tmp_path, keys)
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[len(data) // 2] ^= 0x80
    (folder / "model.safetensors").write_bytes(bytes(data))
    err = _code(verify, folder, keys.public)
    assert (err.code, err.where) == ("digest_mismatch", "model.safetensors")


def test_unsigned_extra_files_no_ignore_option_exists() -> None:
    for func in (verify, verify_and_stage):
        params = set(inspect.signature(func).parameters)
        assert not {p for p in params if "ignore" in p or "symlink" in p}, params


def test_unsigned_extra_files_f_swap_after_verification(tmp_path: Path, keys: KeyPair) -> None:
    folder = _bug_model(tmp_path, keys)
    dest = tmp_path / "staged"
    manifest = verify_and_stage(folder, keys.public, dest)
    # The attacker swaps the weights after verification, before the engine opens them.
    (folder / "model.safetensors").write_bytes(safetensors_bytes((6.0, 6.0)))
    staged = dest / "model.safetensors"
    assert sha256_hex(staged.read_bytes()) == manifest["model.safetensors"]
    assert staged.read_bytes() == safetensors_bytes()
    discard_stage(dest)


def test_unsigned_extra_files_f_swap_during_staging(
        tmp_path: Path, keys: KeyPair, monkeypatch: pytest.MonkeyPatch) -> None:
    from appliance.signing import _fs

    folder = _bug_model(tmp_path, keys)
    original = _fs.ModelTree.walk

    def walk_then_swap(self: _fs.ModelTree, exclude: str | None = None) -> list[str]:
        names: list[str] = original(self, exclude)  # the set check passes on the genuine files...
        (folder / "model.safetensors").write_bytes(safetensors_bytes((6.0, 6.0)))
        return names  # ...and the bytes change before they are copied

    monkeypatch.setattr(_fs.ModelTree, "walk", walk_then_swap)
    dest = tmp_path / "staged"
    err = _code(verify_and_stage, folder, keys.public, dest)
    assert (err.code, err.where) == ("digest_mismatch", "model.safetensors")
    assert not dest.exists()


# --- manifest-path-escape-and-symlink (PR#647, PR#667) -----------------------------------

@pytest.mark.parametrize("escape", ["../secret.txt", "sub/../../secret.txt", "ABSOLUTE"])
def test_manifest_path_escape_and_symlink_outside_file_never_opened(
        tmp_path: Path, keys: KeyPair, escape: str) -> None:
    folder = make_model(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret\n")
    name = str(secret) if escape == "ABSOLUTE" else escape
    files = {n: sha256_hex((folder / n).read_bytes())
             for n in ("config.json", "model.safetensors")}
    files[name] = sha256_hex(secret.read_bytes())
    forge(folder / "model.sig", statement_for(files), keys.private)
    for call, extra in ((verify, ()), (verify_and_stage, (tmp_path / "dest",))):
        with record_opens() as opened:
            err = _code(call, folder, keys.public, *extra)
        assert err.code == "manifest_path_escape"
        assert "secret" in err.message
        assert any(p.endswith("model.sig") for p in opened), opened  # the hook is live
        assert not [p for p in opened if "secret" in p], opened
    assert not (tmp_path / "dest").exists()


def test_manifest_path_escape_and_symlink_swapped_for_symlink(
        tmp_path: Path, keys: KeyPair) -> None:
    folder = _bug_model(tmp_path, keys)
    copy = tmp_path / "config-copy.json"
    copy.write_bytes((folder / "config.json").read_bytes())
    (folder / "config.json").unlink()
    (folder / "config.json").symlink_to(copy)
    for call, extra in ((verify, ()), (verify_and_stage, (tmp_path / "dest",))):
        with record_opens() as opened:
            err = _code(call, folder, keys.public, *extra)
        assert (err.code, err.where) == ("symlink_not_allowed", "config.json")
        assert not [p for p in opened if "config-copy" in p]


@pytest.mark.parametrize("flag", [True, "true", "false", 1])
def test_manifest_path_escape_and_symlink_signed_policy_allowing_symlinks(
        signed: Path, keys: KeyPair, flag: object) -> None:
    statement = read_statement(signed / "model.sig")
    statement["predicate"]["serialization"]["allow_symlinks"] = flag
    forge(signed / "model.sig", statement, keys.private)
    assert _code(verify, signed, keys.public).code == "symlink_not_allowed"
