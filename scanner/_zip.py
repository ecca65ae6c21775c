"""STUB: replaced by the owning helper."""

from __future__ import annotations

from scanner._context import ScanContext
from scanner._model import Blob, Finding


def analyze_zip(ctx: ScanContext, blob: Blob) -> list[Finding]:
    raise NotImplementedError("analyze_zip")


def analyze_tar(ctx: ScanContext, blob: Blob) -> list[Finding]:
    raise NotImplementedError("analyze_tar")


def analyze_7z(ctx: ScanContext, blob: Blob) -> list[Finding]:
    raise NotImplementedError("analyze_7z")
