"""JSON report: one document per scan, ``schema_version`` 1.

Shape (keys always present)::

    {"schema_version": "1", "tool": {"name", "version"},
     "verdict": "clean|policy|malformed|malicious" | null, "exit_code": 0|1|2,
     "summary": {"targets", "files_scanned", "findings", "skipped",
                 "verdicts": {"clean": n, "policy": n, "malformed": n, "malicious": n,
                              "none": n}},
     "targets": [{"target", "kind", "verdict", "error", "files_scanned", "seconds",
                  "findings": [{"rule_id", "severity", "verdict", "path", "message",
                                "evidence", "offset"?, "title", "fix"}],
                  "skipped": [{"path", "reason"}]}]}

``verdict`` null means no verdict (missing target, nothing to scan, scan crash).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from json.encoder import encode_basestring_ascii as _string
from typing import Any

from scanner.api import ScanReport, TargetResult
from scanner.core.model import Finding, Severity, Verdict
from scanner.core.rules import RULES

SCHEMA_VERSION = "1"
TOOL_NAME = "appliance-scan"


def _label(verdict: Verdict | None) -> str | None:
    return verdict.label if verdict is not None else None


def finding_dict(finding: Finding) -> dict[str, Any]:
    """``Finding.to_dict()`` plus the rule's ``title`` and ``fix``."""
    out = finding.to_dict()
    known = RULES.get(finding.rule_id)
    out["title"] = known.title if known else ""
    out["fix"] = known.fix if known else ""
    return out


def target_dict(result: TargetResult,
                findings: Callable[[list[Finding]], Any] | None = None) -> dict[str, Any]:
    """One target's JSON object (``findings``: how to write its findings list; default
    ``finding_dict`` of each)."""
    return {
        "target": result.target,
        "kind": result.kind,
        "verdict": _label(result.verdict),
        "error": result.error,
        "files_scanned": result.files_scanned,
        "seconds": round(result.seconds, 3),
        "findings": ([finding_dict(f) for f in result.findings] if findings is None
                     else findings(result.findings)),
        "skipped": [{"path": p, "reason": r} for p, r in result.skipped],
    }


def summary_dict(report: ScanReport) -> dict[str, Any]:
    """Counts over all targets."""
    verdicts = {v.label: 0 for v in Verdict}
    verdicts["none"] = 0
    for result in report.targets:
        verdicts[_label(result.verdict) or "none"] += 1
    return {
        "targets": len(report.targets),
        "files_scanned": sum(t.files_scanned for t in report.targets),
        "findings": sum(len(t.findings) for t in report.targets),
        "skipped": sum(len(t.skipped) for t in report.targets),
        "verdicts": verdicts,
    }


