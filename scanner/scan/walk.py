"""Scanning one target: the walk over a folder (or one file), each regular file opened
safely, sniffed and analysed (through the per-file memo), the folder rules fed, and the
result assembled. ``scanner.api.scan_target`` drives it; ``scanner.scan.parallel`` runs
shares of it in worker processes.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING

from scanner.core.context import LimitHit, Limits, ScanContext
from scanner.core.fs import (
    CHANGED,
    Entry,
    FsProblem,
    Walk,
    file_findings,
    kind_name,
    link_finding,
    open_blob,
    open_listed,
    os_error_finding,
    special_finding,
)
from scanner.core.model import Blob, FileBlob, Finding, Verdict, worst
from scanner.core.spec import Format
from scanner.scan.folder import FolderChecks
from scanner.scan.hfcache import blob_target
from scanner.scan.memo import analyze_file, analyze_linked
from scanner.scan.sniff import sniff

if TYPE_CHECKING:
    from scanner.scan.shares import Share


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


# Report order: by path, worst verdict first, then rule id and evidence. Stable sorts from
# the last key to the first, each on one attribute (C speed), give the order of the tuple
# key (path, -verdict, rule_id, evidence): a fleet's report sorts thousands of findings.
_ORDER = ((attrgetter("evidence"), False), (attrgetter("rule_id"), False),
          (attrgetter("verdict"), True), (attrgetter("path"), False))


def _ordered(findings: Iterable[Finding]) -> list[Finding]:
    out = list(findings)
    for key, reverse in _ORDER:
        out.sort(key=key, reverse=reverse)
    return out


def _sniff_quietly(blob: Blob) -> Format | None:
    try:
        return sniff(blob)
    except Exception:  # noqa: BLE001 - the dispatcher reports the same failure as a finding
        return None


class TargetScan:
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
        # Parallel scans (scanner.scan.parallel): analyse only the regular files this share
        # owns; walk-level findings only for share 0. None: a sequential scan.
        self.share = share
        # A share's way to learn a listed file's size (its group): open it first (one
        # system call fewer when it is this share's: the open's fstat serves) while the
        # last file was its own, else lstat it first (no open of another share's file).
        self.open_first = True

    @property
    def lead(self) -> bool:
        """Whether this scan reports walk-level findings (not a parallel helper)."""
        return self.share is None or self.share.index == 0

    def file(self, dir_fd: int | None, name: str, rel: str, st: os.stat_result) -> None:
        """Analyse one regular file (lstat result ``st``), opening it safely."""
        self.ctx.check_deadline()
        self.seen += 1
        if self.share is not None and (self.share.cedes(name)
                                       or not self.share.mine(rel, name, st.st_size)):
            return  # another process's file (scanner.scan.parallel)
        self.open_and_analyse(dir_fd, name, rel, st)

    def open_and_analyse(self, dir_fd: int | None, name: str, rel: str,
                         st: os.stat_result) -> None:
        """Open ``name`` (checked against ``st``) and analyse it under ``rel``."""
        self.findings.extend(file_findings(rel, st))
        if self.progress is not None:
            self.progress(ScanProgress(self.target, rel, st.st_size, self.seen))
        try:
            opened = open_blob(dir_fd, name, rel, st)
        except FsProblem as problem:
            self.findings.append(problem.finding)
            self.skipped.append((rel, problem.finding.message))
            return
        self.analyse_open(opened, rel, st)

    def listed_file(self, entry: Entry) -> None:
        """Open and analyse a regular file as the directory listing named it (``entry.st``
        None: ``scanner.core.fs.open_listed``); its ``fstat`` stands in for the ``lstat``
        (folder inventory, hard links, sparse files). Sequential scans only."""
        self.ctx.check_deadline()
        self.seen += 1
        rel = entry.rel
        try:
            opened, st = open_listed(entry.dir_fd, entry.name, rel, entry.listed)
        except FsProblem as problem:
            self.checks.inventory[rel] = stat.S_IFREG  # the listing's type, as an lstat's
            self.findings.append(problem.finding)
            self.skipped.append((rel, problem.finding.message))
            return
        self._record_and_analyse(opened, rel, st)

    def listed_share_file(self, entry: Entry, share: Share) -> None:
        """A parallel share's regular file as the listing named it: its size (the group)
        from the open's ``fstat`` or from an ``lstat`` (``open_first``), then analysed as
        :meth:`listed_file` does when ``share`` owns it; another share's file is only
        recorded in the inventory. A file whose name the share cedes (``Share.cedes``) is
        recorded with the listing's type and neither opened nor ``lstat``-ed. Problems are
        reported by the owner, or by the lead when no size could be learnt (as a walk's
        ``lstat`` failure)."""
        self.ctx.check_deadline()
        self.seen += 1
        rel, name, dir_fd = entry.rel, entry.name, entry.dir_fd
        if share.ceded is not None and share.cedes(name):  # another's, by its name alone
            self.checks.inventory[rel] = stat.S_IFREG  # the listing's type
            return
        if self.open_first:
            try:
                opened, st = open_listed(dir_fd, name, rel, entry.listed)
            except FsProblem as problem:
                self._share_problem(entry, share, problem)
                return
            if not share.mine(rel, name, st.st_size):
                os.close(opened.fd)
                self.checks.inventory[rel] = st.st_mode
                self.open_first = False
                return
        else:
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError as exc:
                self.checks.inventory[rel] = stat.S_IFREG  # the listing's type
                if self.lead:
                    self.findings.append(os_error_finding(rel, exc, "lstat"))
                return
            self.checks.inventory[rel] = st.st_mode
            if not stat.S_ISREG(st.st_mode):
                if self.lead:
                    self.findings.append(CHANGED.finding(
                        rel, "file was replaced between the directory listing and lstat",
                        f"listed regular file ino={entry.listed[1]}, now "
                        f"{kind_name(st.st_mode)}"))
                return
            if not share.mine(rel, name, st.st_size):
                return
            try:
                opened = open_blob(dir_fd, name, rel, st)
            except FsProblem as problem:
                self.findings.append(problem.finding)
                self.skipped.append((rel, problem.finding.message))
                return
        self.open_first = True
        self._record_and_analyse(opened, rel, st)

    def _share_problem(self, entry: Entry, share: Share, problem: FsProblem) -> None:
        """A listed file a share could not open: reported by its owner (the ``lstat``
        size names it), or by the lead when it cannot be ``lstat``-ed either."""
        rel = entry.rel
        self.checks.inventory[rel] = stat.S_IFREG  # the listing's type, as an lstat's
        try:
            st = os.stat(entry.name, dir_fd=entry.dir_fd, follow_symlinks=False)
        except OSError:
            owner = self.lead
        else:
            self.checks.inventory[rel] = st.st_mode
            owner = share.mine(rel, entry.name, st.st_size) if stat.S_ISREG(st.st_mode) \
                else self.lead
        if owner:
            share.owned.add(rel)
            self.findings.append(problem.finding)
            self.skipped.append((rel, problem.finding.message))

    def _record_and_analyse(self, opened: FileBlob, rel: str, st: os.stat_result) -> None:
        """A listed file opened as ``opened`` (``st``: its ``fstat`` or ``lstat``): into the
        inventory, its ``lstat``-only findings and the progress hook, then analysed."""
        try:
            self.findings.extend(self.checks.entry(rel, st))
            self.findings.extend(file_findings(rel, st))
            if self.progress is not None:
                self.progress(ScanProgress(self.target, rel, st.st_size, self.seen))
        except BaseException:
            os.close(opened.fd)
            raise
        self.analyse_open(opened, rel, st)

    def analyse_open(self, opened: FileBlob, rel: str, st: os.stat_result) -> None:
        """Analyse the opened file ``opened`` (``st``: its lstat, or fstat) under ``rel``;
        closes its descriptor."""
        self.files += 1
        fd = opened.fd
        try:
            if st.st_nlink > 1 and opened.size == st.st_size:
                fmt, found, blob = analyze_linked(
                    self.ctx, opened, _sniff_quietly,
                    (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
            else:
                fmt, found, blob = analyze_file(self.ctx, opened, _sniff_quietly)
            self.findings.extend(found)
            try:
                self.findings.extend(self.checks.file(rel, fmt, blob))
            except LimitHit as hit:
                self.findings.append(hit.finding(rel))
        finally:
            os.close(fd)

    def folder(self, st: os.stat_result) -> None:
        # Regular files as the listing names them (no lstat: open_listed); a parallel share
        # learns a file's size (its group) as listed_share_file says.
        share = self.share
        walk = Walk(self.root, self.ctx.limits, st,
                    reverse=share is not None and share.reverse, lstat_files=False)
        lead = self.lead
        try:
            for entry in walk:
                if entry.st is None:
                    if share is None:
                        self.listed_file(entry)
                    else:
                        self.listed_share_file(entry, share)
                    continue
                found = self.checks.entry(entry.rel, entry.st)
                if found and lead:
                    self.findings.extend(found)
                if entry.is_dir:
                    continue
                if entry.is_file:
                    self.file(entry.dir_fd, entry.name, entry.rel, entry.st)
                elif not lead:
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
        findings = _ordered(dict.fromkeys(self.findings))
        verdict: Verdict | None = worst(findings)
        error = None
        if not findings and self.seen == 0 and self.files == 0:
            verdict, error = None, "nothing to scan: no regular files in the target"
        return TargetResult(self.target, verdict, findings, self.files, self.skipped, kind,
                            self.root, error, time.monotonic() - started)
