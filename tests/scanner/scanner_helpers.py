"""Helpers the scanner's tests share, imported by name (``from scanner_helpers import rules,
scan``; ``tests/scanner/conftest.py`` puts this folder on ``sys.path``). A test file keeps its
own helper only where it scans differently (another analyzer, a guarded blob, checks on
every finding)."""

from __future__ import annotations

from collections.abc import Iterable

from scanner.core.context import Limits, ScanContext
from scanner.core.model import BytesBlob, Finding
from scanner.scan.dispatch import analyze_blob


def scan(name: str, data: bytes, **limits: int) -> list[Finding]:
    """The findings for one in-memory file ``name`` holding ``data``, through the dispatcher
    (format sniffed from name and content, nested members scanned), under
    ``Limits(**limits)`` (the defaults where none are given)."""
    return analyze_blob(ScanContext(Limits(**limits)), BytesBlob(name, data))


def rules(findings: Iterable[Finding]) -> set[str]:
    """The rule ids among ``findings``."""
    return {f.rule_id for f in findings}
