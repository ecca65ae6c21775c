"""Is a tool-call answer *right*: AST match of the calls against a ground truth, as BFCL does.

Ground truth (the Berkeley Function Calling Leaderboard's shape, ``possible_answer``): a list of
expected calls, each ``{function_name: {param: [allowed values, ...]}}``. An empty list means
that no offered function fits (category ``irrelevance``): the right answer is no call.

``score(truth, calls, schemas, finish) -> AstResult(ok, reason)``; ``calls`` are
``[{"name": str, "arguments": str}]`` as the endpoint returned them (arguments are parsed here,
strict JSON), ``schemas`` maps each offered function name to its JSON Schema ``parameters``.

Rules (after ``ast_checker.py`` in gorilla-llm/gorilla, berkeley-function-call-leaderboard):

1. **Count**: as many calls as expected calls (``wrong_count``); an irrelevance case is right
   iff there is no call at all (any call: ``call_on_irrelevance``); a text answer where calls
   were expected is ``no_call``. An answer cut by ``max_tokens`` (``finish_reason`` length)
   with calls expected is ``truncated`` (an irrelevance answer cut while writing text is
   still no call, so still right).
2. **Matching**: calls are matched to expected calls as a multiset, regardless of order (a
   maximum bipartite matching, so two calls to the same function cannot both claim one
   expected call); the first unmatched expected call names the reason below.
3. **Function name**: equal, case-sensitive (``wrong_function``).
4. **Arguments**: a JSON object (``bad_arguments``); every parameter ``required`` by the
   schema present (``missing_required``); no parameter outside the schema's ``properties`` or
   absent from the ground truth (``unexpected_param``); a ground-truth parameter whose allowed
   list lacks ``""`` must be present (``missing_optional``: an optional argument whose value
   matters), one with ``""`` in its list may be omitted.
5. **Types** (``type_error``), by the parameter schema's ``type``: ``integer`` takes a JSON
   integer only (``5.0`` and ``true`` are not integers); ``number`` takes an integer or a
   float (BFCL's int-to-float acceptance for Python); ``boolean`` only ``true``/``false``;
   ``string``, ``array`` and ``object`` their JSON kind. A schema without ``type`` takes any.
6. **Values** (``value_error``): the value must equal one of the allowed values, where:
   numbers compare by value (``80 == 80.0``); strings are normalised as BFCL does, removing
   spaces and the punctuation ``, . / - _ * ^``, folding case, and reading ``'`` as ``"``
   (``"New York"`` = ``"new-york"``; ``"NYC"`` ≠ ``"New York"``: list both if both are
   right); lists compare element by element **in order** (BFCL's list rule: list the other
   orders when order does not matter); an object compares key by key against a nested
   ground truth ``{key: [allowed values]}`` (a key with ``""`` allowed may be missing, no
   other key may appear).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

REASONS = ("wrong_count", "call_on_irrelevance", "no_call", "truncated", "wrong_function",
           "bad_arguments", "missing_required", "unexpected_param", "missing_optional",
           "type_error", "value_error")
_PUNCT = re.compile(r"[ ,./\-_*^]")
OPTIONAL = ""  # in an allowed-values list: the parameter may be omitted


@dataclass(frozen=True)
class AstResult:
    ok: bool
    reason: str | None  # one of REASONS when not ok
    detail: str | None = None  # the function / parameter concerned


def normalise(text: str) -> str:
    """BFCL's string standardisation: drop spaces and ``,./-_*^``, lower-case, ``'`` → ``"``."""
    return _PUNCT.sub("", text).lower().replace("'", '"')


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def type_ok(value: Any, schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    if kind is None:
        return True
    kinds = kind if isinstance(kind, list) else [kind]
    return any(_kind_ok(value, k) for k in kinds)


def _kind_ok(value: Any, kind: Any) -> bool:
    if kind == "integer":
        return _is_int(value)
    if kind == "number":
        return _is_int(value) or isinstance(value, float)
    python = {"boolean": bool, "string": str, "array": list, "object": dict,
              "null": type(None)}.get(kind)
    return python is not None and isinstance(value, python)


def value_equal(actual: Any, allowed: Any) -> bool:
    """``actual`` equals one allowed value under the rules of the module docstring."""
    if isinstance(allowed, bool) or isinstance(actual, bool):
        return isinstance(allowed, bool) and isinstance(actual, bool) and actual is allowed
    if isinstance(allowed, int | float):
        return isinstance(actual, int | float) and float(actual) == float(allowed)
    if isinstance(allowed, str):
        return isinstance(actual, str) and normalise(actual) == normalise(allowed)
    if isinstance(allowed, list):
        return (isinstance(actual, list) and len(actual) == len(allowed)
                and all(value_equal(a, b) for a, b in zip(actual, allowed, strict=True)))
    if isinstance(allowed, dict):
        if not isinstance(actual, dict) or set(actual) - set(allowed):
            return False
        for key, want in allowed.items():
            options = want if isinstance(want, list) else [want]
            if key not in actual:
                if OPTIONAL not in options:
                    return False
                continue
            if not any(value_equal(actual[key], o) for o in options if o != OPTIONAL):
                return False
        return True
    return bool(actual == allowed)


def _parse(arguments: Any) -> dict[str, Any] | None:
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str):
        return None
    try:
        value = json.loads(arguments, parse_constant=_refuse)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _refuse(name: str) -> Any:
    raise ValueError(name)


