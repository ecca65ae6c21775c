"""Only plain files: a hard link (link count > 1), a symlink or a special file is refused at
sign and verify, each with its own code (issue 8: a folder holding a hard link to a file
outside it used to verify as OK)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from signing_helpers import KeyPair

from appliance.errors import SigningError
from appliance.signing import sign, verify


def _code(func: object, *args: object) -> SigningError:
    with pytest.raises(SigningError) as info:
        func(*args)  # type: ignore[operator]
    assert info.value.where and info.value.fix
    return info.value


def test_hard_link_to_outside_file_refused_at_verify(signed: Path, keys: KeyPair,
                                                     tmp_path: Path) -> None:
    # same bytes, so digests match: only the link count gives it away
    outside = tmp_path / "outside.json"
    os.link(signed / "config.json", outside)
    err = _code(verify, signed, keys.public)
    assert (err.code, err.where) == ("hard_link_not_allowed", "config.json")
    assert "2 hard links" in err.message


def test_hard_link_refused_at_sign(model: Path, keys: KeyPair, tmp_path: Path) -> None:
    os.link(model / "model.safetensors", tmp_path / "elsewhere.safetensors")
    err = _code(sign, model, keys.private)
    assert (err.code, err.where) == ("hard_link_not_allowed", "model.safetensors")
    assert not (model / "model.sig").exists()


def test_hard_link_inside_folder_refused(model: Path, keys: KeyPair) -> None:
    os.link(model / "tokenizer.json", model / "tokenizer-copy.json")
    assert _code(sign, model, keys.private).code == "hard_link_not_allowed"


def test_symlink_and_special_file_keep_their_codes(model: Path, keys: KeyPair) -> None:
    (model / "alias.json").symlink_to("config.json")
    assert _code(sign, model, keys.private).code == "symlink_not_allowed"
    (model / "alias.json").unlink()
    os.mkfifo(model / "pipe")
    assert _code(sign, model, keys.private).code == "special_file"


def test_hard_link_created_after_sign_is_refused_even_if_bytes_match(
        signed: Path, keys: KeyPair, tmp_path: Path) -> None:
    verify(signed, keys.public)
    os.link(signed / "tokenizer.json", tmp_path / "t.json")
    assert _code(verify, signed, keys.public).code == "hard_link_not_allowed"
    os.unlink(tmp_path / "t.json")
    verify(signed, keys.public)
