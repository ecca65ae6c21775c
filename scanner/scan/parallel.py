"""Parallel scanning of one large folder target across processes (``jobs`` > 1).

Every worker walks the same folder (the walk is name-sorted, so deterministic) and
analyses every ``jobs``-th regular file; share 0 runs in the calling process and alone
reports walk-level findings (links, special files, inventory checks). Workers return
plain JSON (findings, the folder-rule state: sharded indexes, Python sources, auto_map
references); nothing is unpickled from a worker. The calling process merges and runs the
folder rules once. If a worker's inventory differs from share 0's (the folder changed
during the scan) the target gets ``fs.changed_during_scan`` (malformed): a file may have
been missed, so the scan fails closed.

Memory: each worker holds one file's analysis at a time, as a sequential scan does, plus
its share of the folder-rule state. Workers are forked (the CLI is single-threaded) and
are used only for folders of at least ``MIN_FILES`` regular files.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from scanner.core.context import Limits
from scanner.core.fs import CHANGED
from scanner.core.model import Finding, Severity, Verdict
from scanner.scan.dispatch import load_all_rules
from scanner.scan.walk import TargetScan

MIN_FILES = 512
MAX_JOBS = 16


def count_files(root: str, limit: int) -> int:
    """Regular files under ``root`` (not following links), counting up to ``limit``."""
    n = 0
    stack = [root]
    while stack and n < limit:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    elif e.is_file(follow_symlinks=False):
                        n += 1
        except OSError:
            continue
    return n


def finding_from(d: dict[str, Any]) -> Finding:
    return Finding(d["rule_id"], Severity[d["severity"].upper()], Verdict[d["verdict"].upper()],
                   d["path"], d["message"], d["evidence"], d.get("offset"))


def export(scan: TargetScan) -> str:
    """A worker's results as JSON."""
    return json.dumps({
        "findings": [f.to_dict() for f in scan.findings],
        "skipped": scan.skipped, "files": scan.files,
        "inventory": sorted(scan.checks.inventory),
        "indexes": scan.checks.indexes,
        "python": {k: v.decode("latin-1") for k, v in scan.checks.python.items()},
        "auto_map": scan.ctx.auto_map,
    })


def _worker(target: str, root: str, limits: Limits, index: int, of: int) -> str:
    st = os.lstat(root)
    scan = TargetScan(target, root, limits, None, folder=True, share=(index, of))
    scan.folder(st)
    return export(scan)


def merge(scan: TargetScan, payload: str) -> None:
    """Fold a worker's JSON results into share 0's scan."""
    data = json.loads(payload)
    scan.findings.extend(finding_from(d) for d in data["findings"])
    scan.skipped.extend((p, r) for p, r in data["skipped"])
    scan.files += data["files"]
    scan.checks.indexes.update(data["indexes"])
    scan.checks.python.update({k: v.encode("latin-1") for k, v in data["python"].items()})
    scan.ctx.auto_map.extend((p, r) for p, r in data["auto_map"])
    if data["inventory"] != sorted(scan.checks.inventory):
        scan.findings.append(CHANGED.finding(
            ".", "workers walking the folder saw different entries",
            f"{len(data['inventory'])} vs {len(scan.checks.inventory)} entries"))


def folder_parallel(scan: TargetScan, st: os.stat_result, jobs: int) -> None:
    """Scan ``scan``'s folder with ``jobs`` processes (share 0 in this process)."""
    load_all_rules()  # import every analyzer (jinja2 too) once, before forking
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=jobs - 1, mp_context=ctx) as pool:
        futures = [pool.submit(_worker, scan.target, scan.root, scan.ctx.limits, i, jobs)
                   for i in range(1, jobs)]
        scan.share = (0, jobs)
        scan.folder(st)
        for future in futures:
            merge(scan, future.result())
