"""Parallel folder scans (scanner.scan.parallel, issue 10): the same report as a sequential
scan, every file counted, walk-level findings once, and a folder that changes between
processes or a helper that crashes, hangs or lies fails closed. About 10 s in all (600
small files, scanned ~20 times; the deadline test waits 3 s)."""

from __future__ import annotations

import json
import os
import pickle as P
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from scanner.api import scan_target
from scanner.core.context import Limits
from scanner.core.model import Verdict
from scanner.scan import parallel as _parallel
from scanner.scan.parallel import MIN_FILES, export, merge
from scanner.scan.shares import Share, shard_of
from scanner.scan.walk import TargetScan

EVIL = P.PROTO + b"\x02" + P.GLOBAL + b"os\nsystem\n" + P.SHORT_BINUNICODE + b"\x02id" \
    + P.TUPLE1 + P.REDUCE + P.STOP


def _fleet(root: Path) -> Path:
    for i in range(MIN_FILES + 88):
        sub = root / f"m{i % 7}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"note{i}.md").write_text(f"plain text {i}\n")
    (root / "m3" / "evil.pkl").write_bytes(EVIL)
    (root / "m5" / "config.json").write_text(json.dumps({"auto_map": {"AutoModel": "x.Y"}}))
    os.symlink("/etc/passwd", root / "m1" / "link.json")
    return root


def _key(result: object) -> list[tuple[str, str, str]]:
    return sorted((f.rule_id, f.path, f.evidence) for f in result.findings)  # type: ignore[attr-defined]


def test_parallel_scan_equals_sequential(tmp_path: Path) -> None:
    root = _fleet(tmp_path / "fleet")
    one = scan_target(root, jobs=1)
    two = scan_target(root, jobs=2)
    assert one.verdict is two.verdict is Verdict.MALICIOUS
    assert _key(one) == _key(two)
    assert one.files_scanned == two.files_scanned == MIN_FILES + 90
    assert sorted(one.skipped) == sorted(two.skipped)
    assert len([f for f in two.findings if f.rule_id == "fs.symlink"]) == 1


def _appear(root: Path) -> None:
    (root / "m2" / "late.txt").write_text("appeared during the scan\n")


def _rename(root: Path) -> None:
    victim = next(p for p in sorted(root.rglob("*")) if p.is_file())
    victim.rename(victim.with_name(victim.name + ".moved"))


@pytest.mark.parametrize("change", [_appear, _rename], ids=["new entry", "renamed entry"])
def test_parallel_worker_seeing_another_inventory_fails_closed(
        tmp_path: Path, change: Callable[[Path], None]) -> None:
    """A helper that saw other entries than the lead (one more, or as many with one name
    changed: its inventory digest differs) makes the target ``fs.changed_during_scan``."""
    root = _fleet(tmp_path / "fleet")
    lead = TargetScan(str(root), str(root), scan_target.__defaults__[0],  # type: ignore[index]
                       None, folder=True, share=Share(0, 2))
    lead.folder(os.lstat(root))
    helper = TargetScan(str(root), str(root), lead.ctx.limits, None, folder=True,
                         share=Share(1, 2))
    change(root)
    helper.folder(os.lstat(root))
    merge(lead, export(helper))
    changed = [f for f in lead.findings if f.rule_id == "fs.changed_during_scan"]
    assert [f.message for f in changed] == ["processes walking the folder saw different entries"]


def test_file_resized_between_two_shares_looks_is_not_left_unjudged(tmp_path: Path) -> None:
    """Each share decides a file's owner from the size it saw: a file resized between the
    helper's look and the lead's can fall to the other share for each. It was analysed by
    neither, so the target gets ``fs.changed_during_scan`` naming it (before: the merged
    result just lacked its findings, and a malicious pickle left the folder clean)."""
    root = tmp_path / "fleet"
    root.mkdir()
    for i in range(40):
        (root / f"note{i}.md").write_text(f"plain text {i}\n")
    pads = [n for n in range(64) if shard_of("evil.pkl", len(EVIL) + n, 2) == 0]
    later = [n for n in range(64) if shard_of("evil.pkl", len(EVIL) + n, 2) == 1]
    evil = root / "evil.pkl"
    evil.write_bytes(EVIL + b"\n" * pads[0])  # the helper sees the lead's size
    limits = scan_target.__defaults__[0]  # type: ignore[index]
    helper = TargetScan(str(root), str(root), limits, None, folder=True, share=Share(1, 2))
    helper.folder(os.lstat(root))
    evil.write_bytes(EVIL + b"\n" * later[0])  # and the lead the helper's
    lead = TargetScan(str(root), str(root), limits, None, folder=True, share=Share(0, 2))
    lead.folder(os.lstat(root))
    merge(lead, export(helper))
    assert "evil.pkl" not in lead.share.owned | helper.share.owned  # type: ignore[union-attr]
    found = _parallel.judged_by_none(lead)
    assert [(f.rule_id, f.path, f.verdict) for f in found] == [
        ("fs.changed_during_scan", "evil.pkl", Verdict.MALFORMED)]
    lead.findings.extend(found)
    assert lead.result("folder", time.monotonic()).verdict is not Verdict.CLEAN


