"""``python -m scanner`` / ``scanner.cli``: exit codes, output routing, formats."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _shared import CORPUS as _CORPUS

from scanner import __version__, cli
from scanner.api import ScanProgress, scan_paths

BENIGN = str(_CORPUS / "files" / "benign" / "hf_llama_tiny")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def evil(tmp_path: Path) -> Path:
    """A folder that is malicious through the filesystem layer alone."""
    folder = tmp_path / "evil"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "tokenizer.json").symlink_to("/etc/passwd")
    return folder


def test_clean_folder_exits_0_with_text_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([BENIGN]) == 0
    out, err = capsys.readouterr()
    assert f"{BENIGN}: CLEAN" in out
    assert err == ""  # the text report already ends with the summary


def test_findings_exit_1_and_json_goes_to_stdout(evil: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([str(evil), "--format", "json"]) == 1
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["verdict"] == "malicious" and doc["exit_code"] == 1
    assert "MALICIOUS" in err and "{" not in err  # human summary only on stderr


def test_json_on_stdout_is_streamed_byte_for_byte(evil: Path) -> None:
    """A real process: the streamed JSON report equals the rendered one."""
    from scanner.report import render

    proc = subprocess.run([sys.executable, "-m", "scanner", str(evil), "--format", "json",
                           "--quiet"], capture_output=True, cwd=REPO, check=False)
    assert proc.returncode == 1 and proc.stderr == b""
    doc = json.loads(proc.stdout)
    report = scan_paths([str(evil)])
    expected = json.loads(render(report, "json"))
    for target in (doc, expected):  # timings differ between the two scans
        for t in target["targets"]:
            t["seconds"] = 0
    assert doc == expected
    assert proc.stdout.endswith(b"}\n") and proc.stdout.isascii()


def test_a_report_that_fails_while_streaming_is_no_verdict_without_traceback(
        evil: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(report: object, write: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(cli, "write_json", failing)
    assert cli.main([str(evil), "--format", "json"]) == 2
    err = capsys.readouterr().err
    assert "error[internal_error]: RuntimeError: disk on fire" in err
    assert "Traceback" not in err


def test_missing_path_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([BENIGN, str(tmp_path / "missing"), "--format", "json"]) == 2
    out, err = capsys.readouterr()
    assert json.loads(out)["targets"][1]["verdict"] is None
    assert f"error[no_verdict]: no such file or directory\n  at: {tmp_path / 'missing'}\n" \
           "  fix: " in err


def test_no_verdict_wins_over_findings(evil: Path, tmp_path: Path) -> None:
    assert cli.main([str(evil), str(tmp_path / "missing"), "-q"]) == 2


def test_no_paths_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "nothing to scan" in capsys.readouterr().err


def test_bad_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([BENIGN, "--format", "xml"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m scanner")
    assert "error[usage]: argument --format: invalid choice: 'xml'" in err
    assert "  fix: see 'python -m scanner --help'" in err and "Traceback" not in err


def test_a_path_given_again_is_scanned_once(evil: Path) -> None:
    report = scan_paths([str(evil), f"{evil}/", str(evil.parent / "." / "evil"), BENIGN,
                         str(evil)])
    assert [t.target for t in report.targets] == [str(evil), BENIGN]


def test_verdict_and_severity_print_as_labels(evil: Path) -> None:
    result = scan_paths([str(evil)]).targets[0]
    assert result.verdict is not None
    assert f"{result.verdict} {result.findings[0].severity}" == "malicious critical"
    assert str(result.verdict) == "malicious" and f"{result.verdict:>10}" == " malicious"
    assert int(result.verdict) == 3 and result.verdict > 0  # still ordered integers


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    assert "--format" in capsys.readouterr().out


def test_output_file_and_quiet(evil: Path, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "report.sarif"
    assert cli.main([str(evil), "--format", "sarif", "--output", str(out_file), "-q"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == ""
    doc = json.loads(out_file.read_text())
    assert doc["version"] == "2.1.0"
    assert {r["ruleId"] for r in doc["runs"][0]["results"]} == {"fs.symlink"}


def test_output_file_shows_summary_unless_quiet(evil: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([str(evil), "--output", str(tmp_path / "r.txt"), "--no-progress"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("MALICIOUS: 1 target(s)")
    assert "fs.symlink" in (tmp_path / "r.txt").read_text()


def test_unwritable_output_exits_2(evil: Path, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "no-such-dir" / "r.json"
    assert cli.main([str(evil), "--output", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error[output_unwritable]: cannot write the report: ")
    assert f"\n  at: {target}\n  fix: " in err


def test_internal_error_exits_2(evil: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(cli, "scan_paths", crash)
    assert cli.main([str(evil)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "error[internal_error]: RuntimeError: boom\n  fix: " in err
    assert "Traceback" not in err


def test_list_rules(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--list-rules", "--format", "json"]) == 0
    ids = {r["id"] for r in json.loads(capsys.readouterr().out)}
    assert {"fs.symlink", "config.auto_map", "template.sandbox_escape",
            "path.escape"} <= ids
    assert cli.main(["--list-rules"]) == 0
    assert "| `config.auto_map` | policy | high |" in capsys.readouterr().out


def test_every_rule_is_documented() -> None:
    """docs/scanner.md carries the rule table; regenerate it with --list-rules."""
    from scanner.scan.dispatch import load_all_rules

    rules = load_all_rules()
    assert len(rules) > 60
    doc = (REPO / "docs" / "scanner.md").read_text()
    missing = sorted(r for r in rules if f"| `{r}` |" not in doc)
    assert missing == [], "run `python -m scanner --list-rules` and update docs/scanner.md"


def test_scan_arguments_mount_on_a_subcommand(evil: Path) -> None:
    parser = argparse.ArgumentParser(prog="appliance")
    sub = parser.add_subparsers(dest="command")
    cli.add_scan_arguments(sub.add_parser("scan"))
    args = parser.parse_args(["scan", str(evil), "--deep", "--quiet"])
    assert args.deep and args.quiet and args.paths == [str(evil)]
    assert cli.run(args) == 1


def test_progress_hook_sees_every_file_in_order(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("a")
    (folder / "sub" / "b.txt").write_text("bb")
    events: list[ScanProgress] = []
    scan_paths([folder], progress=events.append)
    assert [(e.path, e.size, e.index) for e in events] == [("a.txt", 1, 1), ("sub/b.txt", 2, 2)]
    assert all(e.target == str(folder) for e in events)


def test_python_dash_m_scanner(evil: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    version = subprocess.run([sys.executable, "-m", "scanner", "--version"], env=env,
                             capture_output=True, text=True, timeout=60, check=False)
    assert version.returncode == 0 and __version__ in version.stdout
    done = subprocess.run([sys.executable, "-m", "scanner", str(evil), "--format", "json"],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert json.loads(done.stdout)["verdict"] == "malicious"
    assert "\x1b[" not in done.stderr  # stderr is not a TTY: no progress display
