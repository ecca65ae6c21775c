"""STUB: replaced by the owning helper."""

from __future__ import annotations

from scanner._context import ScanContext
from scanner._model import Blob, Finding


def analyze_python(ctx: ScanContext, blob: Blob) -> list[Finding]:
    raise NotImplementedError("analyze_python")


def analyze_template(ctx: ScanContext, blob: Blob) -> list[Finding]:
    raise NotImplementedError("analyze_template")


def analyze_json(ctx: ScanContext, blob: Blob) -> list[Finding]:
    raise NotImplementedError("analyze_json")


def analyze_text(ctx: ScanContext, blob: Blob) -> list[Finding]:
    raise NotImplementedError("analyze_text")


def analyze_unknown(ctx: ScanContext, blob: Blob) -> list[Finding]:
    raise NotImplementedError("analyze_unknown")
