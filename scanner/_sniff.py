"""STUB: replaced by the owning helper."""

from __future__ import annotations

from scanner._formats import Format
from scanner._model import Blob


def sniff(blob: Blob) -> Format:
    raise NotImplementedError("sniff")
