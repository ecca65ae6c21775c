"""Suite loading: ``load_suite(NAME|FILE) -> Suite``, every field checked before a request.

A suite file is JSON ``{"name": str, "cases": [case, ...]}``; the case shape is documented in
``appliance.toolbench.suites``. Errors are ``BenchError`` ``suite_invalid`` naming the field
(``cases[3].tool_choice``) and the fix.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from appliance.toolbench.errors import BenchError
from appliance.toolbench.expected import (
    ACCURACY_SUITES,
    accuracy_cases,
    check_ground_truth,
    parse_accuracy,
)
from appliance.toolbench.suites import BUILTIN_SUITES

KINDS = ("tool", "json", "chain")
MAX_STEPS = 200


@dataclass(frozen=True)
class Case:
    """One task. ``tool_parameters`` maps each offered function name to its schema."""

    id: str
    kind: str
    messages: list[dict[str, Any]]
    max_tokens: int
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    expect: dict[str, Any] = field(default_factory=dict)
    steps: int = 1
    window: int = 2
    category: str | None = None  # accuracy suites: simple, multiple, parallel, irrelevance

    @property
    def tool_parameters(self) -> dict[str, dict[str, Any]]:
        return {t["function"]["name"]: t["function"].get("parameters", {}) for t in self.tools}

    @property
    def named_tool(self) -> str | None:
        if isinstance(self.tool_choice, dict):
            return str(self.tool_choice["function"]["name"])
        return None

    @property
    def response_schema(self) -> dict[str, Any] | None:
        if self.response_format is None:
            return None
        schema: dict[str, Any] = self.response_format["json_schema"]["schema"]
        return schema


@dataclass(frozen=True)
class Suite:
    name: str
    cases: list[Case]
    sha256: str  # of the canonical JSON of the cases, so reports name exactly what ran

    @property
    def requests_per_repeat(self) -> int:
        return sum(c.steps for c in self.cases)


def _bad(where: str, message: str, fix: str) -> BenchError:
    return BenchError(message, code="suite_invalid", where=where, fix=fix)


def _check_schema(schema: Any, where: str) -> None:
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise _bad(where, f"not a JSON Schema: {exc.message}", "fix the schema") from None


def _case(raw: Any, where: str) -> Case:
    if not isinstance(raw, dict):
        raise _bad(where, "a case must be a JSON object", "see appliance/toolbench/suites.py")
    known = {"id", "kind", "messages", "max_tokens", "tools", "tool_choice",
             "parallel_tool_calls", "response_format", "expect", "steps", "window",
             "category"}
    extra = sorted(set(raw) - known)
    if extra:
        raise _bad(f"{where}.{extra[0]}", "unknown field", f"use only: {', '.join(sorted(known))}")
    cid, kind = raw.get("id"), raw.get("kind")
    if not isinstance(cid, str) or not cid:
        raise _bad(f"{where}.id", "id must be a non-empty string", "name the case")
    if kind not in KINDS:
        raise _bad(f"{where}.kind", f"kind {kind!r} is not one of {KINDS}", "pick a kind")
    messages = raw.get("messages")
    if (not isinstance(messages, list) or not messages
            or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages)):
        raise _bad(f"{where}.messages", "messages must be a non-empty list of {role, content}",
                   "give at least one user message")
    max_tokens = raw.get("max_tokens", 128)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not 1 <= max_tokens:
        raise _bad(f"{where}.max_tokens", "max_tokens must be a positive integer", "e.g. 128")
    tools = raw.get("tools", [])
    if not isinstance(tools, list):
        raise _bad(f"{where}.tools", "tools must be a list", "OpenAI tools array")
    names: set[str] = set()
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise _bad(f"{where}.tools[{i}]", "a tool is {type: function, function: {name, "
                       "parameters}}", "OpenAI tool shape")
        _check_schema(fn.get("parameters", {}), f"{where}.tools[{i}].function.parameters")
        names.add(fn["name"])
    choice = raw.get("tool_choice")
    if kind in ("tool", "chain"):
        if not tools:
            raise _bad(f"{where}.tools", f"a {kind} case needs tools", "add a tool")
        named = (choice.get("function", {}).get("name") if isinstance(choice, dict) else None)
        if choice not in ("required", "auto") and named not in names:
            raise _bad(f"{where}.tool_choice", "tool_choice must be \"required\", \"auto\" or "
                       "{type: function, function: {name}} naming an offered tool",
                       "fix tool_choice")
    response_format = raw.get("response_format")
    if kind == "json":
        spec = response_format.get("json_schema") if isinstance(response_format, dict) else None
        if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
            raise _bad(f"{where}.response_format", "a json case needs response_format "
                       "{type: json_schema, json_schema: {name, schema}}", "add the schema")
        _check_schema(spec["schema"], f"{where}.response_format.json_schema.schema")
    expect = raw.get("expect", {})
    if not isinstance(expect, dict):
        raise _bad(f"{where}.expect", "expect must be an object", "see suites.py")
    if "ast" in expect:
        if kind != "tool":
            raise _bad(f"{where}.expect.ast", "only tool cases have an AST ground truth",
                       "use kind tool")
        check_ground_truth(expect["ast"], {t["function"]["name"]: t["function"].get(
            "parameters", {}) for t in tools}, f"{where}.expect.ast")
    category = raw.get("category")
    if category is not None and (not isinstance(category, str) or not category):
        raise _bad(f"{where}.category", "category must be a non-empty string",
                   "e.g. simple, multiple, parallel, irrelevance")
    steps, window = raw.get("steps", 1), raw.get("window", 2)
    for key, value, top in (("steps", steps, MAX_STEPS), ("window", window, 50)):
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= top:
            raise _bad(f"{where}.{key}", f"{key} must be an integer in 1..{top}", "fix it")
    if kind != "chain" and steps != 1:
        raise _bad(f"{where}.steps", "only chain cases have steps", "use kind chain")
    if kind == "chain" and len(tools) != 1:
        raise _bad(f"{where}.tools", "a chain case offers exactly one tool", "keep one tool")
    if kind == "chain" and "step" not in tools[0]["function"].get("parameters", {}).get(
            "properties", {}):
        raise _bad(f"{where}.tools[0].function.parameters", "a chain's tool takes an integer "
                   "'step' (the known answer of each call)", "add a 'step' property")
    parallel = raw.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise _bad(f"{where}.parallel_tool_calls", "must be a boolean", "true or false")
    return Case(id=cid, kind=kind, messages=messages, max_tokens=max_tokens, tools=tools,
                tool_choice=choice, parallel_tool_calls=parallel,
                response_format=response_format if kind == "json" else None, expect=expect,
                steps=steps, window=window, category=category)


def load_cases(name: str, raw_cases: Any, where: str = "cases") -> Suite:
    if not isinstance(raw_cases, list) or not raw_cases:
        raise _bad(where, "cases must be a non-empty list", "add at least one case")
    cases = [_case(raw, f"{where}[{i}]") for i, raw in enumerate(raw_cases)]
    ids = [c.id for c in cases]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise _bad(where, f"duplicate case id {dup[0]!r}", "give every case its own id")
    canonical = json.dumps(raw_cases, sort_keys=True, separators=(",", ":"))
    return Suite(name=name, cases=cases, sha256=hashlib.sha256(canonical.encode()).hexdigest())


def load_suite(spec: str) -> Suite:
    """A built-in suite by name, else a JSON file ``{"name", "cases"}`` (or an accuracy file
    ``{"name", "schema_version", "functions", "cases"}``: :mod:`appliance.toolbench.expected`)."""
    if spec in BUILTIN_SUITES:
        return load_cases(spec, BUILTIN_SUITES[spec])
    if spec in ACCURACY_SUITES:
        return load_cases(spec, accuracy_cases(spec))
    path = Path(spec)
    if not path.is_file():
        raise BenchError(f"no built-in suite {spec!r} and no such file",
                         code="suite_invalid", where=spec,
                         fix=f"use one of {', '.join(sorted([*BUILTIN_SUITES, *ACCURACY_SUITES]))}"
                             " or a JSON file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BenchError(f"cannot read suite file: {exc}", code="suite_invalid",
                         where=str(path), fix="pass a UTF-8 JSON file") from None
    if not isinstance(data, dict) or not isinstance(data.get("name", path.stem), str):
        raise BenchError("a suite file is {\"name\": str, \"cases\": [...]}",
                         code="suite_invalid", where=str(path), fix="wrap the cases")
    if "functions" in data:
        name, acc = parse_accuracy(data, str(path))
        return load_cases(name, [c.suite_case() for c in acc], where=f"{path}:cases")
    return load_cases(str(data.get("name", path.stem)), data.get("cases"),
                      where=f"{path}:cases")
