"""Units of appliance.toolbench: Wilson interval, chained rates, judging, suites, raw argv."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from appliance.config.policy import load_policy
from appliance.engine.launcher import EngineSpec
from appliance.toolbench.checks import judge, loads_strict, matches
from appliance.toolbench.errors import BenchError
from appliance.toolbench.raw_vllm import raw_argv
from appliance.toolbench.runner import payload
from appliance.toolbench.stats import Rate, chained, percentile, wilson
from appliance.toolbench.suite import load_cases, load_suite
from appliance.toolbench.suites import BUILTIN_SUITES, PERSON_JSON, WEATHER_ENUM, WEATHER_PARALLEL

REPO = Path(__file__).resolve().parents[2]


def test_wilson_matches_published_values() -> None:
    # Values from Newcombe (1998), Statistics in Medicine 17:857, Table I (method 3).
    low, high = wilson(81, 263)
    assert (round(low, 4), round(high, 4)) == (0.2553, 0.3662)
    low, high = wilson(0, 10)
    assert low == 0.0 and round(high, 4) == 0.2775
    low, high = wilson(10, 10)
    assert round(low, 4) == 0.7225 and high == 1.0
    assert wilson(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson(3, 2)


def test_issue_numbers_for_chained_success() -> None:
    """The issue's lesson: 23/25 per call; at 95 % per call, 50 chained calls ≈ 8 %."""
    assert chained(Rate.of(95, 100), 50)["rate"] == pytest.approx(0.0769, abs=1e-4)
    r = Rate.of(23, 25)
    ch = chained(r, 10)
    assert ch["low"] < ch["rate"] < ch["high"]
    assert ch["rate"] == pytest.approx(0.92 ** 10)


def test_percentile_interpolates() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0], 99) == pytest.approx(1.99)


def _case(raw: dict[str, Any]):  # type: ignore[no-untyped-def]
    return load_cases("t", [raw]).cases[0]


