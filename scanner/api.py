"""Public scanning API: ``scan_paths`` is the one code path both the CLI and the appliance
loader run before anything is deployed or served.

A target is a file or a folder. Each target gets one verdict, the worst of its findings
(``clean`` < ``policy`` < ``malformed`` < ``malicious``), or no verdict (``None``) when it
does not exist, holds nothing to scan, or the scan itself crashed. Only ``clean`` may be
deployed; ``None`` must be treated as a refusal.

Finding paths are POSIX and relative to the target's root: the folder itself, or, for a
single-file target, the directory holding it (so the path is the file's name).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from scanner import __version__
from scanner._context import LimitHit, Limits, ScanContext
from scanner._folder import FolderChecks
from scanner._formats import Format
from scanner._fs import (
    TARGET_SYMLINK,
    FsProblem,
    Walk,
    blob_for,
    file_findings,
    link_finding,
    open_regular,
    special_finding,
)
from scanner._hfcache import blob_target
from scanner._memo import analyze_file
from scanner._model import Blob, Finding, Verdict, worst
from scanner._parallel import MAX_JOBS, MIN_FILES, Share, count_files, folder_parallel
from scanner._rules import INTERNAL_ERROR
from scanner._sniff import sniff

__all__ = ["Limits", "ProgressHook", "ScanProgress", "ScanReport", "TargetResult",
           "scan_paths", "scan_target"]


DEFAULT_LIMITS = Limits()  # frozen: safe to share as a default


@dataclass(frozen=True)
class ScanProgress:
    """Passed to the progress hook before each regular file is analysed."""

    target: str  # the target as given
    path: str  # file path relative to the target root
    size: int  # bytes (st_size)
    index: int  # 1-based number of this file within the target


ProgressHook = Callable[[ScanProgress], None]


@dataclass(frozen=True)
class TargetResult:
    """Outcome for one target. ``verdict`` None means no verdict (see ``error``)."""

    target: str
    verdict: Verdict | None
    findings: list[Finding] = field(default_factory=list)
    files_scanned: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    kind: str = "missing"  # "folder" | "file" | "other" | "missing"
    root: str = ""  # absolute directory that finding paths are relative to
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True only for a clean verdict: the one outcome that may be deployed."""
        return self.verdict is Verdict.CLEAN


@dataclass(frozen=True)
class ScanReport:
    """All targets of one scan, in the order given."""

    targets: list[TargetResult]
    tool_version: str = __version__

    @property
    def verdict(self) -> Verdict | None:
        """Worst verdict over all targets; None if any target (or the scan) has none."""
        if not self.targets or any(t.verdict is None for t in self.targets):
            return None
        return max(t.verdict for t in self.targets if t.verdict is not None)

    @property
    def ok(self) -> bool:
        """True when there is at least one target and every target is clean."""
        return bool(self.targets) and all(t.ok for t in self.targets)

    @property
    def exit_code(self) -> int:
        """0 every target clean; 1 some target not clean; 2 some target has no verdict."""
        verdict = self.verdict
        if verdict is None:
            return 2
        return 0 if verdict is Verdict.CLEAN else 1


def _sniff_quietly(blob: Blob) -> Format | None:
    try:
        return sniff(blob)
    except Exception:  # noqa: BLE001 - the dispatcher reports the same failure as a finding
        return None


class _TargetScan:
    """State for scanning one target (shared by the folder and single-file paths)."""

    def __init__(self, target: str, root: str, limits: Limits,
                 progress: ProgressHook | None, *, folder: bool,
                 share: Share | None = None) -> None:
        self.target = target
        self.root = root
        self.ctx = ScanContext(limits=limits)
        self.checks = FolderChecks(self.ctx, folder=folder)
        self.progress = progress
        self.findings: list[Finding] = []
        self.skipped: list[tuple[str, str]] = []
        self.files = 0  # regular files opened and analysed
        self.seen = 0  # regular files met (progress index)
        # Parallel scans (scanner._parallel): analyse only the regular files this share
        # owns; walk-level findings only for share 0. None: a sequential scan.
        self.share = share

    @property
    def lead(self) -> bool:
        """Whether this scan reports walk-level findings (not a parallel helper)."""
        return self.share is None or self.share.index == 0

    def file(self, dir_fd: int | None, name: str, rel: str, st: os.stat_result) -> None:
        """Analyse one regular file (lstat result ``st``), opening it safely."""
        self.ctx.check_deadline()
        self.seen += 1
        if self.share is not None and not self.share.mine(name, st.st_size):
            return  # another process's file (scanner._parallel)
        self.open_and_analyse(dir_fd, name, rel, st)

    def open_and_analyse(self, dir_fd: int | None, name: str, rel: str,
                         st: os.stat_result) -> None:
        """Open ``name`` (checked against ``st``) and analyse it under ``rel``."""
        self.findings.extend(file_findings(rel, st))
        if self.progress is not None:
            self.progress(ScanProgress(self.target, rel, st.st_size, self.seen))
        try:
            fd = open_regular(dir_fd, name, rel, st)
        except FsProblem as problem:
            self.findings.append(problem.finding)
            self.skipped.append((rel, problem.finding.message))
            return
        self.files += 1
        try:
            opened = blob_for(fd, rel)
            inode = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) \
                if st.st_nlink > 1 and opened.size == st.st_size else None
            fmt, found, blob = analyze_file(self.ctx, opened, _sniff_quietly, inode)
            self.findings.extend(found)
            try:
                self.findings.extend(self.checks.file(rel, fmt, blob))
            except LimitHit as hit:
                self.findings.append(hit.finding(rel))
        finally:
            os.close(fd)

    def folder(self, st: os.stat_result) -> None:
        walk = Walk(self.root, self.ctx.limits, st,
                    reverse=self.share is not None and self.share.reverse)
        try:
            for entry in walk:
                found = self.checks.entry(entry.rel, entry.st)
                if self.lead:
                    self.findings.extend(found)
                if entry.is_dir:
                    continue
                if entry.is_file:
                    self.file(entry.dir_fd, entry.name, entry.rel, entry.st)
                elif not self.lead:
                    continue
                elif entry.is_symlink:
                    blob = blob_target(self.root, entry.rel, entry.dir_fd, entry.name)
                    if blob is not None:  # HF cache layout: judged as the blob
                        self.open_and_analyse(None, blob[0], entry.rel, blob[1])
                        continue
                    self.findings.append(link_finding(self.root, entry.rel, entry.dir_fd,
                                                      entry.name))
                    self.skipped.append((entry.rel, "symbolic link (never followed)"))
                else:
                    finding = special_finding(entry.rel, entry.st)
                    self.findings.append(finding)
                    self.skipped.append((entry.rel, f"{finding.evidence} (never opened)"))
        except LimitHit as hit:
            self.findings.append(hit.finding("."))
            self.skipped.append((".", f"scan stopped early: {hit}"))
        if self.lead:
            self.findings.extend(walk.findings)
            self.skipped.extend(walk.skipped)

    def result(self, kind: str, started: float) -> TargetResult:
        try:
            self.findings.extend(self.checks.finish())
        except LimitHit as hit:
            self.findings.append(hit.finding("."))
        findings = sorted(dict.fromkeys(self.findings),
                          key=lambda f: (f.path, -f.verdict, f.rule_id, f.evidence))
        verdict: Verdict | None = worst(findings)
        error = None
        if not findings and self.seen == 0 and self.files == 0:
            verdict, error = None, "nothing to scan: no regular files in the target"
        return TargetResult(self.target, verdict, findings, self.files, self.skipped, kind,
                            self.root, error, time.monotonic() - started)


