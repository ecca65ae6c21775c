"""Report writers: JSON shape, SARIF 2.1.0 structure for GitHub code scanning, text."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from scanner import __version__
from scanner.api import ScanReport, TargetResult, scan_paths
from scanner.core.model import Finding, Severity, Verdict
from scanner.core.rules import RULES
from scanner.report import FORMATS, render, render_text, to_json_dict, to_sarif

LEVELS = {"none", "note", "warning", "error"}
SECURITY_SEVERITY = {Severity.LOW: "3.0", Severity.MEDIUM: "5.5",
                     Severity.HIGH: "8.0", Severity.CRITICAL: "9.5"}


def _finding(rule_id: str, path: str, evidence: str = "e") -> Finding:
    return RULES[rule_id].finding(path, f"message for {path}", evidence)


@pytest.fixture
def report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ScanReport:
    """Hand-built report: a malicious folder, a clean file, a missing path."""
    monkeypatch.chdir(tmp_path)
    folder = TargetResult(
        "models/evil", Verdict.MALICIOUS,
        [_finding("config.auto_map", "config.json", "/auto_map: m.C"),
         _finding("scanner.internal_error", "model.pt!archive/data.pkl", "boom"),
         _finding("fs.symlink", "tokenizer.json", "-> /etc/passwd")],
        files_scanned=3, skipped=[("tokenizer.json", "symbolic link (never followed)")],
        kind="folder", root=str(tmp_path / "models" / "evil"))
    clean = TargetResult("ok.safetensors", Verdict.CLEAN, [], 1, [], "file", str(tmp_path))
    missing = TargetResult("nope", None, error="no such file or directory",
                           root=str(tmp_path / "nope"))
    return ScanReport([folder, clean, missing])


def test_json_report_shape(report: ScanReport) -> None:
    doc = to_json_dict(report)
    assert doc["schema_version"] == "1"
    assert doc["tool"] == {"name": "appliance-scan", "version": __version__}
    assert doc["verdict"] is None and doc["exit_code"] == 2
    assert doc["summary"] == {
        "targets": 3, "files_scanned": 4, "findings": 3, "skipped": 1,
        "verdicts": {"clean": 1, "policy": 0, "malformed": 0, "malicious": 1, "none": 1}}
    evil, clean, missing = doc["targets"]
    assert evil["verdict"] == "malicious" and evil["kind"] == "folder"
    assert evil["skipped"] == [{"path": "tokenizer.json",
                                "reason": "symbolic link (never followed)"}]
    first = evil["findings"][0]
    assert first["rule_id"] == "config.auto_map" and first["path"] == "config.json"
    assert first["fix"] == RULES["config.auto_map"].fix and first["title"]
    assert clean["verdict"] == "clean" and clean["findings"] == []
    assert missing["verdict"] is None and missing["error"] == "no such file or directory"
    json.loads(render(report, "json"))  # serialisable


def _sarif_run(doc: dict[str, Any]) -> dict[str, Any]:
    assert doc["version"] == "2.1.0"
    assert doc["$schema"].startswith("https://") and "sarif" in doc["$schema"]
    assert len(doc["runs"]) == 1
    run: dict[str, Any] = doc["runs"][0]
    return run


def test_sarif_driver_and_rules(report: ScanReport, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "informationUri" not in to_sarif(report)["runs"][0]["tool"]["driver"]
    monkeypatch.setenv("SCANNER_INFORMATION_URI", "https://docs.example.internal/scanner")
    run = _sarif_run(to_sarif(report))
    driver = run["tool"]["driver"]
    assert driver["name"] == "appliance-scan" and driver["version"] == __version__
    assert driver["informationUri"] == "https://docs.example.internal/scanner"
    ids = [r["id"] for r in driver["rules"]]
    assert ids == sorted(RULES) and len(set(ids)) == len(ids)
    for descriptor in driver["rules"]:
        rule = RULES[descriptor["id"]]
        assert descriptor["name"].isidentifier()
        assert descriptor["shortDescription"]["text"] == rule.title
        assert descriptor["fullDescription"]["text"]
        assert descriptor["help"]["text"] == rule.fix
        assert descriptor["defaultConfiguration"]["level"] in LEVELS
        assert "security" in descriptor["properties"]["tags"]
        assert descriptor["properties"]["security-severity"] == SECURITY_SEVERITY[rule.severity]
        float(descriptor["properties"]["security-severity"])


def test_sarif_results(report: ScanReport) -> None:
    run = _sarif_run(to_sarif(report))
    rules = run["tool"]["driver"]["rules"]
    bases = run["originalUriBaseIds"]
    assert bases["%SRCROOT%"]["uri"].startswith("file:///")
    assert bases["%SRCROOT%"]["uri"].endswith("/")
    results = run["results"]
    assert len(results) == 3
    for result in results:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["level"] in LEVELS and result["message"]["text"]
        (location,) = result["locations"]
        artifact = location["physicalLocation"]["artifactLocation"]
        assert not artifact["uri"].startswith("/") and "://" not in artifact["uri"]
        assert artifact["uriBaseId"] in bases
        assert "region" not in location["physicalLocation"]
        (fingerprint,) = result["partialFingerprints"].values()
        assert len(fingerprint) == 64
    uris = [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results]
    assert uris == ["models/evil/config.json", "models/evil/model.pt",
                    "models/evil/tokenizer.json"]
    assert results[1]["properties"]["member"] == "archive/data.pkl"
    assert "archive/data.pkl" in results[1]["message"]["text"]
    assert results[0]["level"] == "error"


def test_sarif_fingerprints_are_stable_and_distinct(report: ScanReport) -> None:
    first = [r["partialFingerprints"] for r in _sarif_run(to_sarif(report))["results"]]
    second = [r["partialFingerprints"] for r in _sarif_run(to_sarif(report))["results"]]
    assert first == second
    assert len({json.dumps(p) for p in first}) == len(first)


def test_sarif_notifications_and_execution_status(report: ScanReport) -> None:
    invocation = _sarif_run(to_sarif(report))["invocations"][0]
    assert invocation["executionSuccessful"] is False  # one target has no verdict
    notes = invocation["toolExecutionNotifications"]
    assert {n["descriptor"]["id"] for n in notes} == {"skipped", "no_verdict"}
    skipped = next(n for n in notes if n["descriptor"]["id"] == "skipped")
    assert skipped["level"] == "note"
    artifact = skipped["locations"][0]["physicalLocation"]["artifactLocation"]
    assert artifact["uri"] == "models/evil/tokenizer.json"


def test_sarif_all_clean_is_successful(tmp_path: Path) -> None:
    clean = ScanReport([TargetResult("a", Verdict.CLEAN, [], 1, [], "file", str(tmp_path))])
    run = _sarif_run(to_sarif(clean, base_dir=str(tmp_path)))
    assert run["results"] == []
    assert run["invocations"][0]["executionSuccessful"] is True


def test_sarif_target_outside_base_gets_its_own_base_id(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    result = TargetResult(str(outside), Verdict.POLICY,
                          [_finding("code.requirements_file", "requirements.txt")], 1, [],
                          "folder", str(outside))
    run = _sarif_run(to_sarif(ScanReport([result]), base_dir=str(tmp_path / "repo")))
    artifact = run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert artifact == {"uri": "requirements.txt", "uriBaseId": "TARGET0"}
    assert run["originalUriBaseIds"]["TARGET0"]["uri"] == outside.as_uri() + "/"


def test_odd_file_names_survive_every_format(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    model = tmp_path / "m"
    model.mkdir()
    odd = os.fsencode("evil\nfake line \x1b[31m\u202e") + b"\xff.py"
    with open(os.path.join(os.fsencode(model), odd), "wb") as handle:
        handle.write(b"x = 1\n")
    (model / "a b%.py").write_text("y = 2\n")
    result = scan_paths([model])
    text = render_text(result)
    assert "\x1b" not in text and "\u202e" not in text
    assert "evil\\nfake line \\x1b[31m\\u202e\\udcff.py" in text
    json.loads(render(result, "json"))
    sarif = to_sarif(result)
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            for r in sarif["runs"][0]["results"]}
    assert "m/a%20b%25.py" in uris
    assert all(u.isascii() and " " not in u for u in uris)


def test_text_report(report: ScanReport) -> None:
    text = render_text(report)
    assert "models/evil: MALICIOUS (3 files, 3 findings)" in text
    assert "nope: NO VERDICT (no such file or directory)" in text
    assert f"fix: {RULES['config.auto_map'].fix}" in text
    assert "not analysed: tokenizer.json" in text
    assert text.rstrip().splitlines()[-1].startswith("NO VERDICT: 3 target(s), 4 file(s)")


def test_render_rejects_unknown_format(report: ScanReport) -> None:
    assert set(FORMATS) == {"text", "json", "sarif"}
    with pytest.raises(ValueError, match="unknown report format"):
        render(report, "xml")


# -- the JSON report's finding lines (built from cached pieces, scanner.report._json) ------

_ODD = ["plain", "naïve ☃ \u2028", 'quote " and \\ backslash', "ctl \x00\x1f\x7f",
        "surrogate \udc80", ""]


@pytest.mark.parametrize("offset", [None, 0, 12345678901234567890])
def test_json_finding_lines_equal_encoding_each_finding_dict(offset: int | None) -> None:
    from scanner.report._json import _ENCODE, _finding_lines, finding_dict

    findings = [Finding(rule, severity, verdict, path, message, evidence, offset)
                for rule in ("config.auto_map", "scanner.internal_error", "no.such_rule")
                for severity, verdict in ((Severity.LOW, Verdict.POLICY),
                                          (Severity.CRITICAL, Verdict.MALICIOUS))
                for path, message, evidence in zip(_ODD, reversed(_ODD), _ODD[1:] + _ODD[:1])]
    lines = list(_finding_lines(findings))
    assert lines == [_ENCODE(finding_dict(f)) for f in findings]
    assert [json.loads(line) for line in lines] == [finding_dict(f) for f in findings]


def test_rendered_json_equals_indenting_the_json_dict(report: ScanReport) -> None:
    from scanner.report._json import _indented, render_json

    assert render_json(report) == _indented(to_json_dict(report), "") + "\n"
    assert json.loads(render_json(report)) == to_json_dict(report)


@pytest.mark.parametrize("size", [1, 7, 1 << 16])
def test_written_json_is_the_rendered_json_in_pieces(report: ScanReport, size: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``write_json`` hands over the bytes of ``render_json``, in pieces of about ``SIZE``
    characters (the CLI streams a fleet's report instead of building it whole)."""
    from scanner.report._json import _Chunks, render_json, write_json

    monkeypatch.setattr(_Chunks, "SIZE", size)
    pieces: list[bytes] = []
    write_json(report, pieces.append)
    assert b"".join(pieces) == render_json(report).encode("ascii")
    assert len(pieces) > 1 if size < 1000 else len(pieces) >= 1
    assert max(len(p) for p in pieces) < size + 4096