def test_every_regular_file_has_an_owner_in_a_parallel_scan(tmp_path: Path) -> None:
    root = _fleet(tmp_path / "fleet")
    two = scan_target(root, jobs=2)
    assert "fs.changed_during_scan" not in {f.rule_id for f in two.findings}
    assert two.files_scanned == MIN_FILES + 90


def _report(result: object) -> dict[str, object]:
    """The JSON form of one target's result without its timing."""
    from scanner.api import ScanReport
    from scanner.report import to_json_dict

    doc = to_json_dict(ScanReport([result]))  # type: ignore[list-item]
    for target in doc["targets"]:
        target.pop("seconds")
    return doc


def test_serial_and_parallel_reports_are_identical(tmp_path: Path) -> None:
    root = _fleet(tmp_path / "fleet")
    for copy in range(3):  # identical copies: one process analyses them (shard_of)
        (root / f"copy{copy}").mkdir()
        (root / f"copy{copy}" / "evil.pkl").write_bytes(EVIL)
    serial = _report(scan_target(root, jobs=1))
    for jobs in (2, 3, 5):
        assert _report(scan_target(root, jobs=jobs)) == serial, jobs


def test_parallel_scan_counts_every_file(tmp_path: Path) -> None:
    root = _fleet(tmp_path / "fleet")
    regular = sum(1 for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    for jobs in (1, 2, 4):
        assert scan_target(root, jobs=jobs).files_scanned == regular


def test_parallel_scan_of_clean_fleet_is_clean(tmp_path: Path) -> None:
    root = tmp_path / "fleet"
    for i in range(MIN_FILES + 10):
        sub = root / f"m{i % 5}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"note{i}.md").write_text(f"plain text {i}\n")
    result = scan_target(root, jobs=3)
    assert result.verdict is Verdict.CLEAN, result.findings
    assert result.files_scanned == MIN_FILES + 10


def test_shard_of_is_stable_and_groups_copies() -> None:
    assert shard_of("model.safetensors", 1234, 4) == shard_of("model.safetensors", 1234, 4)
    shares = {shard_of(f"file{i}.json", i, 4) for i in range(200)}
    assert shares == {0, 1, 2, 3}  # every process gets work
    assert {shard_of("x", 5, 1)} == {0}


def _crashing_helper(how: str, woke: Path | None = None) -> object:
    def export(scan: object) -> str:
        if how == "exit":
            os._exit(3)
        if how == "signal":
            os.kill(os.getpid(), signal.SIGKILL)
        if how == "raise":
            raise RuntimeError("helper blew up")
        if how == "garbage":
            return "{not json"
        time.sleep(30)  # "hang"
        if woke is not None:
            woke.write_text("the helper ran to its end: it was never killed")
        return ""
    return export


@pytest.mark.parametrize("how", ["exit", "signal", "raise", "garbage"])
def test_parallel_helper_crash_is_a_finding_not_a_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    root = tmp_path / "fleet"
    for i in range(MIN_FILES + 10):  # all clean: only the crash can make it not clean
        sub = root / f"m{i % 5}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"note{i}.md").write_text(f"plain text {i}\n")
    monkeypatch.setattr(_parallel, "export", _crashing_helper(how))  # runs in helpers only
    result = scan_target(root, jobs=2)
    assert result.verdict is Verdict.MALFORMED
    errors = [f for f in result.findings if f.rule_id == "scanner.internal_error"]
    assert len(errors) == 1 and "helper process 1 of 1" in errors[0].evidence
    assert any("not judged" in reason for _, reason in result.skipped)
    if how == "raise":
        assert "RuntimeError: helper blew up" in errors[0].evidence


def test_parallel_helper_past_the_deadline_is_killed_and_a_limit_finding(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """About 3 s: the helper hangs (30 s, then it would leave a mark); the parent kills it
    at its 3 s deadline, so the scan ends before the helper could wake."""
    root = _fleet(tmp_path / "fleet")
    woke = tmp_path / "helper-woke"
    monkeypatch.setattr(_parallel, "export", _crashing_helper("hang", woke))
    monkeypatch.setattr(_parallel, "GRACE_S", 0.0)
    result = scan_target(root, Limits(seconds_per_target=3.0), jobs=2)
    assert not woke.exists()
    assert result.verdict is not Verdict.CLEAN
    assert "scanner.limit_exceeded" in {f.rule_id for f in result.findings}