def _answer(calls: list[tuple[str, str]] | None = None, content: str | None = None,
            finish: str = "tool_calls") -> dict[str, Any]:
    tool_calls = [{"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": a}}
                  for i, (n, a) in enumerate(calls or [])]
    return {"choices": [{"message": {"role": "assistant", "content": content,
                                     "tool_calls": tool_calls}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 7}}


@pytest.mark.parametrize(("calls", "finish", "valid", "reason", "correct"), [
    ([("get_weather", '{"city": "paris ", "unit": "c"}')], "tool_calls", True, None, True),
    ([("get_weather", '{"city": "Oslo", "unit": "c"}')], "stop", True, None, False),
    ([("get_weather", '{"city": "Paris", "unit": "kelvin"}')], "tool_calls", False,
     "schema_mismatch", False),
    ([("get_weather", '{"city": "Paris", "unit": "c", "unit": "f"}')], "tool_calls", False,
     "bad_json", False),
    ([("get_weather", '{"city": NaN, "unit": "c"}')], "tool_calls", False, "bad_json", False),
    ([("get_weather", "false")], "tool_calls", False, "not_object", False),
    ([("get_wether", '{"city": "Paris", "unit": "c"}')], "tool_calls", False,
     "unknown_function", False),
    ([], "stop", False, "missing_call", False),
    ([("get_weather", '{"city": "Par')], "length", False, "truncated", False),
])
def test_judge_tool_call(calls: list[tuple[str, str]], finish: str, valid: bool,
                         reason: str | None, correct: bool) -> None:
    v = judge(_case(WEATHER_ENUM), _answer(calls, finish=finish))
    assert (v.valid, v.reason, v.correct) == (valid, reason, correct)
    assert (v.prompt_tokens, v.completion_tokens) == (5, 7)


def test_judge_named_parallel_and_auto() -> None:
    named = _case({**WEATHER_ENUM, "tool_choice": {"type": "function",
                                                   "function": {"name": "get_time"}}})
    v = judge(named, _answer([("get_weather", '{"city": "Paris", "unit": "c"}')]))
    assert (v.valid, v.reason) == (False, "wrong_function")
    par = _case(WEATHER_PARALLEL)
    two = [("get_weather", '{"city": "Oslo", "unit": "c"}'),
           ("get_weather", '{"city": "Paris", "unit": "c"}')]
    assert judge(par, _answer(two)).correct is True  # order does not matter
    assert judge(par, _answer(two[:1])).correct is False
    single = _case({**WEATHER_PARALLEL, "parallel_tool_calls": False})
    assert judge(single, _answer(two)).reason == "parallel_disabled"
    auto = _case({**WEATHER_ENUM, "tool_choice": "auto", "expect": {"no_call": True}})
    v = judge(auto, _answer([], content="Hello!", finish="stop"))
    assert (v.valid, v.correct) == (True, True)


def test_judge_structured_output() -> None:
    case = _case(PERSON_JSON)
    ok = judge(case, _answer(content='{"name": "Maria", "age": 34}', finish="stop"))
    assert (ok.valid, ok.correct) == (True, True)
    v = judge(case, _answer(content='{"name": "Maria", "age": 200}', finish="stop"))
    assert (v.valid, v.reason) == (False, "schema_mismatch")
    v = judge(case, _answer(content='{"name": "Ma', finish="length"))
    assert (v.valid, v.reason) == (False, "truncated")


def test_chain_step_is_the_known_answer() -> None:
    chain = load_suite("smoke").cases[-1]
    assert chain.kind == "chain" and chain.steps == 10
    assert judge(chain, _answer([("advance", '{"step": 3}')]), step=3).correct is True
    assert judge(chain, _answer([("advance", '{"step": 2}')]), step=3).correct is False


def test_matches() -> None:
    assert matches({"a": {"b": [1, "X"]}}, {"a": {"b": [1.0, "x"], "c": 0}, "d": 1})
    assert not matches({"a": True}, {"a": 1})
    assert not matches([1], [1, 2])
    with pytest.raises(ValueError):
        loads_strict('{"a": 1, "a": 2}')


def test_builtin_suites_load_and_cover_the_issue() -> None:
    std = load_suite("standard")
    kinds = {c.kind for c in std.cases}
    assert kinds == {"tool", "json", "chain"}
    choices = {json.dumps(c.tool_choice) for c in std.cases if c.kind == "tool"}
    assert {'"required"', '"auto"'} <= choices and any("function" in c for c in choices)
    assert any(c.parallel_tool_calls for c in std.cases)
    assert sorted(c.steps for c in std.cases if c.kind == "chain") == [10, 50]
    assert load_suite("smoke").sha256 != std.sha256
    assert {"smoke", "standard", "formats"} <= set(BUILTIN_SUITES)


@pytest.mark.parametrize(("raw", "where"), [
    ({**WEATHER_ENUM, "kind": "magic"}, "cases[0].kind"),
    ({**WEATHER_ENUM, "extra": 1}, "cases[0].extra"),
    ({**WEATHER_ENUM, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "txt"}}}]}, "cases[0].tools[0].function.parameters"),
    ({**WEATHER_ENUM, "steps": 3}, "cases[0].steps"),
    ({**PERSON_JSON, "response_format": {"type": "json_object"}}, "cases[0].response_format"),
    ({**WEATHER_ENUM, "max_tokens": 0}, "cases[0].max_tokens"),
])
def test_suite_errors_name_the_field(raw: dict[str, Any], where: str) -> None:
    with pytest.raises(BenchError) as exc:
        load_cases("t", [raw])
    assert exc.value.code == "suite_invalid" and exc.value.where == where and exc.value.fix


def test_plain_twin_drops_only_the_constraints() -> None:
    case = _case(WEATHER_PARALLEL)
    constrained = payload(case, "m", case.messages, 0.7, plain=False)
    plain = payload(case, "m", case.messages, 0.7, plain=True)
    assert constrained["tool_choice"] == "required" and constrained["parallel_tool_calls"]
    assert plain["tool_choice"] == "none" and "parallel_tool_calls" not in plain
    assert plain["tools"] == constrained["tools"] and plain["messages"] == case.messages
    js = _case(PERSON_JSON)
    assert "response_format" not in payload(js, "m", js.messages, 0.7, plain=True)


