"""Parallel scanning of one large folder target across forked processes (``jobs`` > 1).

Every process walks the same folder (name-sorted; odd shares in descending order, so two
processes start at opposite ends) and analyses the regular files it owns: files are
grouped by base name and size (the copies of one file in a fleet), and the first process
to meet a group claims it (``Claims``, a table in shared memory), so a group is analysed
by one process, whose content memo (``scanner.scan.memo``) analyses the copies once, and a
process busy with a large file leaves the next groups to the others. A helper learns a
file's size (its group) only when another process has not already taken every group it
could be in: files of names only others hold are passed by name (``Share.cedes``).
Share 0 runs in the calling process and alone reports walk-level findings (links,
special files, inventory checks). Each helper is a plain ``os.fork`` child that writes
its results as one JSON document to a pipe and leaves with ``os._exit``; nothing is
unpickled from a helper. The calling process merges and runs the folder rules once. The
report equals a sequential scan's (``tests/scanner/scan/test_parallel.py``), except that
``skipped`` entries may come in another order.

Fail closed: a helper that crashes, is killed, exits non-zero, sends no or invalid JSON,
or outlives the target's deadline (plus ``GRACE_S``) gives the target a
``scanner.internal_error`` or ``scanner.limit_exceeded`` finding (verdict ``malformed``):
its files were not judged, so the target is never clean. If a helper's inventory differs
from share 0's (the folder changed during the scan) the target gets
``fs.changed_during_scan`` (malformed), and so does every regular file that no process
took (each process decides a file's owner from the size it saw, so a file resized between
two processes' looks could otherwise be left by each to the other: ``judged_by_none``).

Memory: each process holds one file's analysis at a time, as a sequential scan does, plus
its bounded memos (``scanner.scan.memo.MAX_ENTRIES`` results of files <= 1 MiB) and its share
of the findings and folder-rule state; the claims table is 64 KiB; the parent reads each
helper's JSON (its share's findings) into memory once. Used only for folders of at least
``MIN_FILES`` regular files, and only from a single-threaded caller (the CLI): forking a
threaded process is unsafe.

Garbage collection: every object alive at the fork (the analyzers just imported among
them) is frozen out of the cyclic collector (``gc.freeze``) until the helpers are reaped.
Collecting them touched every page of them in both processes, each touch of a shared page
a copy-on-write fault: the lead's collections took 5.5-10 ms of a fleet scan (its critical
path), 1.2-1.5 ms with the freeze. The parent unfreezes everything afterwards
(``gc.unfreeze``, objects frozen by the caller before included), so a caller's later
collections see them again.
"""

from __future__ import annotations

import gc
import hashlib
import importlib
import json
import os
import select
import signal
import stat
import time
from typing import Any

from scanner.core.context import LimitHit
from scanner.core.fs import CHANGED
from scanner.core.gcpause import gc_paused
from scanner.core.model import Finding, Severity, Verdict
from scanner.core.rules import INTERNAL_ERROR
from scanner.scan.dispatch import load_all_rules
from scanner.scan.shares import Claims, Share
from scanner.scan.walk import TargetScan

MIN_FILES = 512
MAX_JOBS = 16  # at most 16: one bit per share in a 16-bit mark (shares.Claims.marks)
# Third-party modules analyzers import on first use (scanner.formats.pickle.second).
PRELOAD = ("picklescan.scanner",)
GRACE_S = 30.0  # a helper may outlive the target's deadline by this much before it is killed


