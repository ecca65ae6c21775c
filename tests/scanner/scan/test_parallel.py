"""Parallel folder scans (scanner.scan.parallel, issue 10): the same findings as a sequential
scan, walk-level findings once, and a folder that changes between workers fails closed.
About 2 s (600 small files, scanned twice)."""

from __future__ import annotations

import json
import os
import pickle as P
from pathlib import Path

from scanner.api import scan_target
from scanner.core.model import Verdict
from scanner.scan.parallel import MIN_FILES, export, merge
from scanner.scan.walk import TargetScan

EVIL = P.PROTO + b"\x02" + P.GLOBAL + b"os\nsystem\n" + P.SHORT_BINUNICODE + b"\x02id" \
    + P.TUPLE1 + P.REDUCE + P.STOP


def _fleet(root: Path) -> Path:
    for i in range(MIN_FILES + 88):
        sub = root / f"m{i % 7}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"note{i}.txt").write_text(f"plain text {i}\n")
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


def test_parallel_worker_seeing_another_inventory_fails_closed(tmp_path: Path) -> None:
    root = _fleet(tmp_path / "fleet")
    lead = TargetScan(str(root), str(root), scan_target.__defaults__[0],  # type: ignore[index]
                       None, folder=True, share=(0, 2))
    lead.folder(os.lstat(root))
    helper = TargetScan(str(root), str(root), lead.ctx.limits, None, folder=True,
                         share=(1, 2))
    (root / "m2" / "late.txt").write_text("appeared during the scan\n")
    helper.folder(os.lstat(root))
    merge(lead, export(helper))
    assert "fs.changed_during_scan" in {f.rule_id for f in lead.findings}
