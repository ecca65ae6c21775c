"""A parallel share's regular files as the directory listing names them
(``TargetScan.listed_share_file``, issue 30: no ``lstat`` of a share's own files, 11.7 ms of
a fleet scan's critical path): whichever way a share learns a file's size (the open's
``fstat`` while its last file was its own, else an ``lstat``), every file is analysed by
exactly one share, the shares together find what a sequential scan finds, each keeps the
whole inventory, and a file that cannot be opened is reported once: by its owner, or by the
lead when it cannot be ``lstat``-ed either. The shares run one after the other in this
process (fixed hash shares, no fork)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from scanner_helpers import EVIL_PICKLE, parallel_folder

from scanner.api import scan_target
from scanner.core.context import Limits
from scanner.core.fs import UNREADABLE, FsProblem
from scanner.scan import walk as _walk
from scanner.scan.shares import Share, shard_of
from scanner.scan.walk import TargetScan

EVIL = EVIL_PICKLE


def _folder(root: Path) -> Path:
    return parallel_folder(root)


def _shares(root: Path, open_first: bool = True) -> list[TargetScan]:
    out = []
    for index in range(2):
        scan = TargetScan(str(root), str(root), Limits(), None, folder=True,
                          share=Share(index, 2))
        scan.open_first = open_first
        scan.folder(os.lstat(root))
        out.append(scan)
    return out


def _keys(findings: list[Any]) -> list[tuple[str, str, str]]:
    return sorted((f.rule_id, f.path, f.evidence) for f in findings)


@pytest.mark.parametrize("open_first", [True, False])
def test_shares_analyse_every_file_once_and_find_what_a_sequential_scan_finds(
        tmp_path: Path, open_first: bool) -> None:
    root = _folder(tmp_path / "f")
    sequential = scan_target(root, jobs=1)
    lead, helper = _shares(root, open_first)
    assert lead.files > 0 and helper.files > 0
    assert lead.files + helper.files == sequential.files_scanned == 62
    assert _keys(lead.findings + helper.findings) == _keys(sequential.findings)
    everything = {p.relative_to(root).as_posix() for p in root.rglob("*")}
    assert set(lead.checks.inventory) == set(helper.checks.inventory) == everything
    assert stat.S_ISREG(lead.checks.inventory["d1/evil.pkl"])


def test_both_ways_of_learning_the_size_are_taken(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A share alternates: it opens first after its own file, lstat-s first after another
    share's (each way seen; another share's file is opened only in the open-first way)."""
    root = _folder(tmp_path / "f")
    opened: list[str] = []
    real = _walk.open_listed

    def counting(dir_fd: int, name: str, rel: str, listed: tuple[int, int]) -> Any:
        opened.append(rel)
        return real(dir_fd, name, rel, listed)

    monkeypatch.setattr(_walk, "open_listed", counting)
    lead = TargetScan(str(root), str(root), Limits(), None, folder=True, share=Share(0, 2))
    lead.folder(os.lstat(root))
    sizes = {p.relative_to(root).as_posix(): (p.name, p.stat().st_size)
             for p in root.rglob("*") if p.is_file()}
    foreign = [rel for rel in sizes if shard_of(*sizes[rel], 2) != 0]
    foreign_opened = [rel for rel in opened if rel in foreign]
    assert foreign_opened, "the open-first way met another share's file"
    assert len(foreign_opened) < len(foreign), "the lstat-first way opened none of some"
    assert lead.files == len(sizes) - len(foreign)


def _fail_opening(monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    """Opening ``target`` fails (``fs.unreadable``) whichever way a share opens it."""
    listed, blob = _walk.open_listed, _walk.open_blob

    def problem(rel: str) -> FsProblem:
        return FsProblem(UNREADABLE.finding(rel, "cannot open file: test", "EACCES"))

    def fake_listed(dir_fd: int, name: str, rel: str, where: tuple[int, int]) -> Any:
        if rel == target:
            raise problem(rel)
        return listed(dir_fd, name, rel, where)

    def fake_blob(dir_fd: int | None, name: str, rel: str, st: os.stat_result) -> Any:
        if rel == target:
            raise problem(rel)
        return blob(dir_fd, name, rel, st)

    monkeypatch.setattr(_walk, "open_listed", fake_listed)
    monkeypatch.setattr(_walk, "open_blob", fake_blob)


@pytest.mark.parametrize("open_first", [True, False])
def test_a_file_that_cannot_be_opened_is_reported_by_its_owner_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, open_first: bool) -> None:
    root = _folder(tmp_path / "f")
    for target, name, size in (("d1/evil.pkl", "evil.pkl", len(EVIL)),
                               ("d0/note0.md", "note0.md", 2)):
        monkeypatch.undo()
        _fail_opening(monkeypatch, target)
        owner = shard_of(name, size, 2)
        scans = _shares(root, open_first)
        reports = [[f for f in s.findings if f.path == target] for s in scans]
        assert [[f.rule_id for f in r] for r in reports] == [
            ["fs.unreadable"] if i == owner else [] for i in range(2)], target
        assert (target, reports[owner][0].message) in scans[owner].skipped
        assert scans[0].files + scans[1].files == 61


def _entry_for(root: Path, rel: str) -> tuple[Any, int]:
    from scanner.core.fs import Entry

    fd = os.open(root / Path(rel).parent, os.O_RDONLY | os.O_DIRECTORY)
    return Entry(rel, None, fd, Path(rel).name, (0, 0)), fd


def test_a_file_gone_before_its_size_is_known_is_reported_by_the_lead_only(
        tmp_path: Path) -> None:
    root = _folder(tmp_path / "f")
    problem = FsProblem(UNREADABLE.finding("d2/gone.bin", "cannot open file: gone", "ENOENT"))
    said = []
    for index in range(2):
        scan = TargetScan(str(root), str(root), Limits(), None, folder=True,
                          share=Share(index, 2))
        entry, fd = _entry_for(root, "d2/gone.bin")  # listed, then gone: no lstat either
        try:
            scan._share_problem(entry, Share(index, 2), problem)
        finally:
            os.close(fd)
        said.append([f.rule_id for f in scan.findings])
        assert "d2/gone.bin" in scan.checks.inventory
    assert said == [["fs.unreadable"], []]


def test_lstat_first_reports_a_file_that_is_no_longer_regular_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file another share's (``mine`` False), so after the first file both shares
    learn sizes by ``lstat``; one file's ``lstat`` says folder: the lead alone reports it."""
    root = _folder(tmp_path / "f")
    real_stat = os.stat

    def now_a_folder(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        st = real_stat(path, *args, **kwargs)
        if path == "note5.md":
            return os.stat_result((stat.S_IFDIR | 0o755,) + tuple(st)[1:])
        return st

    monkeypatch.setattr(_walk.os, "stat", now_a_folder)
    monkeypatch.setattr(Share, "mine", lambda self, rel, name, size: False)
    lead, helper = _shares(root, open_first=False)
    assert [f.rule_id for f in lead.findings if f.path == "d1/note5.md"] == [
        "fs.changed_during_scan"]
    assert "d1/note5.md" not in {f.path for f in helper.findings}
    assert stat.S_ISDIR(lead.checks.inventory["d1/note5.md"])
    assert lead.files == helper.files == 0