def default_jobs() -> int:
    """Processes for a folder scan when none are asked for: the usable CPUs that are idle
    now (affinity CPUs minus the other runnable tasks that ``/proc/loadavg`` counts), at
    least 1. On a busy machine extra processes only add forking and walking work, so it
    scans sequentially; the report is the same either way."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)
    try:
        with open("/proc/loadavg", encoding="ascii") as fh:
            runnable = int(fh.read().split()[3].split("/")[0])  # this process included
    except (OSError, ValueError, IndexError):
        return min(cpus, MAX_JOBS)
    return max(1, min(cpus - max(runnable - 1, 0), MAX_JOBS))


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


def finding_from(row: list[Any]) -> Finding:
    """A finding from its ``export`` row ``[rule_id, severity, verdict, path, message,
    evidence, offset]`` (severity and verdict as their numbers). Raises ``ValueError`` or
    ``TypeError`` for anything else."""
    rule_id, severity, verdict, path, message, evidence, offset = row
    try:
        return Finding(rule_id, _SEVERITIES[severity], _VERDICTS[verdict], path, message,
                       evidence, offset)
    except KeyError:
        raise ValueError(f"unknown severity or verdict in {row!r:.200}") from None


_SEVERITIES = {int(s): s for s in Severity}  # by number (an Enum call is Python code)
_VERDICTS = {int(v): v for v in Verdict}


def inventory_digest(inventory: dict[str, int]) -> list[int | str]:
    """``[entries, SHA-256 hex]`` of an inventory's relative paths (sorted, NUL-separated:
    no name holds a NUL): what a helper sends for share 0 to compare its own with (the
    paths themselves were most of a fleet helper's result, ~220 KB)."""
    names = "\0".join(sorted(inventory)).encode("utf-8", "surrogateescape")
    return [len(inventory), hashlib.sha256(names).hexdigest()]


def export(scan: TargetScan) -> str:
    """A helper's results as JSON (findings as rows: a fleet helper sends thousands, and
    rows are about half the work of dicts with labels, at both ends)."""
    return json.dumps({
        "findings": [[f.rule_id, int(f.severity), int(f.verdict), f.path, f.message,
                      f.evidence, f.offset] for f in scan.findings],
        "skipped": scan.skipped, "files": scan.files,
        "inventory": inventory_digest(scan.checks.inventory),
        "indexes": scan.checks.indexes,
        "python": {k: v.decode("latin-1") for k, v in scan.checks.python.items()},
        "auto_map": scan.ctx.auto_map,
        "owned": list(scan.share.owned) if scan.share is not None else [],
    })


def merge(scan: TargetScan, payload: str) -> None:
    """Fold a helper's JSON results into share 0's scan. Raises ``ValueError`` (or
    ``KeyError``/``TypeError``) for a payload that is not a helper's export."""
    data = json.loads(payload)
    findings = [finding_from(d) for d in data["findings"]]
    inventory = data["inventory"]
    scan.findings.extend(findings)
    scan.skipped.extend((p, r) for p, r in data["skipped"])
    scan.files += data["files"]
    scan.checks.indexes.update(data["indexes"])
    scan.checks.python.update({k: v.encode("latin-1") for k, v in data["python"].items()})
    scan.ctx.auto_map.extend((p, r) for p, r in data["auto_map"])
    owned = data["owned"]
    if not all(type(rel) is str for rel in owned):
        raise TypeError("owned must list relative paths")
    if scan.share is not None:
        scan.share.owned.update(owned)
    if type(inventory) is not list or inventory != inventory_digest(scan.checks.inventory):
        scan.findings.append(CHANGED.finding(
            ".", "processes walking the folder saw different entries",
            f"{inventory[0] if type(inventory) is list and inventory else '?'} vs "
            f"{len(scan.checks.inventory)} entries"))


def judged_by_none(scan: TargetScan) -> list[Finding]:
    """``fs.changed_during_scan`` for each regular file of share 0's inventory that no
    process took (after every helper's results were merged into ``scan``). Each process
    decides ownership from the size it saw: a file whose size changed between two
    processes' looks can fall in another group for each, and each leave it to the other;
    such a file was never judged, so the target is not clean. (A process that stopped
    early, at a limit, also leaves files unjudged; its limit finding says why.)"""
    owned = scan.share.owned if scan.share is not None else set()
    return [CHANGED.finding(rel, "no process of the parallel scan analysed this file (its "
                            "size changed between two processes' looks, or a process stopped "
                            "early)", "owner undecided")
            for rel, mode in scan.checks.inventory.items()
            if stat.S_ISREG(mode) and rel not in owned]


def _helper(scan: TargetScan, st: os.stat_result, share: Share, out: int) -> None:
    """Body of a forked helper: scan ``share`` and write the JSON to ``out``; never
    returns (``os._exit``: no atexit handlers, no flush of the parent's buffers)."""
    code = 70
    try:
        mine = TargetScan(scan.target, scan.root, scan.ctx.limits, None, folder=True,
                           share=share)
        mine.ctx.deadline = scan.ctx.deadline
        mine.folder(st)
        data = export(mine).encode()
        code = 0
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails closed
        data = json.dumps({"crash": f"{type(exc).__name__}: {exc}"[:500]}).encode()
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(out, view):]
    finally:
        os._exit(code)


