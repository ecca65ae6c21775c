"""Expected-call suites: BFCL-shaped accuracy data shipped in the package, loaded and checked.

A data file (``appliance/toolbench/data/accuracy.json``, or any file of the same shape) is::

    {"name": str, "schema_version": 1, "system": str (optional: the system message of every case),
     "functions": [{"name", "description", "parameters": JSON Schema}, ...],
     "cases": [{"id": str, "category": "simple"|"multiple"|"parallel"|"irrelevance",
                "domain": str, "question": str, "functions": [function name, ...],
                "ground_truth": [{function: {param: [allowed values]}}, ...],
                "max_tokens": int}]}

``ground_truth`` is scored by :mod:`appliance.toolbench.ast_match` (``""`` in an allowed list:
the parameter may be omitted); it is empty exactly for ``irrelevance``, one call for
``simple`` and ``multiple`` (``multiple`` offers several functions), one or more for
``parallel``. Every case offers its functions as OpenAI tools with ``tool_choice: "auto"``
(as BFCL prompts: the model may answer in text, which is right only for ``irrelevance``);
``parallel`` cases add ``parallel_tool_calls: true``. The shipped file's ``system`` message says
what BFCL's prompt says: call the functions that fit, or answer in text when none does.

``accuracy_cases(name) -> [case dict]`` gives the built-in suites in the shape
``appliance.toolbench.suite.load_cases`` reads (``kind: "tool"``, ``category``,
``expect: {"ast": ground_truth}``): ``accuracy`` (every case) and ``accuracy-mini`` (every
4th case of each category: a stratified quarter for quick runs), their cases in round-robin
order over the categories (simple, multiple, parallel, irrelevance, simple, ...), so that a
run stopped early has answers of every category.
``load_accuracy_file(path)`` reads another data file. Errors are ``BenchError``
``suite_invalid`` naming the field (``cases[12].ground_truth[0].get_weather.unit``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from appliance.toolbench.errors import BenchError

CATEGORIES = ("simple", "multiple", "parallel", "irrelevance")
ACCURACY_SUITES = ("accuracy", "accuracy-mini")
MINI_STRIDE = 4

GroundTruth = list[dict[str, dict[str, list[Any]]]]


@dataclass(frozen=True)
class AccuracyCase:
    id: str
    category: str
    domain: str
    question: str
    functions: list[dict[str, Any]]  # OpenAI function objects {name, description, parameters}
    ground_truth: GroundTruth
    max_tokens: int
    system: str | None = None

    def suite_case(self) -> dict[str, Any]:
        """This case in the suite shape (``appliance.toolbench.suites``)."""
        case: dict[str, Any] = {
            "id": self.id, "kind": "tool", "category": self.category,
            "messages": ([{"role": "system", "content": self.system}] if self.system else [])
            + [{"role": "user", "content": self.question}],
            "tools": [{"type": "function", "function": f} for f in self.functions],
            "tool_choice": "auto", "max_tokens": self.max_tokens,
            "expect": {"ast": self.ground_truth},
        }
        if self.category == "parallel":
            case["parallel_tool_calls"] = True
        return case


def _bad(where: str, message: str, fix: str) -> BenchError:
    return BenchError(message, code="suite_invalid", where=where, fix=fix)


def check_ground_truth(truth: Any, schemas: dict[str, dict[str, Any]], where: str) -> GroundTruth:
    """``truth`` is a list of ``{offered function: {param: [allowed values]}}`` whose params
    are in the schema, whose required params are never optional, and whose allowed values
    (other than ``""``) are valid against the parameter's schema."""
    if not isinstance(truth, list):
        raise _bad(where, "ground truth must be a list of expected calls", "use [] for no call")
    for i, call in enumerate(truth):
        at = f"{where}[{i}]"
        if not isinstance(call, dict) or len(call) != 1:
            raise _bad(at, "an expected call is {function: {param: [allowed values]}}",
                       "one function name per expected call")
        (name, args), = call.items()
        if name not in schemas:
            raise _bad(f"{at}.{name}", "the expected function is not offered",
                       f"offer it or use one of: {', '.join(sorted(schemas))}")
        schema = schemas[name]
        props = schema.get("properties", {})
        if not isinstance(args, dict):
            raise _bad(f"{at}.{name}", "arguments must map each param to allowed values",
                       "e.g. {\"city\": [\"Paris\"]}")
        for param, allowed in args.items():
            if param not in props:
                raise _bad(f"{at}.{name}.{param}", "not a parameter of the function",
                           f"use one of: {', '.join(sorted(props))}")
            if not isinstance(allowed, list) or not allowed:
                raise _bad(f"{at}.{name}.{param}", "allowed values must be a non-empty list",
                           "e.g. [\"c\", \"\"] (\"\" = may be omitted)")
            validator = Draft202012Validator(props[param])
            for value in allowed:
                if value != "" and not validator.is_valid(value):
                    raise _bad(f"{at}.{name}.{param}", f"allowed value {value!r} is not valid "
                               "against the parameter's schema", "fix the value or schema")
        for param in schema.get("required", []):
            if param not in args or "" in args[param]:
                raise _bad(f"{at}.{name}.{param}", "a required parameter must have allowed "
                           "values and cannot be optional (\"\")", "list its right values")
    return truth


