"""STUB: replaced by the owning helper."""

from __future__ import annotations

from scanner._context import ScanContext
from scanner._model import Blob, Finding


def analyze_hdf5(ctx: ScanContext, blob: Blob) -> list[Finding]:
    raise NotImplementedError("analyze_hdf5")
