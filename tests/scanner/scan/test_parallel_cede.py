"""A helper of a parallel folder scan passes the files of names only other shares hold
without learning their size (``Share.cedes``, issue 30: the helper of a fleet scan
``lstat``-ed ~3,900 files it did not own). Whatever the interleaving of the processes and
however names and sizes collide in the claims table, every regular file is analysed by
exactly one share; the lead never cedes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scanner_helpers import parallel_folder

from scanner.api import scan_target
from scanner.core.context import Limits
from scanner.core.fs import open_listed
from scanner.scan import shares as _shares
from scanner.scan import walk as _walk
from scanner.scan.shares import Claims, Share
from scanner.scan.walk import TargetScan


def _same_row(name: str) -> str:
    """Another base name in ``name``'s claims row."""
    row = _shares._row(name)
    return next(f"n{i}.json" for i in range(1 << 20) if _shares._row(f"n{i}.json") == row)


def test_a_helper_cedes_a_name_only_others_hold_and_never_claims_in_its_row() -> None:
    claims = Claims()
    try:
        lead, helper = Share(0, 2, claims), Share(1, 2, claims)
        assert not helper.cedes("a.pkl")  # nobody holds it yet: learn the size
        assert lead.mine("x/a.pkl", "a.pkl", 10)
        assert helper.cedes("a.pkl")
        assert helper.cedes(_same_row("a.pkl"))  # the row, not only the name
        # a group of that name nobody holds: the lead claims it (the helper never asks)
        assert lead.mine("y/a.pkl", "a.pkl", 99)
        assert helper.cedes("a.pkl")
        # a row the helper marked stays the helper's to look at, whoever claims in it
        assert helper.mine("x/b.pkl", "b.pkl", 5)
        assert lead.mine("y/b.pkl", "b.pkl", 6)
        assert not helper.cedes("b.pkl")
        assert not helper.mine("y/b.pkl", "b.pkl", 6)
        assert not lead.cedes("b.pkl") and not lead.cedes("zzz")  # the lead never cedes
        assert lead.owned == {"x/a.pkl", "y/a.pkl", "y/b.pkl"}
        assert helper.owned == {"x/b.pkl"}
    finally:
        claims.close()


def test_without_a_claims_table_nothing_is_ceded() -> None:
    assert not Share(1, 2).cedes("a.pkl")
    assert not Share(0, 2).cedes("a.pkl")


def _walk_order(files: list[tuple[str, str, int]], reverse: bool) -> list[int]:
    return sorted(range(len(files)), key=lambda i: files[i][0], reverse=reverse)


@settings(max_examples=300, deadline=None)
@given(names=st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), min_size=1, max_size=14),
       sizes=st.lists(st.integers(0, 5), min_size=14, max_size=14),
       schedule=st.lists(st.integers(0, 2), min_size=60, max_size=60),
       rows=st.sampled_from([1, 2, 4096]), column_bits=st.sampled_from([0, 1, 4]))
def test_every_file_has_exactly_one_analyser_in_any_interleaving(
        names: list[str], sizes: list[int], schedule: list[int], rows: int,
        column_bits: int) -> None:
    """Up to three shares walk the same files (shares 0 and 2 forward, 1 backward) in a
    random interleaving; a tiny table makes names and sizes collide. Each share does what
    the walk does: passes a ceded name, else analyses the file when ``mine``."""
    files = [(f"d{i}/{n}", n, sizes[i]) for i, n in enumerate(names)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Claims, "ROWS", rows)
        mp.setattr(Claims, "COLUMN_BITS", column_bits)
        mp.setattr(Claims, "SLOTS", rows << column_bits)
        claims = Claims()
        try:
            of = 3
            shares = [Share(i, of, claims) for i in range(of)]
            orders = [_walk_order(files, s.reverse) for s in shares]
            analysed: dict[int, list[int]] = {i: [] for i in range(len(files))}
            steps = [0] * of
            pending = list(schedule) + [i for i in range(of) for _ in files]
            for who in pending:
                if steps[who] >= len(files):
                    continue
                index = orders[who][steps[who]]
                steps[who] += 1
                rel, name, size = files[index]
                if not shares[who].cedes(name) and shares[who].mine(rel, name, size):
                    analysed[index].append(who)
            assert all(len(by) == 1 for by in analysed.values()), analysed
        finally:
            claims.close()


