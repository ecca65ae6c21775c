"""Scan context: limits, deadline and nested dispatch shared by every analyzer.

Nested dispatch (``ScanContext.analyze``: a container's member) goes through the
dispatcher that ``scanner.scan.dispatch`` registers when it is imported (``set_dispatcher``):
core sits below the scan layer and never imports it. ``ScanContext.analyze_content`` (a
blob whose format is its content, whatever its name or place says: an OCI layout blob)
goes through the same registration. Without one (only a program that
imports format modules but never the scan layer) a nested blob is an internal-error
finding, never a pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from scanner.core.model import Blob, Finding
from scanner.core.rules import INTERNAL_ERROR, LIMIT_EXCEEDED
from scanner.core.spec import UNKNOWN, Format
from scanner.core.spec import Analyzer as Analyzer  # re-exported

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class Limits:
    """Resource bounds. Hitting any of them is a ``scanner.limit_exceeded`` finding
    (verdict ``malformed``), never a pass."""

    max_safetensors_header: int = 100 * MiB  # the format's reference cap
    max_json_bytes: int = 64 * MiB  # config / tokenizer / index JSON read into memory
    max_pickle_bytes: int = 1 * GiB  # one pickle stream analysed
    max_pickle_ops: int = 50_000_000
    max_archive_members: int = 10_000
    max_member_bytes: int = 1 * GiB  # one decompressed container member held in memory
    max_total_decompressed: int = 4 * GiB  # all members of one top-level target
    max_nesting_depth: int = 4  # containers/pickles inside containers
    max_files: int = 100_000  # regular files in one folder target
    seconds_per_target: float = 60.0
    deep: bool = False  # read tensor data (safetensors) and storage members


class LimitHit(Exception):
    """Raised by analyzers when a limit is hit; the dispatcher turns it into a finding."""

    def __init__(self, what: str, limit: int | float, actual: int | float | None = None) -> None:
        self.what = what
        self.limit = limit
        self.actual = actual
        detail = f"{what}: limit {limit}" + (f", got {actual}" if actual is not None else "")
        super().__init__(detail)

    def finding(self, path: str) -> Finding:
        return LIMIT_EXCEEDED.finding(path, f"scan limit hit ({self})", evidence=self.what)


_DISPATCHER: list[Analyzer] = []  # [scanner.scan.dispatch.analyze_blob] once imported
# (ctx, blob) -> (format sniffed by content alone, its analyzer's findings)
ContentAnalyzer = Callable[["ScanContext", Blob], tuple[Format, list[Finding]]]
_BY_CONTENT: list[ContentAnalyzer] = []


def set_dispatcher(dispatch: Analyzer, by_content: ContentAnalyzer | None = None) -> None:
    """Register the function ``ScanContext.analyze`` runs on nested blobs (sniff, then the
    format's analyzer) and the one ``ScanContext.analyze_content`` runs (sniff skipping
    the probes that read a blob's name, then the analyzer). ``scanner.scan.dispatch``
    calls this at import."""
    _DISPATCHER[:] = [dispatch]
    _BY_CONTENT[:] = [] if by_content is None else [by_content]


@dataclass
class ScanContext:
    """Per-target state. ``analyze`` sniffs a (nested) blob and runs its analyzer;
    container analyzers call it for each member, with ``depth`` bounded."""

    limits: Limits = field(default_factory=Limits)
    depth: int = 0
    deadline: float = 0.0
    decompressed: int = 0  # bytes of container members materialised so far
    # (finding path of the JSON file, class reference) for every auto_map string seen
    auto_map: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.deadline:
            self.deadline = time.monotonic() + self.limits.seconds_per_target

    def check_deadline(self) -> None:
        if time.monotonic() > self.deadline:
            raise LimitHit("seconds_per_target", self.limits.seconds_per_target)

    def charge_decompressed(self, n: int) -> None:
        """Account ``n`` bytes of decompressed member data against the target's budget."""
        if n > self.limits.max_member_bytes:
            raise LimitHit("max_member_bytes", self.limits.max_member_bytes, n)
        self.decompressed += n
        if self.decompressed > self.limits.max_total_decompressed:
            raise LimitHit(
                "max_total_decompressed", self.limits.max_total_decompressed, self.decompressed
            )

    def analyze(self, blob: Blob) -> list[Finding]:
        """Sniff ``blob`` and run the matching analyzer one nesting level down.

        Errors and limit hits inside become findings (fail closed)."""
        if not _DISPATCHER:
            return [INTERNAL_ERROR.finding(blob.name, "no dispatcher registered for nested "
                                           "content", "import scanner.scan.dispatch")]
        if self.depth + 1 > self.limits.max_nesting_depth:
            return [LimitHit("max_nesting_depth", self.limits.max_nesting_depth).finding(blob.name)]
        self.depth += 1
        try:
            return _DISPATCHER[0](self, blob)
        finally:
            self.depth -= 1

    def analyze_content(self, blob: Blob) -> tuple[Format, list[Finding]]:
        """``blob``'s format sniffed from its content alone (``Probe(by_name=True)`` tests,
        which recognise a file by its place in a layout, skipped) and that format's
        findings, at this nesting level: for a format whose file *is* another format's
        content (an OCI ``blobs/sha256/<digest>`` file). Without a registered dispatcher:
        ``UNKNOWN`` and an internal-error finding, never a pass."""
        if not _BY_CONTENT:
            return UNKNOWN, [INTERNAL_ERROR.finding(
                blob.name, "no dispatcher registered for content analysis",
                "import scanner.scan.dispatch")]
        return _BY_CONTENT[0](self, blob)
