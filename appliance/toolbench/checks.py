"""Judging one answer: ``judge(case, body, step) -> Verdict``.

``body`` is the parsed JSON of an HTTP 200 chat completion. Two levels:

- **valid** (what an agent needs to proceed; what the appliance guarantees): the answer is
  complete (``finish_reason`` not ``length``), every tool call names an offered function
  (the named one for a named ``tool_choice``), its ``arguments`` are strict JSON (no duplicate
  keys, no NaN) forming an object valid against the function's ``parameters`` (jsonschema,
  draft 2020-12), ``required``/named choices got at least one call, ``parallel_tool_calls``
  false got at most one; a ``json`` case's content is strict JSON valid against its schema.
- **correct** (model quality, where the answer is known): valid, and the calls (names and the
  listed subset of arguments; strings compared case-insensitively) or the JSON content match
  ``expect``. ``None`` where the case has no known answer.
- **accurate** (cases with ``expect.ast``, the accuracy suites): ``correct`` is the AST match
  of :mod:`appliance.toolbench.ast_match` (BFCL's rules), which judges the calls themselves,
  not their validity; ``ast_reason`` names its failure (``wrong_function``, ``value_error``,
  ``call_on_irrelevance`` ...).

``reason`` names the first failure: ``truncated``, ``missing_call``, ``unknown_function``,
``wrong_function``, ``bad_json``, ``not_object``, ``schema_mismatch``, ``parallel_disabled``,
``no_content``. A body that is not a chat completion at all raises ``GarbageAnswer``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator

from appliance.gateway.schema.subset import FORMAT_CHECKER
from appliance.toolbench import ast_match
from appliance.toolbench.suite import Case

_VALIDATORS: dict[str, Draft202012Validator] = {}


class GarbageAnswer(ValueError):
    """HTTP 200 but not an OpenAI chat completion (message says which field is wrong)."""


@dataclass
class Verdict:
    valid: bool
    reason: str | None
    correct: bool | None
    finish_reason: str | None
    calls: list[dict[str, Any]] = field(default_factory=list)  # [{id, name, arguments(str)}]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ast_reason: str | None = None  # why an expect.ast case is not accurate (ast_match)


def _validator(schema: dict[str, Any]) -> Draft202012Validator:
    key = json.dumps(schema, sort_keys=True)
    if key not in _VALIDATORS:
        # formats checked as the gateway checks them, by the same checker (a "date" of
        # 2018-02-31 is invalid; date-time etc. need jsonschema's format-nongpl extra)
        _VALIDATORS[key] = Draft202012Validator(schema, format_checker=FORMAT_CHECKER)
    return _VALIDATORS[key]


def _no_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def loads_strict(text: str) -> Any:
    """``json.loads`` refusing duplicate keys and NaN/Infinity (ValueError)."""
    return json.loads(text, object_pairs_hook=_pairs, parse_constant=_no_constant)


def matches(expected: Any, actual: Any) -> bool:
    """True when ``actual`` contains ``expected``: dict keys recursively (extra keys allowed),
    lists element-wise with equal length, strings case-insensitively, numbers by value."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            k in actual and matches(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return (isinstance(actual, list) and len(actual) == len(expected)
                and all(matches(e, a) for e, a in zip(expected, actual, strict=True)))
    if isinstance(expected, str):
        return isinstance(actual, str) and actual.strip().casefold() == expected.casefold()
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    if isinstance(expected, int | float):
        return isinstance(actual, int | float) and float(actual) == float(expected)
    return bool(expected == actual)


def usage_of(body: dict[str, Any]) -> tuple[int, int]:
    usage = body.get("usage")
    if not isinstance(usage, dict):
        return 0, 0
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (prompt if isinstance(prompt, int) else 0,
            completion if isinstance(completion, int) else 0)


