"""Filesystem walk (scanner.core.fs via scanner.api): links are never followed, special files
never opened, races and unreadable files fail closed, limits are findings."""

from __future__ import annotations

import errno
import os
import socket
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from scanner.api import TargetResult, scan_target
from scanner.core import fs as _fs
from scanner.core.context import Limits
from scanner.core.model import Verdict

CONFIG = b'{"model_type": "llama", "hidden_size": 8}\n'


def _scan_with_timeout(path: Path, seconds: float = 10.0, **kwargs: object) -> TargetResult:
    """Scan in a daemon thread so a blocking open fails the test instead of hanging it."""
    out: list[TargetResult] = []
    thread = threading.Thread(target=lambda: out.append(scan_target(path, **kwargs)),  # type: ignore[arg-type]
                              daemon=True)
    thread.start()
    thread.join(seconds)
    assert out, f"scan of {path} did not finish within {seconds} s (blocked?)"
    return out[0]


def _rules(result: TargetResult, path: str | None = None) -> set[str]:
    return {f.rule_id for f in result.findings if path is None or f.path == path}


def _folder(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_bytes(CONFIG)
    return model


def test_absolute_symlink_is_malicious_and_not_followed(tmp_path: Path) -> None:
    model = _folder(tmp_path)
    (model / "tokenizer.json").symlink_to("/etc/passwd")
    result = scan_target(model)
    assert result.verdict is Verdict.MALICIOUS
    assert _rules(result, "tokenizer.json") == {"fs.symlink"}
    assert ("tokenizer.json", "symbolic link (never followed)") in result.skipped
    assert result.files_scanned == 1


def test_relative_symlink_escaping_the_folder_is_malicious(tmp_path: Path) -> None:
    model = _folder(tmp_path)
    (tmp_path / "outside.bin").write_bytes(b"x")
    (model / "sub").mkdir()
    (model / "sub" / "model.safetensors").symlink_to("../../outside.bin")
    result = scan_target(model)
    assert _rules(result, "sub/model.safetensors") == {"fs.symlink"}
    assert result.verdict is Verdict.MALICIOUS


def test_symlink_chain_escaping_through_another_link_is_malicious(tmp_path: Path) -> None:
    model = _folder(tmp_path)
    (model / "sub").mkdir()
    (model / "sub" / "up").symlink_to("..")  # stays inside: policy on its own
    (model / "a").symlink_to("sub/up/../../secret")  # lexically 'secret', really outside
    result = scan_target(model)
    assert _rules(result, "sub/up") == {"fs.symlink_local"}
    assert _rules(result, "a") == {"fs.symlink"}


def test_internal_symlink_is_refused_by_policy(tmp_path: Path) -> None:
    model = _folder(tmp_path)
    (model / "alias.json").symlink_to("config.json")
    (model / "dangling").symlink_to("nothing-here")
    result = scan_target(model)
    assert _rules(result, "alias.json") == {"fs.symlink_local"}
    assert _rules(result, "dangling") == {"fs.symlink_local"}
    assert result.verdict is Verdict.POLICY


def test_symlink_loop_does_not_hang(tmp_path: Path) -> None:
    model = _folder(tmp_path)
    (model / "a").symlink_to("b")
    (model / "b").symlink_to("a")
    result = _scan_with_timeout(model)
    assert _rules(result, "a") and _rules(result, "b")


def test_symlinked_directory_is_not_descended(tmp_path: Path) -> None:
    model = _folder(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "weights.pkl").write_bytes(b"\x80\x04N.")
    (model / "linked").symlink_to(elsewhere)
    result = scan_target(model)
    assert result.files_scanned == 1
    assert not any(f.path.startswith("linked/") for f in result.findings)
    assert _rules(result, "linked") == {"fs.symlink"}


def test_target_that_is_a_symlink_is_not_followed(tmp_path: Path) -> None:
    model = _folder(tmp_path)
    link = tmp_path / "current"
    link.symlink_to(model)
    for target in (str(link), str(link) + "/"):  # a trailing '/' must not follow the link
        result = scan_target(target)
        assert _rules(result) == {"fs.target_symlink"}
        assert result.verdict is Verdict.POLICY
        assert result.files_scanned == 0


def test_fifo_is_never_opened(tmp_path: Path) -> None:
    model = _folder(tmp_path)
    os.mkfifo(model / "model.safetensors")
    result = _scan_with_timeout(model)
    assert _rules(result, "model.safetensors") == {"fs.special_file"}
    assert result.verdict is Verdict.MALFORMED


def test_fifo_as_single_file_target(tmp_path: Path) -> None:
    fifo = tmp_path / "model.safetensors"
    os.mkfifo(fifo)
    result = _scan_with_timeout(fifo)
    assert _rules(result) == {"fs.special_file"}
    assert result.verdict is Verdict.MALFORMED


def test_character_device_is_never_opened(tmp_path: Path) -> None:
    model = _folder(tmp_path)
    try:
        os.mknod(model / "model.safetensors", stat.S_IFCHR | 0o600, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("mknod not permitted here")
    result = _scan_with_timeout(model)
    assert _rules(result, "model.safetensors") == {"fs.special_file"}
    assert "character device" in result.findings[-1].evidence or any(
        "character device" in f.evidence for f in result.findings)


def test_socket_is_never_opened(tmp_path: Path) -> None:
    model = _folder(tmp_path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(model / "s.sock"))
        result = _scan_with_timeout(model)
    finally:
        sock.close()
    assert _rules(result, "s.sock") == {"fs.special_file"}


def test_hard_link_is_refused(tmp_path: Path) -> None:
    model = _folder(tmp_path)
    os.link(model / "config.json", model / "config-copy.json")
    result = scan_target(model)
    assert "fs.hardlink" in _rules(result, "config.json")
    assert "fs.hardlink" in _rules(result, "config-copy.json")
    assert result.verdict >= Verdict.POLICY  # type: ignore[operator]


def test_sparse_file_is_refused_and_not_read(tmp_path: Path) -> None:
    model = _folder(tmp_path)
    big = model / "blob.bin"
    with open(big, "wb") as handle:
        handle.truncate(1 << 33)  # 8 GiB of holes
    result = _scan_with_timeout(model, seconds=30)
    assert "fs.sparse_file" in _rules(result, "blob.bin")
    assert result.verdict >= Verdict.POLICY  # type: ignore[operator]


def test_small_file_with_holes_is_not_sparse(tmp_path: Path) -> None:
    st = os.stat_result((stat.S_IFREG | 0o644, 1, 1, 1, 0, 0, 1 << 20, 0, 0, 0))
    assert _fs.file_findings("x", st) == []


def _deny(monkeypatch: pytest.MonkeyPatch, denied: str) -> None:
    real_open: Callable[..., int] = os.open

    def fake_open(path: object, flags: int, *args: object, **kwargs: object) -> int:
        if os.fspath(path).endswith(denied):  # type: ignore[arg-type]
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(_fs.os, "open", fake_open)


def test_unreadable_file_is_a_finding_not_a_skip(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    model = _folder(tmp_path)
    (model / "secret.bin").write_bytes(b"data")
    _deny(monkeypatch, "secret.bin")
    result = scan_target(model)
    finding = next(f for f in result.findings if f.path == "secret.bin")
    assert finding.rule_id == "fs.unreadable" and finding.evidence == "EACCES"
    assert result.verdict is Verdict.MALFORMED


def test_unreadable_directory_is_a_finding(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    model = _folder(tmp_path)
    (model / "locked").mkdir()
    _deny(monkeypatch, "locked")
    result = scan_target(model)
    assert _rules(result, "locked") == {"fs.unreadable"}
    assert result.verdict is Verdict.MALFORMED
    # like an unreadable file, it is also listed as not analysed (report "skipped")
    assert [path for path, why in result.skipped if "not analysed" in why] == ["locked"]


def test_unlistable_directory_is_a_finding_and_skipped(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    model = _folder(tmp_path)
    (model / "sub").mkdir()
    real_scandir = _fs.os.scandir

    def fake_scandir(fd: Any) -> Any:
        if isinstance(fd, int) and os.readlink(f"/proc/self/fd/{fd}").endswith("/sub"):
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_scandir(fd)

    monkeypatch.setattr(_fs.os, "scandir", fake_scandir)
    result = scan_target(model)
    assert _rules(result, "sub") == {"fs.unreadable"}
    assert [path for path, why in result.skipped if "not analysed" in why] == ["sub"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files regardless of mode bits")
def test_unreadable_file_real_permissions(tmp_path: Path) -> None:
    model = _folder(tmp_path)
    secret = model / "secret.bin"
    secret.write_bytes(b"data")
    secret.chmod(0)
    try:
        result = scan_target(model)
    finally:
        secret.chmod(0o600)
    assert _rules(result, "secret.bin") == {"fs.unreadable"}


def test_file_replaced_after_lstat_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "a.bin"
    path.write_bytes(b"one")
    (tmp_path / "b.bin").write_bytes(b"two")  # allocated while a.bin lives: another inode
    st = os.lstat(path)
    os.rename(tmp_path / "b.bin", path)
    with pytest.raises(_fs.FsProblem) as info:
        _fs.open_regular(None, str(path), "a.bin", st)
    assert info.value.finding.rule_id == "fs.changed_during_scan"


def test_fifo_swapped_in_after_lstat_does_not_block(tmp_path: Path) -> None:
    path = tmp_path / "a.bin"
    path.write_bytes(b"one")
    st = os.lstat(path)
    path.unlink()
    os.mkfifo(path)
    errors: list[BaseException] = []

    def attempt() -> None:
        try:
            _fs.open_regular(None, str(path), "a.bin", st)
        except _fs.FsProblem as exc:
            errors.append(exc)

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(5)
    assert errors and errors[0].finding.rule_id == "fs.changed_during_scan"  # type: ignore[attr-defined]


def test_symlink_swapped_in_after_lstat_is_not_followed(tmp_path: Path) -> None:
    path = tmp_path / "a.bin"
    path.write_bytes(b"one")
    st = os.lstat(path)
    path.unlink()
    path.symlink_to("/etc/passwd")
    with pytest.raises(_fs.FsProblem) as info:
        _fs.open_regular(None, str(path), "a.bin", st)
    assert info.value.finding.rule_id == "fs.changed_during_scan"


def test_file_count_limit_is_a_finding(tmp_path: Path) -> None:
    model = _folder(tmp_path)
    for i in range(10):
        (model / f"f{i}.txt").write_text("hello\n")
    result = scan_target(model, Limits(max_files=5))
    assert "scanner.limit_exceeded" in _rules(result)
    assert result.verdict is Verdict.MALFORMED
    assert result.files_scanned <= 5


def test_directory_depth_limit_is_a_finding(tmp_path: Path) -> None:
    model = _folder(tmp_path)
    deep = model
    for _ in range(_fs.MAX_DIR_DEPTH + 2):
        deep = deep / "d"
    deep.mkdir(parents=True)
    (deep / "x.txt").write_text("x")
    result = scan_target(model)
    assert "scanner.limit_exceeded" in _rules(result)


def test_git_directory_is_skipped_with_reason(tmp_path: Path) -> None:
    model = _folder(tmp_path)
    (model / ".git" / "objects").mkdir(parents=True)
    (model / ".git" / "objects" / "ab").write_bytes(b"\x78\x9c\x00\x01\xff")
    result = scan_target(model)
    assert result.files_scanned == 1
    assert [p for p, _ in result.skipped] == [".git"]


def test_empty_folder_has_no_verdict(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = scan_target(empty)
    assert result.verdict is None
    assert result.error and "nothing to scan" in result.error


def test_missing_target_has_no_verdict(tmp_path: Path) -> None:
    result = scan_target(tmp_path / "nope")
    assert result.verdict is None and result.error == "no such file or directory"


def test_paths_are_relative_posix(tmp_path: Path) -> None:
    model = _folder(tmp_path)
    (model / "a" / "b").mkdir(parents=True)
    (model / "a" / "b" / "modeling_x.py").write_text("x = 1\n")
    result = scan_target(model)
    assert "a/b/modeling_x.py" in {f.path for f in result.findings}
    single = scan_target(model / "a" / "b" / "modeling_x.py")
    assert {f.path for f in single.findings} == {"modeling_x.py"}
    assert single.kind == "file" and single.root == str(model / "a" / "b")


def test_walk_closes_every_descriptor(tmp_path: Path) -> None:
    model = _folder(tmp_path)
    for i in range(5):
        (model / f"d{i}").mkdir()
        (model / f"d{i}" / "x.txt").write_text("x")
    before = len(os.listdir("/proc/self/fd"))
    scan_target(model)
    scan_target(model, Limits(max_files=3))
    assert len(os.listdir("/proc/self/fd")) == before


def _hf_cache(tmp_path: Path, weights: bytes) -> Path:
    """models--org--m/{blobs/<sha>, snapshots/<rev>/<name> -> ../../blobs/<sha>}."""
    import hashlib
    import json as _json

    repo = tmp_path / "hub" / "models--org--m"
    (repo / "blobs").mkdir(parents=True)
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    for name, data in (("config.json", _json.dumps({"model_type": "llama"}).encode()),
                       ("model.safetensors", weights)):
        sha = hashlib.sha256(data).hexdigest()
        (repo / "blobs" / sha).write_bytes(data)
        (snap / name).symlink_to(f"../../blobs/{sha}")
    return snap


def _st_file() -> bytes:
    import json as _json
    import struct

    header = _json.dumps({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + b"\x00"


def test_hf_cache_layout_links_are_judged_as_their_blobs(tmp_path: Path) -> None:
    """Issue 10: snapshots/<rev>/name -> ../../blobs/<sha> stays inside the repository;
    the blob's content decides (clean here), scanned from the snapshot or the repo."""
    snap = _hf_cache(tmp_path, _st_file())
    for target in (snap, snap.parent.parent):
        result = scan_target(target)
        assert result.verdict is Verdict.CLEAN, result.findings
    evil = _hf_cache(tmp_path / "x", b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00idtR.")
    result = scan_target(evil)
    assert result.verdict is Verdict.MALICIOUS
    assert any(f.path == "model.safetensors" and f.rule_id == "pickle.unsafe_global"
               for f in result.findings)


def test_hf_cache_link_leaving_the_blobs_folder_is_still_a_finding(tmp_path: Path) -> None:
    snap = _hf_cache(tmp_path, _st_file())
    (snap / "tokenizer.json").symlink_to("/etc/passwd")
    (snap / "x.json").symlink_to("../../../../outside.json")
    result = scan_target(snap)
    assert _rules(result, "tokenizer.json") == {"fs.symlink"}
    assert _rules(result, "x.json") == {"fs.symlink"}


# -- regular files opened as the directory listing names them (issue 30: no lstat per file) --

def _listed(path: Path) -> tuple[int, int]:
    """(st_dev of the folder, d_ino of the entry), as ``Walk(lstat_files=False)`` yields."""
    with os.scandir(path.parent) as it:
        item = next(e for e in it if e.name == path.name)
        return os.stat(path.parent).st_dev, item.inode()


def _open_listed(path: Path, listed: tuple[int, int]) -> tuple[bytes, os.stat_result]:
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        blob, st = _fs.open_listed(dir_fd, path.name, path.name, listed)
        try:
            return blob.read_at(0, blob.size), st
        finally:
            os.close(blob.fd)
    finally:
        os.close(dir_fd)


def test_sequential_folder_scan_does_not_lstat_regular_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _folder(tmp_path)
    (model / "sub").mkdir()
    (model / "sub" / "generation_config.json").write_bytes(b'{"do_sample": false}')
    seen: list[str] = []
    real_stat = os.stat

    def recording_stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        seen.append(os.fspath(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(_fs.os, "stat", recording_stat)
    result = scan_target(model)
    assert result.verdict is Verdict.CLEAN and result.files_scanned == 2
    assert "config.json" not in seen and "generation_config.json" not in seen
    assert "sub" in seen  # directories are still lstat-ed before they are opened


def test_listed_file_is_opened_without_lstat(tmp_path: Path) -> None:
    path = tmp_path / "a.bin"
    path.write_bytes(b"one")
    data, st = _open_listed(path, _listed(path))
    assert data == b"one" and stat.S_ISREG(st.st_mode) and st.st_ino == os.lstat(path).st_ino


def test_listed_file_replaced_by_fifo_does_not_block(tmp_path: Path) -> None:
    path = tmp_path / "a.bin"
    path.write_bytes(b"one")
    listed = _listed(path)
    path.unlink()
    os.mkfifo(path)
    errors: list[BaseException] = []

    def attempt() -> None:
        try:
            _open_listed(path, listed)
        except _fs.FsProblem as exc:
            errors.append(exc)

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(5)
    assert errors and errors[0].finding.rule_id == "fs.changed_during_scan"  # type: ignore[attr-defined]


def test_listed_file_replaced_by_symlink_is_not_followed(tmp_path: Path) -> None:
    path = tmp_path / "a.bin"
    path.write_bytes(b"one")
    listed = _listed(path)
    path.unlink()
    path.symlink_to("/etc/passwd")
    with pytest.raises(_fs.FsProblem) as info:
        _open_listed(path, listed)
    assert info.value.finding.rule_id == "fs.changed_during_scan"


def test_listed_inode_that_is_not_the_files_is_checked_by_lstat(tmp_path: Path) -> None:
    """A listing whose d_ino is not the file's st_ino (a file replaced since the listing,
    overlayfs over several filesystems, a bind mount): the file at the name is lstat-ed
    and opened again, as in the lstat-first walk, and judged."""
    path = tmp_path / "a.bin"
    path.write_bytes(b"one")
    (tmp_path / "b.bin").write_bytes(b"two")  # allocated while a.bin lives: another inode
    listed = _listed(path)
    os.rename(tmp_path / "b.bin", path)
    data, st = _open_listed(path, listed)
    assert data == b"two" and st.st_ino == os.lstat(path).st_ino != listed[1]


def test_listed_file_unreadable_is_a_finding_in_the_inventory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A listed file that cannot be opened is judged unreadable, and is still a regular
    file of the folder for index references (the inventory the lstat used to fill)."""
    model = _folder(tmp_path)
    (model / "model.safetensors").write_bytes(b"x")
    (model / "model.safetensors.index.json").write_bytes(
        b'{"weight_map": {"w": "model.safetensors"}}')
    _deny(monkeypatch, "model.safetensors")
    result = scan_target(model)
    assert _rules(result, "model.safetensors") == {"fs.unreadable"}
    assert "path.missing" not in _rules(result)
