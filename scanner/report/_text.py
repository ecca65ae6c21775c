"""Human-readable report: one block per target, worst findings first, with the fix.

Every path, message and evidence string is printed with control and format characters
escaped (``\\n``, ``\\x1b``, ``\\u202e``), so a hostile file name cannot forge report lines
or terminal escapes.
"""

from __future__ import annotations

from scanner.api import ScanReport, TargetResult
from scanner.core.model import Verdict
from scanner.core.rules import RULES


def safe(text: str) -> str:
    """``text`` with every non-printable character written as a Python escape."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def _verdict(result: TargetResult) -> str:
    return result.verdict.label.upper() if result.verdict is not None else "NO VERDICT"


def target_lines(result: TargetResult) -> list[str]:
    """Lines for one target."""
    head = f"{safe(result.target)}: {_verdict(result)}"
    if result.verdict is None:
        return [f"{head} ({safe(result.error or 'unknown error')})"]
    lines = [f"{head} ({result.files_scanned} files, {len(result.findings)} findings)"]
    for finding in sorted(result.findings, key=lambda f: (-f.verdict, -f.severity, f.path)):
        lines.append(f"  {finding.verdict.label:<9} {finding.severity.label:<8} "
                     f"{finding.rule_id}  {safe(finding.path)}")
        lines.append(f"      {safe(finding.message)}")
        if finding.evidence:
            lines.append(f"      evidence: {safe(finding.evidence)}")
        known = RULES.get(finding.rule_id)
        if known is not None:
            lines.append(f"      fix: {known.fix}")
    for path, reason in result.skipped:
        lines.append(f"  not analysed: {safe(path)} ({safe(reason)})")
    return lines


def summary_line(report: ScanReport) -> str:
    """One line: overall verdict and per-verdict target counts."""
    counts: dict[str, int] = {}
    for result in report.targets:
        key = result.verdict.label if result.verdict is not None else "no verdict"
        counts[key] = counts.get(key, 0) + 1
    order = [v.label for v in sorted(Verdict, reverse=True)] + ["no verdict"]
    parts = [f"{counts[k]} {k}" for k in order if k in counts]
    overall = report.verdict.label.upper() if report.verdict is not None else "NO VERDICT"
    files = sum(t.files_scanned for t in report.targets)
    return (f"{overall}: {len(report.targets)} target(s), {files} file(s) scanned"
            + (f" ({', '.join(parts)})" if parts else ""))


def render_text(report: ScanReport) -> str:
    """The whole report as text (ends with the summary line)."""
    lines: list[str] = []
    for result in report.targets:
        lines.extend(target_lines(result))
        lines.append("")
    lines.append(summary_line(report))
    return "\n".join(lines) + "\n"