def _case(raw: Any, functions: dict[str, dict[str, Any]], where: str) -> AccuracyCase:
    if not isinstance(raw, dict):
        raise _bad(where, "a case must be a JSON object", "see appliance/toolbench/expected.py")
    known = {"id", "category", "domain", "question", "functions", "ground_truth", "max_tokens"}
    extra = sorted(set(raw) - known)
    if extra:
        raise _bad(f"{where}.{extra[0]}", "unknown field", f"use only: {', '.join(sorted(known))}")
    for key in ("id", "domain", "question"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise _bad(f"{where}.{key}", f"{key} must be a non-empty string", "fill it in")
    category = raw.get("category")
    if category not in CATEGORIES:
        raise _bad(f"{where}.category", f"category {category!r} is not one of {CATEGORIES}",
                   "pick a category")
    names = raw.get("functions")
    if not isinstance(names, list) or not names or not all(n in functions for n in names):
        raise _bad(f"{where}.functions", "functions must list offered function names defined "
                   "in the file's functions", f"use names from: {', '.join(sorted(functions))}")
    schemas = {n: functions[n]["parameters"] for n in names}
    truth = check_ground_truth(raw.get("ground_truth"), schemas, f"{where}.ground_truth")
    count = len(truth)
    if (category == "irrelevance") != (count == 0) or (
            category in ("simple", "multiple") and count != 1):
        raise _bad(f"{where}.ground_truth", f"a {category} case cannot expect {count} calls",
                   "irrelevance: []; simple/multiple: one call; parallel: one or more")
    if category == "multiple" and len(names) < 2:
        raise _bad(f"{where}.functions", "a multiple case offers several functions", "add some")
    max_tokens = raw.get("max_tokens", 128)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise _bad(f"{where}.max_tokens", "max_tokens must be a positive integer", "e.g. 128")
    return AccuracyCase(raw["id"], category, raw["domain"], raw["question"],
                        [functions[n] for n in names], truth, max_tokens)


def interleaved(cases: list[AccuracyCase]) -> list[AccuracyCase]:
    """Round-robin over the categories (in ``CATEGORIES`` order), each category's order kept."""
    queues = [[c for c in cases if c.category == cat] for cat in CATEGORIES]
    out: list[AccuracyCase] = []
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def parse_accuracy(data: Any, where: str) -> tuple[str, list[AccuracyCase]]:
    """(name, cases) of a parsed data file; ``BenchError`` ``suite_invalid`` on any defect."""
    if not isinstance(data, dict) or data.get("schema_version") != 1:
        raise _bad(where, "an accuracy file is {name, schema_version: 1, functions, cases}",
                   "see appliance/toolbench/expected.py")
    functions: dict[str, dict[str, Any]] = {}
    for i, fn in enumerate(data.get("functions") or []):
        at = f"{where}:functions[{i}]"
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not isinstance(
                fn.get("parameters"), dict):
            raise _bad(at, "a function is {name, description, parameters}", "OpenAI shape")
        try:
            Draft202012Validator.check_schema(fn["parameters"])
        except SchemaError as exc:
            raise _bad(f"{at}.parameters", f"not a JSON Schema: {exc.message}", "fix it") \
                from None
        functions[fn["name"]] = fn
    raw_cases = data.get("cases")
    if not isinstance(raw_cases, list) or not raw_cases:
        raise _bad(f"{where}:cases", "cases must be a non-empty list", "add cases")
    system = data.get("system")
    if system is not None and (not isinstance(system, str) or not system):
        raise _bad(f"{where}:system", "system must be a non-empty string", "or leave it out")
    cases = [_case(raw, functions, f"{where}:cases[{i}]") for i, raw in enumerate(raw_cases)]
    cases = [AccuracyCase(c.id, c.category, c.domain, c.question, c.functions, c.ground_truth,
                          c.max_tokens, system) for c in cases]
    seen: set[str] = set()
    for c in cases:
        if c.id in seen:
            raise _bad(f"{where}:cases", f"duplicate case id {c.id!r}", "rename one")
        seen.add(c.id)
    name = data.get("name")
    return (name if isinstance(name, str) and name else "accuracy"), cases


def load_accuracy_file(path: Path) -> tuple[str, list[AccuracyCase]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _bad(str(path), f"cannot read the accuracy file: {exc}", "pass UTF-8 JSON") \
            from None
    return parse_accuracy(data, str(path))


def builtin_accuracy() -> list[AccuracyCase]:
    """The shipped cases (``appliance/toolbench/data/accuracy.json``)."""
    text = resources.files("appliance.toolbench").joinpath("data/accuracy.json").read_text(
        encoding="utf-8")
    return parse_accuracy(json.loads(text), "appliance/toolbench/data/accuracy.json")[1]


def stratified(cases: list[AccuracyCase], stride: int) -> list[AccuracyCase]:
    """Every ``stride``-th case of each category (the first included), order kept."""
    seen: dict[str, int] = {}
    out = []
    for c in cases:
        k = seen.get(c.category, 0)
        seen[c.category] = k + 1
        if k % stride == 0:
            out.append(c)
    return out


def accuracy_cases(name: str) -> list[dict[str, Any]]:
    """A built-in accuracy suite (``ACCURACY_SUITES``) as suite case dicts."""
    cases = builtin_accuracy()
    if name == "accuracy-mini":
        cases = stratified(cases, MINI_STRIDE)
    return [c.suite_case() for c in interleaved(cases)]