def scan_target(path: str | os.PathLike[str], limits: Limits = DEFAULT_LIMITS,
                progress: ProgressHook | None = None, jobs: int = 1) -> TargetResult:
    """Scan one file or folder; never raises for bad input.

    ``jobs`` > 1 scans a folder of at least ``scanner._parallel.MIN_FILES`` regular files
    with that many forked processes (only without a ``progress`` hook, and only from a
    single-threaded caller such as the CLI).

    Missing targets and crashes of the scan itself give ``verdict=None`` with ``error``
    set; every other problem (unreadable, special file, limits, analyzer crash) is a
    finding, so the verdict fails closed.
    """
    target = os.fspath(path)
    started = time.monotonic()
    absolute = os.path.abspath(target)
    try:
        st = os.lstat(absolute)  # normalised: a trailing '/' would follow a link
    except (FileNotFoundError, NotADirectoryError):
        return TargetResult(target, None, error="no such file or directory",
                            root=absolute, seconds=time.monotonic() - started)
    except OSError as exc:
        return TargetResult(target, None, error=f"cannot stat target: {exc.strerror or exc}",
                            root=absolute, seconds=time.monotonic() - started)
    try:
        if stat.S_ISDIR(st.st_mode):
            scan = _TargetScan(target, absolute, limits, progress, folder=True)
            if jobs > 1 and progress is None and count_files(absolute, MIN_FILES) >= MIN_FILES:
                folder_parallel(scan, st, min(jobs, MAX_JOBS))
            else:
                scan.folder(st)
            return scan.result("folder", started)
        root, name = os.path.split(absolute)
        scan = _TargetScan(target, root, limits, progress, folder=False)
        if stat.S_ISLNK(st.st_mode):
            scan.findings.append(TARGET_SYMLINK.finding(
                name, "scan target is a symbolic link; it is not followed",
                f"-> {os.readlink(absolute)}"))
            scan.skipped.append((name, "symbolic link (never followed)"))
        elif stat.S_ISREG(st.st_mode):
            scan.file(None, absolute, name, st)
        else:
            scan.findings.append(special_finding(name, st))
            scan.skipped.append((name, "not a regular file (never opened)"))
        return scan.result("file" if stat.S_ISREG(st.st_mode) else "other", started)
    except LimitHit as hit:
        return TargetResult(target, worst([hit.finding(".")]), [hit.finding(".")], 0, [],
                            "other", absolute, None, time.monotonic() - started)
    except Exception as exc:  # noqa: BLE001 - a crash of the scan itself: no verdict
        crash = INTERNAL_ERROR.finding(".", "the scan itself crashed",
                                       f"{type(exc).__name__}: {exc}"[:500])
        return TargetResult(target, None, [crash], 0, [], "other", absolute,
                            f"internal error: {type(exc).__name__}: {exc}"[:500],
                            time.monotonic() - started)


def scan_paths(paths: Sequence[str | Path], limits: Limits = DEFAULT_LIMITS,
               progress: ProgressHook | None = None, jobs: int = 1) -> ScanReport:
    """Scan each path (file or folder) as its own target, in order. A path given again
    (``bad``, ``bad/`` and ``./bad`` are the same path) is scanned once, at its first place.

    ``progress`` (optional) is called with a ``ScanProgress`` before each regular file is
    analysed; it must not raise. ``jobs``: see ``scan_target``. Returns a ``ScanReport``
    (``exit_code``/``ok`` summarise it).
    """
    unique: dict[str, str | Path] = {}
    for path in paths:
        unique.setdefault(os.path.abspath(path), path)
    return ScanReport([scan_target(p, limits, progress, jobs) for p in unique.values()])
