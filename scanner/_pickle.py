"""STUB: replaced by the owning helper."""

from __future__ import annotations

from scanner._context import ScanContext
from scanner._model import Blob, Finding


def analyze_pickle(ctx: ScanContext, blob: Blob) -> list[Finding]:
    raise NotImplementedError("analyze_pickle")


def analyze_torch_legacy(ctx: ScanContext, blob: Blob) -> list[Finding]:
    raise NotImplementedError("analyze_torch_legacy")
