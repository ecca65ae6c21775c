"""``appliance bench tools`` end to end against a fake OpenAI endpoint on loopback.

The fake makes every 5th constrained answer invalid (``bt_fake_openai``), so the true valid
rate is known: 0.8. Each test runs in well under 5 s.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bt_fake_openai import FakeOpenAI, closed_port

from appliance.cli import main
from appliance.toolbench.suites import THERMOSTAT_RANGE, WEATHER_ENUM

SINGLE_CASES = {"name": "singles", "cases": [
    WEATHER_ENUM, THERMOSTAT_RANGE,
    {**WEATHER_ENUM, "id": "weather_2"}, {**THERMOSTAT_RANGE, "id": "thermostat_2"},
    {"id": "person", "kind": "json", "max_tokens": 64,
     "messages": [{"role": "user", "content": "Extract: Ana, 30."}],
     "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": {
         "type": "object", "properties": {"name": {"type": "string", "maxLength": 9},
                                          "age": {"type": "integer"}},
         "required": ["name", "age"], "additionalProperties": False}}}},
]}


def _bench(fake: FakeOpenAI, tmp: Path, out: str, *extra: str) -> int:
    key = tmp / "key.txt"
    key.write_text(f"# comment\n{fake.key}\n")
    suite = tmp / "suite.json"
    suite.write_text(json.dumps(SINGLE_CASES))
    return main(["bench", "tools", "--base-url", fake.base_url, "--api-key-file", str(key),
                 "--suite", str(suite), "--output", str(tmp / out), "--quiet", *extra])


def test_known_invalid_fraction_is_inside_the_interval_and_fails_a_full_baseline(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeOpenAI(invalid_every=0) as good:
        assert _bench(good, tmp_path, "base", "--concurrency", "1,5", "--repeat", "4") == 0
    base = json.loads((tmp_path / "base" / "report.json").read_text())
    assert [lv["summary"]["valid"]["rate"] for lv in base["levels"]] == [1.0, 1.0]

    with FakeOpenAI(invalid_every=5) as fake:
        status = _bench(fake, tmp_path, "cur", "--concurrency", "1,5", "--repeat", "20",
                        "--label", "fake 80 %",
                        "--baseline", str(tmp_path / "base" / "report.json"))
        # 5 warm-up requests (one per case, grammar compile, not recorded), then 200
        assert fake.constrained_answers == 5 + 200
        assert fake.invalid_answers == fake.constrained_answers // 5 == 41
    assert status == 1
    err = capsys.readouterr().err
    assert "regression: concurrency=1 valid 80.0 %" in err
    report = json.loads((tmp_path / "cur" / "report.json").read_text())
    assert report["complete"] is True
    for lv in report["levels"]:
        s = lv["summary"]
        assert s["answers"] == 100
        assert s["valid"]["rate"] == pytest.approx(0.8)
        assert s["valid"]["low"] < 0.8 < s["valid"]["high"]
        assert s["silent_invalid"]["low"] < 0.2 < s["silent_invalid"]["high"]
        assert s["valid"]["high"] < 1.0  # so the 100 % baseline lies above the interval
        assert sum(s["reasons"].values()) == 20
        assert set(s["reasons"]) <= {"schema_mismatch", "bad_json"}
        assert s["chained"]["10"]["predicted"]["rate"] == pytest.approx(0.8 ** 10)
        assert s["chained"]["10"]["measured"] is None  # no chain in this suite
        assert s["tokens_per_s"]["plain"] is not None and s["constraint_ratio"] is not None
    rows = report["baseline"]["rows"]
    # the fake's arguments are schema-valid but not the known answers: correct stays 0 %
    assert {(r["concurrency"], r["metric"]) for r in rows if r["regression"]} == {
        (1, "valid"), (5, "valid")}
    assert len(rows) == 4
    md = (tmp_path / "cur" / "report.md").read_text()
    assert "| 100 | 80.0 % [" in md and "Regressions: **2**" in md
    assert "target **fake 80 %**" in md and report["label"] == "fake 80 %"
    for png in ("validity.png", "constraint_tax.png", "latency_cdf.png"):
        assert (tmp_path / "cur" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"![{png}]({png})" in md


def test_same_rate_as_baseline_is_not_a_regression(tmp_path: Path) -> None:
    with FakeOpenAI(invalid_every=5, delay_s=0.02) as fake:
        assert _bench(fake, tmp_path, "a", "--concurrency", "4", "--repeat", "10",
                      "--no-plots") == 0
        assert fake.max_in_flight == 4  # the level's concurrency was reached, never passed
        assert _bench(fake, tmp_path, "b", "--concurrency", "4", "--repeat", "10", "--no-plots",
                      "--baseline", str(tmp_path / "a" / "report.json")) == 0
    report = json.loads((tmp_path / "b" / "report.json").read_text())
    assert report["baseline"]["regressions"] == 0
    assert not list((tmp_path / "b").glob("*.png"))


def test_agent_chain_measured_against_predicted(tmp_path: Path) -> None:
    suite = tmp_path / "chain.json"
    from appliance.toolbench.suites import BUILTIN_SUITES

    chain = next(c for c in BUILTIN_SUITES["standard"] if c["id"] == "agent_chain_10")
    suite.write_text(json.dumps({"name": "chain", "cases": [chain]}))
    key = tmp_path / "key"
    with FakeOpenAI() as good:
        key.write_text(good.key)
        assert main(["bench", "tools", "--base-url", good.base_url, "--api-key-file", str(key),
                     "--suite", str(suite), "--repeat", "3", "--concurrency", "2", "--quiet",
                     "--no-plots", "--output", str(tmp_path / "ok")]) == 0
    s = json.loads((tmp_path / "ok" / "report.json").read_text())["levels"][0]["summary"]
    assert s["answers"] == 60 and s["correct"]["rate"] == 1.0  # 3 rounds x 2 copies x 10 steps
    assert s["chained"]["10"]["measured"]["rate"] == 1.0
    with FakeOpenAI(invalid_every=4) as bad:
        key.write_text(bad.key)
        assert main(["bench", "tools", "--base-url", bad.base_url, "--api-key-file", str(key),
                     "--suite", str(suite), "--repeat", "3", "--concurrency", "1", "--quiet",
                     "--no-plots", "--no-plain", "--no-warmup",  # every 4th from the first
                     "--output", str(tmp_path / "bad")]) == 0
    s = json.loads((tmp_path / "bad" / "report.json").read_text())["levels"][0]["summary"]
    chains = json.loads((tmp_path / "bad" / "report.json").read_text())["levels"][0]["chains"]
    assert [c["steps_ok"] for c in chains] == [3, 3, 3]  # each stops at its 4th answer
    assert s["answers"] == 12 and s["chained"]["10"]["measured"]["rate"] == 0.0
    assert s["constraint_ratio"] is None


@pytest.mark.parametrize(("fake_kwargs", "key", "extra", "code"), [
    ({}, "wrong-key", [], "bad_api_key"),
    ({}, None, ["--model", "nope"], "unknown_model"),
    ({"garbage": "models"}, None, [], "garbage_response"),
    ({"garbage": "chat"}, None, [], "garbage_response"),
])
def test_preflight_errors_are_clear(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    fake_kwargs: dict[str, object], key: str | None,
                                    extra: list[str], code: str) -> None:
    with FakeOpenAI(**fake_kwargs) as fake:  # type: ignore[arg-type]
        keyfile = tmp_path / "key"
        keyfile.write_text(key or fake.key)
        status = main(["bench", "tools", "--base-url", fake.base_url, "--api-key-file",
                       str(keyfile), "--suite", "smoke", "--quiet", "--output",
                       str(tmp_path / "out"), *extra])
    err = capsys.readouterr().err
    assert status == 2
    assert f"error[{code}]" in err and "fix:" in err and "Traceback" not in err
    if code == "unknown_model":
        assert "fake-model" in err  # the fix lists what is served


def test_unreachable_endpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keyfile = tmp_path / "key"
    keyfile.write_text("k")
    status = main(["bench", "tools", "--base-url", f"http://127.0.0.1:{closed_port()}/v1",
                   "--api-key-file", str(keyfile), "--output", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert status == 2 and "error[endpoint_unreachable]" in err and "--base-url" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("fake_kwargs", "code", "kept"), [
    ({"garbage": "chat", "garbage_after": 12}, "bench_aborted", 11),
    ({"revoke_after": 8}, "bad_api_key", 7),
])
def test_mid_run_failure_keeps_partial_results(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_kwargs: dict[str, object],
        code: str, kept: int) -> None:
    with FakeOpenAI(**fake_kwargs) as fake:  # type: ignore[arg-type]
        status = _bench(fake, tmp_path, "out", "--concurrency", "1,8", "--repeat", "10",
                        "--no-plain", "--no-warmup")  # counted from the first request
    err = capsys.readouterr().err
    assert status == 2 and f"error[{code}]" in err and "partial results kept" in err
    assert "Traceback" not in err
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["complete"] is False and report["error"]["code"] == code
    assert len(report["levels"]) == 1  # stopped in the first level
    recs = report["levels"][0]["records"]
    assert sum(r["outcome"] == "valid" for r in recs) == kept  # the probe was request 1
    assert "Stopped early" in (tmp_path / "out" / "report.md").read_text()


@pytest.mark.parametrize(("args", "code", "where"), [
    (["--concurrency", "0,8"], "bad_argument", "--concurrency"),
    (["--suite", "no-such-suite"], "suite_invalid", "no-such-suite"),
    (["--repeat", "0"], "bad_argument", "--repeat"),
])
def test_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                       code: str, where: str) -> None:
    keyfile = tmp_path / "key"
    keyfile.write_text("k")
    status = main(["bench", "tools", "--base-url", "http://127.0.0.1:1/v1", "--api-key-file",
                   str(keyfile), "--quiet", *args])
    err = capsys.readouterr().err
    assert status == 2 and f"error[{code}]" in err and where in err


def test_bad_suite_file_and_baseline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keyfile = tmp_path / "key"
    keyfile.write_text("k")
    suite = tmp_path / "s.json"
    suite.write_text(json.dumps({"cases": [{**WEATHER_ENUM, "tool_choice": "sometimes"}]}))
    assert main(["bench", "tools", "--base-url", "http://127.0.0.1:1/v1", "--api-key-file",
                 str(keyfile), "--suite", str(suite)]) == 2
    assert "cases[0].tool_choice" in capsys.readouterr().err
    base = tmp_path / "b.json"
    base.write_text('{"levels": "x"}')
    assert main(["bench", "tools", "--base-url", "http://127.0.0.1:1/v1", "--api-key-file",
                 str(keyfile), "--suite", "smoke", "--baseline", str(base)]) == 2
    assert "error[baseline_invalid]" in capsys.readouterr().err


def test_sigterm_keeps_partial_results(tmp_path: Path) -> None:
    """A CI timeout (SIGTERM) mid-run: exit 130, report written with what was measured."""
    import signal
    import subprocess
    import sys
    import time

    with FakeOpenAI(delay_s=0.3) as fake:
        key = tmp_path / "key"
        key.write_text(fake.key)
        proc = subprocess.Popen(
            [sys.executable, "-m", "appliance.cli", "bench", "tools", "--base-url",
             fake.base_url, "--api-key-file", str(key), "--suite", "smoke", "--quiet",
             "--concurrency", "1", "--no-warmup", "--output", str(tmp_path / "out")],
            stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while fake.constrained_answers < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["complete"] is False and report["error"]["code"] == "bench_interrupted"
    assert len(report["levels"][0]["records"]) >= 2
