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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from scanner import __version__
from scanner.core.context import LimitHit, Limits
from scanner.core.fs import TARGET_SYMLINK, special_finding
from scanner.core.model import Verdict, worst
from scanner.core.rules import INTERNAL_ERROR
from scanner.scan.parallel import MAX_JOBS, MIN_FILES, count_files, folder_parallel
from scanner.scan.walk import ProgressHook, ScanProgress, TargetResult, TargetScan

__all__ = ["Limits", "ProgressHook", "ScanProgress", "ScanReport", "TargetResult",
           "scan_paths", "scan_target"]


DEFAULT_LIMITS = Limits()  # frozen: safe to share as a default


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


def scan_target(path: str | os.PathLike[str], limits: Limits = DEFAULT_LIMITS,
                progress: ProgressHook | None = None, jobs: int = 1) -> TargetResult:
    """Scan one file or folder; never raises for bad input.

    ``jobs`` > 1 scans a folder of at least ``scanner.scan.parallel.MIN_FILES`` regular files
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
            scan = TargetScan(target, absolute, limits, progress, folder=True)
            if jobs > 1 and progress is None and count_files(absolute, MIN_FILES) >= MIN_FILES:
                folder_parallel(scan, st, min(jobs, MAX_JOBS))
            else:
                scan.folder(st)
            return scan.result("folder", started)
        root, name = os.path.split(absolute)
        scan = TargetScan(target, root, limits, progress, folder=False)
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
