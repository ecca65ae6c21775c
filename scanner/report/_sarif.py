"""SARIF 2.1.0 report for GitHub code scanning (``github/codeql-action/upload-sarif``).

One run; ``tool.driver.rules`` lists every registered rule (``scanner.core.rules.RULES``,
sorted by id, so ``ruleIndex`` is stable for a given scanner version) with
``defaultConfiguration.level`` and ``properties.security-severity`` (3.0 / 5.5 / 8.0 / 9.5
for low / medium / high / critical). Model files are binary, so results carry no line
region: each has a file-level location whose ``uri`` is relative to a ``uriBaseId``
(``%SRCROOT%`` = the working directory, or ``TARGETn`` for targets outside it) and our own
``partialFingerprints`` (SHA-256 of rule id, path and evidence). Skipped files and targets
without a verdict become ``invocations[0].toolExecutionNotifications``.

Spec: OASIS SARIF 2.1.0; GitHub "SARIF support for code scanning".
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

from scanner.api import ScanReport, TargetResult
from scanner.core.model import Finding, Severity
from scanner.core.rules import Rule
from scanner.report._json import TOOL_NAME
from scanner.scan.dispatch import load_all_rules

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
# Where the rules are documented for SARIF viewers; set by the deployment (no invented URL).
INFORMATION_URI_ENV = "SCANNER_INFORMATION_URI"
FINGERPRINT_KEY = "applianceScanFinding/v1"

LEVELS = {Severity.LOW: "note", Severity.MEDIUM: "warning",
          Severity.HIGH: "error", Severity.CRITICAL: "error"}
SECURITY_SEVERITY = {Severity.LOW: "3.0", Severity.MEDIUM: "5.5",
                     Severity.HIGH: "8.0", Severity.CRITICAL: "9.5"}


def _rule_name(rule_id: str) -> str:
    """``config.auto_map`` -> ``ConfigAutoMap`` (SARIF ``name``: an identifier)."""
    return "".join(part.capitalize() for part in re.split(r"[._\-]", rule_id) if part)


def rule_descriptor(rule: Rule) -> dict[str, Any]:
    """SARIF ``reportingDescriptor`` for one rule."""
    family = rule.id.split(".", 1)[0]
    return {
        "id": rule.id,
        "name": _rule_name(rule.id),
        "shortDescription": {"text": rule.title},
        "fullDescription": {
            "text": f"{rule.title}. Verdict: {rule.verdict.label}; severity: "
                    f"{rule.severity.label}."
        },
        "help": {"text": rule.fix, "markdown": f"**Fix:** {rule.fix}"},
        "defaultConfiguration": {"level": LEVELS[rule.severity]},
        "properties": {
            "tags": ["security", "model-scanning", family],
            "security-severity": SECURITY_SEVERITY[rule.severity],
            "verdict": rule.verdict.label,
        },
    }


def _uri(prefix: str, path: str) -> str:
    joined = posixpath.normpath(posixpath.join(prefix, path)) if prefix else path
    return quote(joined.encode("utf-8", "surrogateescape"), safe="/")


class _Bases:
    """Maps each target root to (uriBaseId, prefix relative to that base)."""

    def __init__(self, base_dir: str) -> None:
        self.base_dir = os.path.abspath(base_dir)
        self.original: dict[str, dict[str, str]] = {
            "%SRCROOT%": {"uri": Path(self.base_dir).as_uri() + "/"}
        }

    def locate(self, index: int, result: TargetResult) -> tuple[str, str]:
        root = result.root or self.base_dir
        rel = os.path.relpath(root, self.base_dir)
        if rel != ".." and not rel.startswith("../"):
            return "%SRCROOT%", "" if rel == "." else Path(rel).as_posix()
        base_id = f"TARGET{index}"
        self.original[base_id] = {"uri": Path(root).as_uri() + "/"}
        return base_id, ""


def _location(base_id: str, uri: str) -> dict[str, Any]:
    return {"physicalLocation": {"artifactLocation": {"uri": uri, "uriBaseId": base_id}}}


def sarif_result(finding: Finding, rule_index: dict[str, int], base_id: str,
                 prefix: str, target: str) -> dict[str, Any]:
    """One SARIF ``result`` (file-level location; container member in the message)."""
    file_path, _, member = finding.path.partition("!")
    uri = _uri(prefix, file_path or ".")
    text = finding.message + (f" [member {member}]" if member else "")
    if finding.evidence:
        text += f" (evidence: {finding.evidence})"
    digest = hashlib.sha256(
        "\0".join((finding.rule_id, uri, member, finding.evidence)).encode(
            "utf-8", "surrogateescape")
    ).hexdigest()
    result: dict[str, Any] = {
        "ruleId": finding.rule_id,
        "level": LEVELS[finding.severity],
        "message": {"text": text},
        "locations": [_location(base_id, uri)],
        "partialFingerprints": {FINGERPRINT_KEY: digest},
        "properties": {"verdict": finding.verdict.label, "severity": finding.severity.label,
                       "target": target},
    }
    if finding.rule_id in rule_index:
        result["ruleIndex"] = rule_index[finding.rule_id]
    if member:
        result["properties"]["member"] = member
    if finding.offset is not None:
        result["properties"]["byteOffset"] = finding.offset
    return result


def to_sarif(report: ScanReport, *, base_dir: str | None = None) -> dict[str, Any]:
    """The report as a SARIF 2.1.0 log. ``base_dir`` (default: the working directory) is
    ``%SRCROOT%``; for GitHub upload, run the scan from the repository root."""
    rules = sorted(load_all_rules().values(), key=lambda r: r.id)
    rule_index = {r.id: i for i, r in enumerate(rules)}
    bases = _Bases(base_dir or os.getcwd())
    results: list[dict[str, Any]] = []
    notifications: list[dict[str, Any]] = []
    for index, target in enumerate(report.targets):
        base_id, prefix = bases.locate(index, target)
        results.extend(sarif_result(f, rule_index, base_id, prefix, target.target)
                       for f in target.findings)
        for path, reason in target.skipped:
            notifications.append({  # a note: whatever made it a risk is also a finding
                "level": "note",
                "message": {"text": f"not analysed: {path}: {reason}"},
                "descriptor": {"id": "skipped"},
                "locations": [_location(base_id, _uri(prefix, path))],
            })
        if target.verdict is None:
            notifications.append({
                "level": "error",
                "message": {"text": f"no verdict for {target.target}: {target.error}"},
                "descriptor": {"id": "no_verdict"},
            })
    driver_extra = {}
    if os.environ.get(INFORMATION_URI_ENV, "").startswith("https://"):
        driver_extra["informationUri"] = os.environ[INFORMATION_URI_ENV]
    run: dict[str, Any] = {
        "tool": {"driver": {
            "name": TOOL_NAME,
            "version": report.tool_version,
            "semanticVersion": report.tool_version,
            "rules": [rule_descriptor(r) for r in rules],
            **driver_extra,
        }},
        "originalUriBaseIds": bases.original,
        "invocations": [{
            "executionSuccessful": report.verdict is not None,
            "toolExecutionNotifications": notifications,
        }],
        "results": results,
        "properties": {"verdict": report.verdict.label if report.verdict is not None
                       else None},
    }
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}


def render_sarif(report: ScanReport, *, base_dir: str | None = None) -> str:
    """SARIF JSON text."""
    return json.dumps(to_sarif(report, base_dir=base_dir), indent=2, ensure_ascii=True) + "\n"