def _folder(root: Path) -> Path:
    return parallel_folder(root, notes=40, repeat=10)


def _keys(findings: list[Any]) -> list[tuple[str, str, str]]:
    return sorted((f.rule_id, f.path, f.evidence) for f in findings)


@pytest.mark.parametrize("lead_first", [True, False])
def test_shares_with_a_table_find_what_a_sequential_scan_finds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lead_first: bool) -> None:
    """One share runs to the end before the other starts (the two extremes of a race):
    together they analyse every file once and report what a sequential scan reports; a
    helper that runs second learns the size of none of the lead's files."""
    root = _folder(tmp_path / "f")
    sequential = scan_target(root, jobs=1)
    looked: list[str] = []
    real_stat, real_open = os.stat, open_listed

    def counting_stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        looked.append(str(path))
        return real_stat(path, *args, **kwargs)

    def counting_open(dir_fd: int, name: str, rel: str, listed: tuple[int, int]) -> Any:
        looked.append(name)
        return real_open(dir_fd, name, rel, listed)

    claims = Claims()
    try:
        scans = {i: TargetScan(str(root), str(root), Limits(), None, folder=True,
                               share=Share(i, 2, claims)) for i in range(2)}
        for index in ((0, 1) if lead_first else (1, 0)):
            if index == 1:
                monkeypatch.setattr(os, "stat", counting_stat)
                monkeypatch.setattr(_walk, "open_listed", counting_open)
            scans[index].folder(real_stat(root))
            monkeypatch.undo()
    finally:
        claims.close()
    lead, helper = scans[0], scans[1]
    assert lead.files + helper.files == sequential.files_scanned == 42
    assert _keys(lead.findings + helper.findings) == _keys(sequential.findings)
    assert set(lead.share.owned) | set(helper.share.owned) == {  # type: ignore[union-attr]
        p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    assert set(lead.checks.inventory) == set(helper.checks.inventory)
    looked_files = [n for n in looked if n not in {"d0", "d1", "d2", "d3"}]  # not folders
    if lead_first:
        assert helper.files == 0 and looked_files == []
    else:
        assert lead.files == 0 and len(looked_files) == 42


def test_a_forked_scan_equals_a_sequential_one(tmp_path: Path) -> None:
    root = _folder(tmp_path / "f")
    for copy in range(12):  # enough regular files for the parallel path (MIN_FILES)
        (root / f"c{copy}").mkdir()
        for i in range(50):
            (root / f"c{copy}" / f"f{i}.md").write_text(f"{i}\n")
    sequential = scan_target(root, jobs=1)
    parallel = scan_target(root, jobs=2)
    assert parallel.files_scanned == sequential.files_scanned == 642
    assert _keys(parallel.findings) == _keys(sequential.findings)


def test_the_parallel_scan_freezes_the_collector_until_it_ends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Objects alive at the fork (imported analyzers included) are out of the cyclic
    collector while the processes run (collecting them copied shared pages), and back in
    it afterwards, also when the scan raises."""
    import gc

    from scanner.scan import parallel

    root = _folder(tmp_path / "f")
    real = parallel._fork_and_scan
    seen: list[int] = []

    def watching(*args: Any) -> None:
        seen.append(gc.get_freeze_count())
        real(*args)

    monkeypatch.setattr(parallel, "_fork_and_scan", watching)
    scan = TargetScan(str(root), str(root), Limits(), None, folder=True)
    parallel.folder_parallel(scan, os.lstat(root), 2)
    assert seen and seen[0] > 10_000 and scan.files == 42
    assert gc.get_freeze_count() == 0

    def failing(*args: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(parallel, "_fork_and_scan", failing)
    with pytest.raises(RuntimeError):
        parallel.folder_parallel(TargetScan(str(root), str(root), Limits(), None,
                                            folder=True), os.lstat(root), 2)
    assert gc.get_freeze_count() == 0