def message_of(body: Any) -> tuple[dict[str, Any], str | None]:
    if not isinstance(body, dict):
        raise GarbageAnswer("the answer is not a JSON object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise GarbageAnswer("the answer has no choices[0]")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise GarbageAnswer("the answer has no choices[0].message")
    finish = choices[0].get("finish_reason")
    return message, finish if isinstance(finish, str) else None


def _calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    raw = message.get("tool_calls") or []
    if not isinstance(raw, list):
        raise GarbageAnswer("choices[0].message.tool_calls is not a list")
    out = []
    for i, call in enumerate(raw):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict):
            raise GarbageAnswer(f"choices[0].message.tool_calls[{i}] has no function")
        out.append({"id": call.get("id") or f"call_{i}", "name": fn.get("name"),
                    "arguments": fn.get("arguments")})
    return out


def _expected_calls_match(expected: list[dict[str, Any]], calls: list[dict[str, Any]],
                          parsed: list[Any]) -> bool:
    if len(expected) != len(calls):
        return False
    free = list(range(len(calls)))
    for want in expected:  # greedy matching: each expected call takes one distinct actual call
        hit = next((i for i in free if calls[i]["name"] == want.get("name")
                    and matches(want.get("arguments", {}), parsed[i])), None)
        if hit is None:
            return False
        free.remove(hit)
    return True


def judge_tools(case: Case, message: dict[str, Any], finish: str | None,
                expect: dict[str, Any]) -> tuple[bool, str | None, bool | None,
                                                 list[dict[str, Any]]]:
    calls = _calls(message)
    if finish == "length":
        return False, "truncated", False, calls
    if not calls and (case.tool_choice == "required" or case.named_tool is not None):
        return False, "missing_call", False, calls
    if case.parallel_tool_calls is False and len(calls) > 1:
        return False, "parallel_disabled", False, calls
    params = case.tool_parameters
    parsed: list[Any] = []
    for call in calls:
        if call["name"] not in params:
            return False, "unknown_function", False, calls
        if case.named_tool is not None and call["name"] != case.named_tool:
            return False, "wrong_function", False, calls
        try:
            args = loads_strict(call["arguments"]) if isinstance(call["arguments"], str) \
                else None
        except ValueError:
            return False, "bad_json", False, calls
        if not isinstance(args, dict):
            return False, "not_object", False, calls
        if not _validator(params[call["name"]]).is_valid(args):
            return False, "schema_mismatch", False, calls
        parsed.append(args)
    if expect.get("no_call"):
        return True, None, not calls, calls
    if "calls" in expect:
        return True, None, _expected_calls_match(expect["calls"], calls, parsed), calls
    return True, None, None, calls


def judge_json(case: Case, message: dict[str, Any], finish: str | None,
               expect: dict[str, Any]) -> tuple[bool, str | None, bool | None]:
    if finish == "length":
        return False, "truncated", False
    content = message.get("content")
    if not isinstance(content, str) or not content.strip():
        return False, "no_content", False
    try:
        value = loads_strict(content)
    except ValueError:
        return False, "bad_json", False
    schema = case.response_schema or {}
    if not _validator(schema).is_valid(value):
        return False, "schema_mismatch", False
    if "content" in expect:
        return True, None, matches(expect["content"], value)
    return True, None, None


def judge(case: Case, body: Any, step: int = 1) -> Verdict:
    """Judge one 200 answer to ``case`` (``step`` counts from 1 in a chain, whose expected
    call is ``{name: <its tool>, arguments: {"step": step}}``)."""
    message, finish = message_of(body)
    prompt, completion = usage_of(body)
    if case.kind == "json":
        valid, reason, correct = judge_json(case, message, finish, case.expect)
        return Verdict(valid, reason, correct, finish, [], prompt, completion)
    expect = case.expect
    if case.kind == "chain":
        name = case.tools[0]["function"]["name"]
        expect = {"calls": [{"name": name, "arguments": {"step": step}}]}
    valid, reason, correct, calls = judge_tools(case, message, finish, expect)
    if "ast" in expect:
        result = ast_match.score(expect["ast"], calls, case.tool_parameters, finish)
        return Verdict(valid, reason, result.ok, finish, calls, prompt, completion,
                       result.reason)
    return Verdict(valid, reason, correct, finish, calls, prompt, completion)
