"""The AST scorer (appliance.toolbench.ast_match, BFCL's rules): known-right, known-wrong and
no-call answers scored as expected, alone and through ``checks.judge``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from appliance.toolbench.ast_match import normalise, score, type_ok, value_equal
from appliance.toolbench.checks import judge
from appliance.toolbench.suite import load_cases

SCHEMAS: dict[str, dict[str, Any]] = {
    "get_weather": {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
        "required": ["city"]},
    "get_time": {"type": "object", "properties": {"city": {"type": "string"}},
                 "required": ["city"]},
    "circle_area": {"type": "object", "properties": {"radius": {"type": "number"}},
                    "required": ["radius"]},
    "factorial": {"type": "object", "properties": {"n": {"type": "integer"}},
                  "required": ["n"]},
    "tag": {"type": "object", "properties": {
        "labels": {"type": "array", "items": {"type": "string"}},
        "where": {"type": "object"}, "urgent": {"type": "boolean"}},
        "required": ["labels"]},
}
WEATHER_PARIS = [{"get_weather": {"city": ["Paris", "Paris, France"], "unit": ["c", ""]}}]


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "arguments": json.dumps(args)}


@pytest.mark.parametrize("calls", [
    [call("get_weather", city="Paris", unit="c")],
    [call("get_weather", city="Paris")],                       # optional omitted ("" allowed)
    [call("get_weather", city="paris, france")],               # case and punctuation folded
    [call("get_weather", city=" PARIS ", unit="c")],           # whitespace folded
])
def test_known_right_single_call(calls: list[dict[str, Any]]) -> None:
    assert score(WEATHER_PARIS, calls, SCHEMAS).ok


@pytest.mark.parametrize(("calls", "reason"), [
    ([call("get_time", city="Paris")], "wrong_function"),
    ([call("get_weather", unit="c")], "missing_required"),
    ([call("get_weather", city="Oslo", unit="c")], "value_error"),
    ([call("get_weather", city="Paris", unit="f")], "value_error"),
    ([call("get_weather", city="Paris", country="FR")], "unexpected_param"),
    ([call("get_weather", city=7)], "type_error"),
    ([call("get_weather", city="Paris"), call("get_weather", city="Paris")], "wrong_count"),
    ([], "no_call"),
    ([{"name": "get_weather", "arguments": "{\"city\": \"Paris\""}], "bad_arguments"),
    ([{"name": "get_weather", "arguments": "[\"Paris\"]"}], "bad_arguments"),
])
def test_known_wrong_single_call(calls: list[dict[str, Any]], reason: str) -> None:
    result = score(WEATHER_PARIS, calls, SCHEMAS)
    assert not result.ok and result.reason == reason


def test_an_optional_argument_whose_value_matters_must_be_given() -> None:
    truth = [{"get_weather": {"city": ["Oslo"], "unit": ["f"]}}]
    result = score(truth, [call("get_weather", city="Oslo")], SCHEMAS)
    assert (result.ok, result.reason) == (False, "missing_optional")


def test_truncated_answers_with_calls_expected_are_wrong_even_when_the_calls_match() -> None:
    result = score(WEATHER_PARIS, [call("get_weather", city="Paris")], SCHEMAS, "length")
    assert (result.ok, result.reason) == (False, "truncated")


def test_irrelevance_is_right_only_without_a_call() -> None:
    assert score([], [], SCHEMAS).ok
    assert score([], [], SCHEMAS, "length").ok  # text cut by max_tokens is still no call
    result = score([], [call("get_weather", city="Paris")], SCHEMAS)
    assert (result.ok, result.reason, result.detail) == (False, "call_on_irrelevance",
                                                         "get_weather")


def test_int_is_accepted_for_number_but_float_and_bool_are_not_integers() -> None:
    truth = [{"circle_area": {"radius": [3.0]}}]
    assert score(truth, [call("circle_area", radius=3)], SCHEMAS).ok
    assert score(truth, [call("circle_area", radius=3.0)], SCHEMAS).ok
    truth = [{"factorial": {"n": [5]}}]
    assert score(truth, [call("factorial", n=5)], SCHEMAS).ok
    assert score(truth, [call("factorial", n=5.0)], SCHEMAS).reason == "type_error"
    assert score(truth, [call("factorial", n=True)], SCHEMAS).reason == "type_error"
    assert score(truth, [call("factorial", n="5")], SCHEMAS).reason == "type_error"
    assert type_ok(None, {"type": ["integer", "null"]}) and type_ok({"a": 1}, {})


def test_parallel_calls_match_as_a_multiset_in_any_order() -> None:
    truth = [{"get_weather": {"city": ["Paris"], "unit": ["c", ""]}},
             {"get_weather": {"city": ["Oslo"], "unit": ["c", ""]}},
             {"get_time": {"city": ["Tokyo"]}}]
    calls = [call("get_time", city="Tokyo"), call("get_weather", city="Oslo", unit="c"),
             call("get_weather", city="Paris")]
    assert score(truth, calls, SCHEMAS).ok
    # two calls for Paris cannot both fill the Paris slot: Oslo stays unmatched
    twice = [call("get_time", city="Tokyo"), call("get_weather", city="Paris"),
             call("get_weather", city="Paris")]
    result = score(truth, twice, SCHEMAS)
    assert (result.ok, result.reason) == (False, "value_error")
    assert score(truth, calls[:2], SCHEMAS).reason == "wrong_count"
    assert score(truth, [*calls, call("get_time", city="Lima")], SCHEMAS).reason == "wrong_count"


def test_matching_is_not_greedy() -> None:
    """The first call fits both expected calls; a greedy match would give it to the first and
    leave the second call with nothing (the bipartite matching finds the pairing)."""
    truth = [{"get_weather": {"city": ["Paris", "Oslo"]}}, {"get_weather": {"city": ["Paris"]}}]
    calls = [call("get_weather", city="Paris"), call("get_weather", city="Oslo")]
    assert score(truth, calls, SCHEMAS).ok


def test_value_rules_strings_lists_objects() -> None:
    assert normalise("New-York, N.Y.") == "newyorkny"
    assert value_equal("new york", "New-York")
    assert not value_equal("NYC", "New York")
    assert value_equal("it's", "it\"s")  # ' read as "
    assert value_equal(80, 80.0) and not value_equal("80", 80)
    assert value_equal(["a", "b"], ["A", "b"]) and not value_equal(["b", "a"], ["a", "b"])
    assert not value_equal(True, 1) and value_equal(False, False)
    nested = {"city": ["Paris"], "zip": ["75001", ""]}
    assert value_equal({"city": "paris"}, nested)
    assert value_equal({"city": "Paris", "zip": "75001"}, nested)
    assert not value_equal({"city": "Paris", "zip": "75002"}, nested)
    assert not value_equal({"city": "Paris", "street": "x"}, nested)
    assert not value_equal({"zip": "75001"}, nested)
    truth = [{"tag": {"labels": [["bug", "ui"], ["ui", "bug"]], "urgent": [True, ""]}}]
    assert score(truth, [call("tag", labels=["UI", "bug"])], SCHEMAS).ok
    assert score(truth, [call("tag", labels=["bug"])], SCHEMAS).reason == "value_error"
    assert score(truth, [call("tag", labels=["bug", "ui"], urgent=False)],
                 SCHEMAS).reason == "value_error"


def _body(calls: list[dict[str, Any]], finish: str = "tool_calls",
          content: str | None = None) -> dict[str, Any]:
    return {"choices": [{"finish_reason": finish, "message": {
        "role": "assistant", "content": content,
        "tool_calls": [{"id": f"c{i}", "type": "function", "function": c}
                       for i, c in enumerate(calls)]}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 7}}


def _case(truth: list[Any]) -> Any:
    tools = [{"type": "function", "function": {"name": n, "parameters": s}}
             for n, s in SCHEMAS.items() if n in ("get_weather", "get_time")]
    return load_cases("t", [{"id": "c", "kind": "tool", "tools": tools, "tool_choice": "auto",
                             "category": "simple", "messages": [{"role": "user",
                                                                 "content": "x"}],
                             "expect": {"ast": truth}}]).cases[0]


def test_judge_uses_the_ast_score_for_accuracy_and_keeps_validity_apart() -> None:
    case = _case(WEATHER_PARIS)
    right = judge(case, _body([call("get_weather", city="Paris", unit="c")]))
    assert (right.valid, right.correct, right.ast_reason) == (True, True, None)
    wrong = judge(case, _body([call("get_time", city="Paris")]))
    assert (wrong.valid, wrong.correct, wrong.ast_reason) == (True, False, "wrong_function")
    text = judge(case, _body([], "stop", "It is sunny."))
    assert (text.valid, text.correct, text.ast_reason) == (True, False, "no_call")
    # valid against the schema is not enough, and invalid is not always wrong to the AST:
    bad = judge(case, _body([call("get_weather", city="Paris", unit="kelvin")]))
    assert (bad.valid, bad.reason, bad.correct) == (False, "schema_mismatch", False)
    irrelevant = _case([])
    assert judge(irrelevant, _body([], "stop", "Hello!")).correct is True
    cut = judge(irrelevant, _body([], "length", "Hello, I am a long"))
    assert (cut.valid, cut.correct) == (False, True)
    called = judge(irrelevant, _body([call("get_time", city="Oslo")]))
    assert (called.valid, called.correct, called.ast_reason) == (
        True, False, "call_on_irrelevance")
