"""The shipped expected-call suites (appliance/toolbench/data/accuracy.json) and their typed
loader: size, categories, domains, every ground truth checked; defects named by field."""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from appliance.toolbench.ast_match import score
from appliance.toolbench.cli import SPAWN_KINDS
from appliance.toolbench.errors import BenchError
from appliance.toolbench.expected import (
    CATEGORIES,
    builtin_accuracy,
    load_accuracy_file,
    parse_accuracy,
)
from appliance.toolbench.runner import payload
from appliance.toolbench.suite import load_cases, load_suite

DATA = Path(__file__).resolve().parents[2] / "appliance" / "toolbench" / "data" / "accuracy.json"


def raw() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATA.read_text(encoding="utf-8"))
    return data


def test_the_shipped_suite_has_200_cases_over_four_categories_and_many_domains() -> None:
    cases = builtin_accuracy()
    assert len(cases) >= 200
    counts = Counter(c.category for c in cases)
    assert set(counts) == set(CATEGORIES) and min(counts.values()) >= 30
    assert len({c.domain for c in cases}) >= 7
    for c in cases:
        if c.category == "irrelevance":
            assert c.ground_truth == []
        elif c.category == "parallel":
            assert len(c.ground_truth) >= 2
        else:
            assert len(c.ground_truth) == 1
        if c.category == "multiple":
            assert len(c.functions) >= 3


def test_the_package_data_is_declared() -> None:
    pyproject = (DATA.parents[3] / "pyproject.toml").read_text()
    assert '"appliance.toolbench" = ["data/*.json"]' in pyproject


def test_each_ground_truth_scores_right_against_itself() -> None:
    """The first allowed value of every argument (optional ones left out) is accurate: no
    case is unanswerable by construction."""
    for c in builtin_accuracy():
        calls = []
        for call in c.ground_truth:
            (name, args), = call.items()
            values = {k: next(v for v in allowed if v != "")
                      for k, allowed in args.items() if "" not in allowed}
            calls.append({"name": name, "arguments": json.dumps(values)})
        schemas = {f["name"]: f["parameters"] for f in c.functions}
        assert score(c.ground_truth, list(reversed(calls)), schemas).ok, c.id


def test_builtin_suites_load_as_auto_tool_cases() -> None:
    full, mini = load_suite("accuracy"), load_suite("accuracy-mini")
    assert len(full.cases) == len(builtin_accuracy())
    assert 50 <= len(mini.cases) <= len(full.cases) // 3
    assert Counter(c.category for c in mini.cases).keys() == set(CATEGORIES)
    for case in full.cases:
        assert case.kind == "tool" and case.tool_choice == "auto" and "ast" in case.expect
        assert case.parallel_tool_calls is (True if case.category == "parallel" else None)


def test_an_accuracy_file_loads_through_suite(tmp_path: Path) -> None:
    data = raw()
    data["name"] = "mine"
    data["cases"] = data["cases"][:5]
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data))
    suite = load_suite(str(path))
    assert suite.name == "mine" and len(suite.cases) == 5
    assert load_accuracy_file(path)[1][0].id == data["cases"][0]["id"]


def _first(category: str, data: dict[str, Any]) -> dict[str, Any]:
    case: dict[str, Any] = next(c for c in data["cases"] if c["category"] == category)
    return case


@pytest.mark.parametrize(("edit", "where"), [
    (lambda d: _first("simple", d).update(category="easy"), "category"),
    (lambda d: _first("simple", d).update(functions=["nope"]), "functions"),
    (lambda d: _first("simple", d).update(extra=1), "extra"),
    (lambda d: _first("irrelevance", d).update(
        functions=["get_weather"], ground_truth=[{"get_weather": {"city": ["Paris"]}}]),
     "ground_truth"),
    (lambda d: _first("simple", d).update(ground_truth=[]), "ground_truth"),
    (lambda d: _first("simple", d)["ground_truth"][0]["get_weather"].update(city=["Paris", ""]),
     "ground_truth[0].get_weather.city"),
    (lambda d: _first("simple", d)["ground_truth"][0]["get_weather"].update(unit=["kelvin"]),
     "ground_truth[0].get_weather.unit"),
    (lambda d: _first("simple", d)["ground_truth"][0]["get_weather"].update(zip=["1"]),
     "ground_truth[0].get_weather.zip"),
    (lambda d: _first("simple", d).update(ground_truth=[{"get_time": {"city": ["x"]}}]),
     "ground_truth[0].get_time"),
    (lambda d: d["cases"].append(copy.deepcopy(d["cases"][0])), "cases"),
])
def test_defects_are_named_by_field(edit: Any, where: str) -> None:
    data = raw()
    edit(data)
    with pytest.raises(BenchError) as err:
        parse_accuracy(data, "f.json")
    assert err.value.code == "suite_invalid"
    assert err.value.where is not None and err.value.where.endswith(where), err.value.where


def test_a_plain_suite_case_with_an_ast_truth_is_checked_too() -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}
    base = {"id": "c", "kind": "tool", "tools": [tool], "tool_choice": "auto",
            "messages": [{"role": "user", "content": "x"}]}
    assert load_cases("s", [{**base, "expect": {"ast": [{"f": {"n": [1, 2]}}]}}]).cases
    with pytest.raises(BenchError) as err:
        load_cases("s", [{**base, "expect": {"ast": [{"f": {"n": ["one"]}}]}}])
    assert err.value.where == "cases[0].expect.ast[0].f.n"


def test_unconstrained_mode_sends_auto_and_no_response_format() -> None:
    suite = load_suite("standard")
    named = next(c for c in suite.cases if isinstance(c.tool_choice, dict))
    as_json = next(c for c in suite.cases if c.kind == "json")
    body = payload(named, "m", named.messages, 0.0, False, unconstrained=True)
    assert body["tool_choice"] == "auto" and body["tools"] == named.tools
    assert payload(named, "m", named.messages, 0.0, False)["tool_choice"] == named.tool_choice
    assert "response_format" not in payload(as_json, "m", as_json.messages, 0.0, False,
                                            unconstrained=True)
    assert "raw-vllm-unconstrained" in SPAWN_KINDS
