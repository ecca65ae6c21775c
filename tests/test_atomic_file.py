"""The one atomic writer (appliance/atomic_file.py): the file is replaced whole or not at
all, with the mode asked for, and no temporary file survives a failure; every module that
replaces a file goes through it. Its two other primitives (issue 32): a new file created
exclusively and fsynced, and a folder fsynced, each written once."""

from __future__ import annotations

import errno
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


def test_write_new_file_creates_with_data_fsynced_and_exact_final_mode(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = atomic_file.os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(atomic_file.os, "fsync", fsync)
    old = atomic_file.os.umask(0o077)
    try:
        atomic_file.write_new_file(tmp_path / "record.json", b"{}\n", 0o600, final_mode=0o444)
        atomic_file.write_new_file(tmp_path / "config.json", b"x", 0o644)
    finally:
        atomic_file.os.umask(old)
    assert (tmp_path / "record.json").read_bytes() == b"{}\n"
    assert stat.S_IMODE((tmp_path / "record.json").stat().st_mode) == 0o444  # umask-proof
    assert stat.S_IMODE((tmp_path / "config.json").stat().st_mode) == 0o600  # umask applied
    assert len(synced) == 2


def test_write_new_file_never_replaces_or_follows_a_link(tmp_path: Path) -> None:
    existing = tmp_path / "key.pem"
    existing.write_bytes(b"old key")
    with pytest.raises(FileExistsError):
        atomic_file.write_new_file(existing, b"new key", 0o600)
    assert existing.read_bytes() == b"old key"
    target = tmp_path / "elsewhere"
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(FileExistsError):
        atomic_file.write_new_file(tmp_path / "link", b"x", 0o600)
    assert not target.exists()


def test_write_new_file_writes_everything_after_short_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = atomic_file.os.write

    def short(fd: int, data: bytes) -> int:
        return real_write(fd, bytes(data)[:3])

    monkeypatch.setattr(atomic_file.os, "write", short)
    atomic_file.write_new_file(tmp_path / "index.json", b"0123456789" * 5, 0o644)
    assert (tmp_path / "index.json").read_bytes() == b"0123456789" * 5


def test_sync_folder_fsyncs_the_folder_and_accepts_only_unsupported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []
    outcome: list[OSError | None] = [None]

    def fsync(fd: int) -> None:
        seen.append(stat.S_ISDIR(atomic_file.os.fstat(fd).st_mode))
        if outcome[0] is not None:
            raise outcome[0]

    monkeypatch.setattr(atomic_file.os, "fsync", fsync)
    atomic_file.sync_folder(tmp_path)
    outcome[0] = OSError(errno.EINVAL, "Invalid argument")  # e.g. a filesystem without it
    atomic_file.sync_folder(tmp_path)
    outcome[0] = OSError(errno.EIO, "Input/output error")
    with pytest.raises(OSError, match="Input/output"):
        atomic_file.sync_folder(tmp_path)
    assert seen == [True, True, True]
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        atomic_file.sync_folder(tmp_path / "file")


def test_no_other_module_creates_and_fsyncs_by_hand() -> None:
    """"Create a new file and fsync it" and "fsync the folder" are written once, here; the
    only other fsyncs are of files and folders a module holds open for its own work: the
    converter's shard (written by several lanes with ``pwrite``) and the store's new
    version folder (the copy's ``dir_fd``, fsynced before it is made read-only)."""
    found = []
    for path in sorted((REPO / "appliance").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if re.search(r"\bos\.fsync\(", text) and re.search(r"\bO_(EXCL|DIRECTORY)\b", text):
            found.append(path.relative_to(REPO).as_posix())
    assert found == ["appliance/atomic_file.py", "appliance/convert/_write.py",
                     "appliance/store/_import.py"]