def test_raw_vllm_argv_has_no_appliance_guarantees(tmp_path: Path) -> None:
    engine = load_policy(REPO / "policies" / "cpu-demo.toml").engine
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "chat_template.jinja").write_text("{{ messages }}")
    spec = EngineSpec(model_dir=tmp_path / "model", served_name="appliance-model",
                      engine=engine, runtime_dir=tmp_path / "run")
    argv = raw_argv(spec, 8123)
    text = " ".join(argv)
    assert "--tool-strict-level" not in text and "--structured-outputs-config" not in text
    assert "--trust-remote-code" not in text and "--api-key" not in text
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    vllm_args = pytest.importorskip("vllm.entrypoints.launchers.cli_args")
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    args = vllm_args.make_arg_parser(FlexibleArgumentParser()).parse_args(argv[3:])
    vllm_args.validate_parsed_serve_args(args)
    assert (args.host, args.port) == ("127.0.0.1", 8123)
    assert args.tool_call_parser == "hermes" and args.enable_auto_tool_choice is True
    assert str(args.tool_strict_level).endswith("auto")
    backend = args.structured_outputs_config
    assert getattr(backend, "backend", "auto") == "auto"


def _report(k: int, n: int) -> dict[str, Any]:
    rate = Rate.of(k, n).to_json()
    return {"suite": {"sha256": "s"}, "model": "m", "base_url": "u", "levels": [
        {"concurrency": 1, "summary": {"valid": rate, "correct": rate}}]}


def test_all_valid_is_no_regression_against_all_valid() -> None:
    from appliance.toolbench.report import compare

    assert compare(_report(50, 50), _report(10, 10), "b")["regressions"] == 0
    assert compare(_report(45, 50), _report(10, 10), "b")["regressions"] == 2
    assert compare(_report(45, 50), _report(47, 50), "b")["regressions"] == 0
    other = {**_report(45, 50), "suite": {"sha256": "t"}}
    assert "different suite" in compare(other, _report(10, 10), "b")["note"]


def test_plain_twin_gets_the_constrained_token_count() -> None:
    from appliance.toolbench.runner import Record, plain_caps

    def rec(case: str, step: int, tokens: int, status: int | None = 200) -> Record:
        return Record("constrained", case, "tool", 0, step, "valid", None, status, 1.0, 9,
                      tokens, "stop", None)

    caps = plain_caps([rec("a", 1, 30), rec("a", 1, 10), rec("a", 1, 20), rec("a", 2, 99),
                       rec("b", 1, 5, None), rec("c", 1, 7)])
    assert caps == {"a": 20, "c": 7}
    case = _case(WEATHER_ENUM)
    assert payload(case, "m", case.messages, 0.7, True, caps["a"])["max_tokens"] == 20


def test_resummarize_moves_length_cut_answers_out_of_silently_invalid() -> None:
    from appliance.toolbench.report import resummarize
    from appliance.toolbench.runner import LevelResult, Record

    suite = load_suite("smoke")
    rec = Record("constrained", "time_auto", "tool", 0, 1, "invalid", "truncated", 200, 1.0,
                 9, 96, "length", False)
    ok = Record("constrained", "time_auto", "tool", 0, 1, "valid", None, 200, 1.0, 9, 9,
                "stop", True)
    from dataclasses import asdict

    data = {"suite": {"sha256": suite.sha256}, "levels": [
        {**LevelResult(1, wall_s={"constrained": 2.0}).to_json(),
         "records": [asdict(rec), asdict(ok)]}]}
    s = resummarize(data, suite)["levels"][0]["summary"]
    assert (s["truncated"], s["silent_invalid"]["k"], s["valid"]["k"]) == (1, 0, 1)
    with pytest.raises(BenchError):
        resummarize(data, load_suite("standard"))
