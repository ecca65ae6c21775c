"""verify_and_stage: the engine loads a private read-only copy made from the hashed bytes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from signing_helpers import KeyPair, sha256_hex

from appliance.errors import SigningError
from appliance.signing import discard_stage, sign, verify_and_stage


def _modes(root: Path) -> dict[str, int]:
    out = {".": stat.S_IMODE(root.lstat().st_mode)}
    for path in root.rglob("*"):
        out[path.relative_to(root).as_posix()] = stat.S_IMODE(path.lstat().st_mode)
    return out


def test_stage_copies_exactly_the_signed_files(signed: Path, keys: KeyPair,
                                               tmp_path: Path) -> None:
    (signed / "sub" / "deeper").mkdir(parents=True)
    (signed / "sub" / "deeper" / "vocab.txt").write_text("a\nb\n")
    sign(signed, keys.private)
    dest = tmp_path / "stage"
    manifest = verify_and_stage(signed, keys.public, dest)
    staged = {p.relative_to(dest).as_posix(): sha256_hex(p.read_bytes())
              for p in dest.rglob("*") if p.is_file()}
    assert staged == dict(manifest)
    assert "model.sig" not in staged
    modes = _modes(dest)
    assert modes == {name: (0o555 if (dest / name).is_dir() else 0o444) for name in modes}
    assert not any(p.is_symlink() for p in dest.rglob("*"))
    discard_stage(dest)
    assert not dest.exists()


def test_stage_dest_must_be_new(signed: Path, keys: KeyPair, tmp_path: Path) -> None:
    dest = tmp_path / "stage"
    dest.mkdir()
    (dest / "keep").write_text("x")
    with pytest.raises(SigningError) as info:
        verify_and_stage(signed, keys.public, dest)
    assert info.value.code == "stage_dest_exists"
    assert os.listdir(dest) == ["keep"]


@pytest.mark.parametrize("change, code", [
    ("extra", "unsigned_file_present"),
    ("flip", "digest_mismatch"),
    ("remove", "missing_file"),
])
def test_stage_failure_leaves_nothing(signed: Path, keys: KeyPair, tmp_path: Path,
                                      change: str, code: str) -> None:
    target = signed / "tokenizer.json"
    if change == "extra":
        (signed / "extra.py").write_text("pass\n")
    elif change == "flip":
        target.write_text('{"version": "2.0"}\n')
    else:
        target.unlink()
    dest = tmp_path / "stage"
    with pytest.raises(SigningError) as info:
        verify_and_stage(signed, keys.public, dest)
    assert info.value.code == code
    assert not dest.exists()


def test_stage_missing_parent(signed: Path, keys: KeyPair, tmp_path: Path) -> None:
    with pytest.raises(SigningError) as info:
        verify_and_stage(signed, keys.public, tmp_path / "no" / "stage")
    assert info.value.code == "io_error"


def test_discard_stage_missing_is_noop(tmp_path: Path) -> None:
    discard_stage(tmp_path / "never-made")