def match_call(expected: dict[str, dict[str, list[Any]]], name: Any, arguments: Any,
               schemas: dict[str, dict[str, Any]]) -> AstResult:
    """One call against one expected call ``{function: {param: [allowed]}}``."""
    (want_name, want_args), = expected.items()
    if name != want_name:
        return AstResult(False, "wrong_function", f"{name} instead of {want_name}")
    args = _parse(arguments)
    if args is None:
        return AstResult(False, "bad_arguments", want_name)
    schema = schemas.get(want_name, {})
    props: dict[str, Any] = schema.get("properties", {})
    for param in schema.get("required", []):
        if param not in args:
            return AstResult(False, "missing_required", f"{want_name}.{param}")
    for param, value in args.items():
        if param not in props or param not in want_args:
            return AstResult(False, "unexpected_param", f"{want_name}.{param}")
        if not type_ok(value, props[param]):
            return AstResult(False, "type_error", f"{want_name}.{param}")
        if not any(value_equal(value, a) for a in want_args[param] if a != OPTIONAL):
            return AstResult(False, "value_error", f"{want_name}.{param}={value!r}")
    for param, allowed in want_args.items():
        if param not in args and OPTIONAL not in allowed:
            return AstResult(False, "missing_optional", f"{want_name}.{param}")
    return AstResult(True, None)


def _matching(ok: list[list[bool]]) -> list[int]:
    """Maximum bipartite matching: ``ok[i][j]`` expected call i may take call j. Returns, per
    expected call, the call it took or -1 (Kuhn's augmenting paths; sizes are tiny)."""
    owner: dict[int, int] = {}

    def augment(i: int, seen: set[int]) -> bool:
        for j, fits in enumerate(ok[i]):
            if fits and j not in seen:
                seen.add(j)
                if j not in owner or augment(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    for i in range(len(ok)):
        augment(i, set())
    taken = {i: j for j, i in owner.items()}
    return [taken.get(i, -1) for i in range(len(ok))]


def score(truth: list[dict[str, dict[str, list[Any]]]], calls: list[dict[str, Any]],
          schemas: dict[str, dict[str, Any]], finish: str | None = None) -> AstResult:
    """The answer's ``calls`` against ``truth`` (rules in the module docstring)."""
    if not truth:
        return AstResult(not calls, "call_on_irrelevance" if calls else None,
                         str(calls[0].get("name")) if calls else None)
    if finish == "length":
        return AstResult(False, "truncated")
    if not calls:
        return AstResult(False, "no_call")
    if len(calls) != len(truth):
        return AstResult(False, "wrong_count", f"{len(calls)} calls, {len(truth)} expected")
    results = [[match_call(t, c.get("name"), c.get("arguments"), schemas) for c in calls]
               for t in truth]
    assignment = _matching([[r.ok for r in row] for row in results])
    for i, j in enumerate(assignment):
        if j < 0:
            row = results[i]
            want = next(iter(truth[i]))
            # the most telling failure: against a call to the same function, if any
            same = [r for r, c in zip(row, calls, strict=True) if c.get("name") == want]
            return same[0] if same else row[0]
    return AstResult(True, None)