def _collect(pid: int, fd: int, deadline: float) -> tuple[bytes, str | None]:
    """Read helper ``pid``'s pipe to EOF and reap it: (payload, problem or None). A helper
    still running at ``deadline`` (monotonic) is killed."""
    chunks: list[bytes] = []
    problem = None
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                problem = "timeout"
                break
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
        _, status = os.waitpid(pid, 0)
    if problem is None and status:
        code = os.waitstatus_to_exitcode(status)
        problem = (f"killed by signal {-code}" if code < 0 else f"exit status {code}")
    return b"".join(chunks), problem


def _fold(scan: TargetScan, index: int, of: int, payload: bytes, problem: str | None) -> bool:
    """Merge helper ``index``'s results (``True``), or record why its share is not judged
    (``False``)."""
    where = f"helper process {index} of {of - 1}"
    if problem == "timeout":
        scan.findings.append(LimitHit("seconds_per_target", scan.ctx.limits.seconds_per_target)
                             .finding("."))
        scan.skipped.append((".", f"{where} timed out: its share of files was not judged"))
        return False
    if problem is None:
        try:
            merge(scan, payload.decode())
            return True
        except (ValueError, KeyError, TypeError) as exc:
            problem = f"sent an invalid result ({type(exc).__name__})"
    try:
        crash = str(json.loads(payload)["crash"])
    except (ValueError, KeyError, TypeError):
        crash = ""
    scan.findings.append(INTERNAL_ERROR.finding(
        ".", f"a parallel scan process failed ({problem}); its share of files was not judged",
        f"{where}: {problem}" + (f": {crash}" if crash else "")))
    scan.skipped.append((".", f"{where} failed: its share of files was not judged"))
    return False


def folder_parallel(scan: TargetScan, st: os.stat_result, jobs: int) -> None:
    """Scan ``scan``'s folder with ``jobs`` processes (share 0 in this process)."""
    with gc_paused():  # imports make no garbage cycles; collections over them only cost time
        load_all_rules()  # import every analyzer (jinja2 too) once, before forking
        for module in PRELOAD:  # and what analyzers import on first use (else per process)
            try:
                importlib.import_module(module)
            except ImportError:
                pass  # the analyzer reports its own failure when it runs
        gc.freeze()  # before collecting again: see the module docstring
    try:
        _fork_and_scan(scan, st, jobs)
    finally:
        gc.unfreeze()


def _fork_and_scan(scan: TargetScan, st: os.stat_result, jobs: int) -> None:
    """Fork the helpers, scan share 0 here, then collect and merge every helper's share."""
    helpers: list[tuple[int, int, int]] = []  # (share, pid, read end of its pipe)
    try:
        claims: Claims | None = Claims()
    except OSError:  # no file to lock: fixed shares (shard_of) instead
        claims = None
    try:
        for index in range(1, jobs):
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child leaves through os._exit
                os.close(read)
                for _, _, other in helpers:
                    os.close(other)
                _helper(scan, st, Share(index, jobs, claims), write)
            os.close(write)
            helpers.append((index, pid, read))
        scan.share = Share(0, jobs, claims)
        scan.folder(st)
        deadline = scan.ctx.deadline + GRACE_S
        merged = True
        while helpers:
            index, pid, read = helpers[0]
            del helpers[0]  # _collect closes the pipe and reaps the helper, come what may
            payload, problem = _collect(pid, read, deadline)
            merged = _fold(scan, index, jobs, payload, problem) and merged
        if merged:  # (a failed helper's whole share is already reported as not judged)
            scan.findings.extend(judged_by_none(scan))
    finally:
        if claims is not None:
            claims.close()
        for _, pid, read in helpers:  # only after an exception: stop and reap the rest
            try:
                os.close(read)
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
