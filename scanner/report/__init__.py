"""Report writers for a ``scanner.api.ScanReport``: text, JSON and SARIF 2.1.0.

``render(report, "json")`` returns the document as text, ``write_json`` hands the same
bytes to a writer in pieces; the ``to_*`` functions return plain data for callers that
embed it (the appliance loader logs the JSON form).
"""

from __future__ import annotations

from scanner.api import ScanReport
from scanner.report._json import (
    SCHEMA_VERSION,
    TOOL_NAME,
    render_json,
    to_json_dict,
    write_json,
)
from scanner.report._sarif import SARIF_VERSION, render_sarif, to_sarif
from scanner.report._text import render_text, summary_line

__all__ = ["FORMATS", "SARIF_VERSION", "SCHEMA_VERSION", "TOOL_NAME", "render",
           "render_json", "render_sarif", "render_text", "summary_line", "to_json_dict",
           "to_sarif", "write_json"]

FORMATS = ("text", "json", "sarif")


def render(report: ScanReport, fmt: str) -> str:
    """``report`` in format ``fmt`` (one of ``FORMATS``); raises ``ValueError`` otherwise."""
    if fmt == "text":
        return render_text(report)
    if fmt == "json":
        return render_json(report)
    if fmt == "sarif":
        return render_sarif(report)
    raise ValueError(f"unknown report format {fmt!r}; expected one of {', '.join(FORMATS)}")
