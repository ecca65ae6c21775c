"""The one atomic writer (appliance/atomic_file.py): the file is replaced whole or not at
all, with the mode asked for, and no temporary file survives a failure; every module that
replaces a file goes through it."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

import appliance.atomic_file as atomic_file
from appliance.atomic_file import replace_file

REPO = Path(__file__).resolve().parents[1]


def test_replaces_whole_file_with_mode(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_bytes(b"old")
    replace_file(target, b"new contents", 0o600)
    assert target.read_bytes() == b"new contents"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_failure_keeps_old_file_and_leaves_no_temporary(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "keys.json"
    target.write_bytes(b"old")

    def refuse(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic_file.os, "replace", refuse)
    with pytest.raises(OSError, match="No space"):
        replace_file(target, b"new", 0o644)
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keys.json"]


def test_interrupt_leaves_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupt(*_args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic_file.os, "fsync", interrupt)
    with pytest.raises(KeyboardInterrupt):
        replace_file(tmp_path / "feed.json", b"x", 0o644)
    assert list(tmp_path.iterdir()) == []


def test_missing_folder_is_the_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        replace_file(tmp_path / "absent" / "f", b"x", 0o644)


def test_no_other_module_writes_its_own_temp_and_rename() -> None:
    """mkstemp + os.replace is written once; a second copy is where durability or
    cleanup on failure drifts apart."""
    writers = []
    for path in sorted((REPO / "appliance").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if re.search(r"\bmkstemp\(", text) and re.search(r"\bos\.replace\(", text):
            writers.append(path.relative_to(REPO).as_posix())
    assert writers == ["appliance/atomic_file.py"]