def to_json_dict(report: ScanReport,
                 findings: Callable[[list[Finding]], Any] | None = None
                 ) -> dict[str, Any]:
    """The whole report as plain JSON-serialisable data (``findings``: see
    ``target_dict``)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": TOOL_NAME, "version": report.tool_version},
        "verdict": _label(report.verdict),
        "exit_code": report.exit_code,
        "summary": summary_dict(report),
        "targets": [target_dict(t, findings) for t in report.targets],
    }


_ENCODE = json.JSONEncoder(ensure_ascii=True).encode  # the C encoder (no indent)
_ONE_LINE = frozenset({"findings", "skipped"})  # lists whose items are one line each


class _Chunks:
    """The ``out`` of ``_emit`` for ``write_json``: pieces gathered and handed to ``write``
    as ASCII bytes about every ``SIZE`` characters, so no copy of the whole document is
    ever held (a fleet report is ~2 MB; building it, joining it and encoding it allocated
    three copies, ~1,750 fresh pages, ~5 ms of a fleet scan's last step)."""

    SIZE = 1 << 16

    def __init__(self, write: Callable[[bytes], object]) -> None:
        self.write = write
        self.pieces: list[str] = []
        self.size = 0

    def append(self, piece: str) -> None:
        self.pieces.append(piece)
        self.size += len(piece)
        if self.size >= self.SIZE:
            self.flush()

    def flush(self) -> None:
        if self.pieces:
            self.write("".join(self.pieces).encode("ascii"))
            self.pieces.clear()
            self.size = 0


def _indented(value: Any, pad: str, one_line_items: bool = False) -> str:
    """``value`` as indented JSON text (see ``render_json``)."""
    out: list[str] = []
    _emit(value, pad, one_line_items, out)
    return "".join(out)


def _emit(value: Any, pad: str, one_line_items: bool, out: list[str] | _Chunks) -> None:
    """Append ``value``'s indented text to ``out`` in pieces (joined once by the caller:
    nested joins copied a fleet's megabytes of finding lines once per level)."""
    if isinstance(value, dict) and value:
        inner = pad + "  "
        out.append("{\n" + inner)
        first = True
        for k, v in value.items():
            if not first:
                out.append(",\n" + inner)
            first = False
            out.append(_ENCODE(k) + ": ")
            _emit(v, inner, k in _ONE_LINE, out)
        out.append("\n" + pad + "}")
    elif type(value) is _Lines:  # encoded one line each, as they are needed
        if not value.findings:
            out.append("[]")
            return
        inner = pad + "  "
        sep = ",\n" + inner
        out.append("[\n" + inner)
        first = True
        for line in value:
            if not first:
                out.append(sep)
            first = False
            out.append(line)
        out.append("\n" + pad + "]")
    elif isinstance(value, list) and value:
        inner = pad + "  "
        out.append("[\n" + inner)
        if one_line_items:
            out.append((",\n" + inner).join([_ENCODE(v) for v in value]))
        else:
            for index, v in enumerate(value):
                if index:
                    out.append(",\n" + inner)
                _emit(v, inner, False, out)
        out.append("\n" + pad + "]")
    else:
        out.append(_ENCODE(value))


class _Lines:
    """A target's findings, each encoded as one line when iterated (``_finding_lines``):
    written as they are, one at a time."""

    __slots__ = ("findings",)

    def __init__(self, findings: list[Finding]) -> None:
        self.findings = findings

    def __iter__(self) -> Iterator[str]:
        return _lines_of(self.findings)


def _finding_lines(findings: list[Finding]) -> _Lines:
    """``_ENCODE(finding_dict(f))`` for each finding, byte for byte, built (when iterated)
    from cached per-rule pieces and the C string encoder (a fleet report has thousands of
    findings: a dict, two enum labels and a rule lookup each made rendering a tenth of
    the run)."""
    return _Lines(findings)


def _lines_of(findings: list[Finding]) -> Iterator[str]:
    heads: dict[tuple[str, Severity, Verdict], str] = {}
    tails: dict[str, str] = {}
    for f in findings:
        key = (f.rule_id, f.severity, f.verdict)
        head = heads.get(key)
        if head is None:
            head = heads[key] = (f'{{"rule_id": {_string(f.rule_id)}, "severity": '
                                 f'{_string(f.severity.label)}, "verdict": '
                                 f'{_string(f.verdict.label)}, "path": ')
        tail = tails.get(f.rule_id)
        if tail is None:
            known = RULES.get(f.rule_id)
            tail = tails[f.rule_id] = (f', "title": {_string(known.title if known else "")}, '
                                       f'"fix": {_string(known.fix if known else "")}}}')
        offset = "" if f.offset is None else f', "offset": {int.__repr__(f.offset)}'
        yield (f'{head}{_string(f.path)}, "message": {_string(f.message)}, '
               f'"evidence": {_string(f.evidence)}{offset}{tail}')


def write_json(report: ScanReport, write: Callable[[bytes], object]) -> None:
    """``render_json(report)`` handed to ``write`` as ASCII bytes in pieces of about 64 KiB
    (the same bytes, never the whole document at once). Exceptions from ``write``
    propagate; what was written before stays written."""
    out = _Chunks(write)
    _emit(to_json_dict(report, findings=_finding_lines), "", False, out)
    out.append("\n")
    out.flush()


def render_json(report: ScanReport) -> str:
    """Indented JSON text (ASCII-only: odd file names are escaped, never mangled); each
    finding and each skipped entry is one line. (``indent=`` throughout runs Python's own
    encoder, ~3x slower than the C one on a fleet's thousands of findings.) The same text
    as indenting ``to_json_dict(report)``, with each finding's line built directly."""
    out: list[str] = []
    _emit(to_json_dict(report, findings=_finding_lines), "", False, out)
    out.append("\n")
    return "".join(out)
