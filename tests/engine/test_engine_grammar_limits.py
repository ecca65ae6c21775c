"""Unit tests for appliance.gateway.schema.grammar_limits (gateway pre-limits, error code
schema_too_complex).

Public bug: regex-dfa-blowup (GHSA-rwxx-mrjm-wc2m / CVE-2026-55574, vllm PR#45172).
"""

from __future__ import annotations

import contextlib
import re
import re._parser as sre_parse
from collections.abc import Iterator
from typing import Any

import pytest
from _shared import regex_dfa_blowup_bodies
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.gateway.schema import grammar_limits as gl
from appliance.gateway.schema.grammar_limits import (
    DEFAULT_LIMITS,
    ERROR_CODE,
    GrammarLimits,
    _Group,
    _Leaf,
    _parse,
    _Repeat,
    check_pattern,
    check_schema_complexity,
)

PTR = "/properties/s/pattern"
# Work bound of the structure scan, counted instead of timed: calls of _Scan.scan, .width and
# .has_unbounded (memoised, one visit per parse node) per pattern character; measured <= 5.
STEPS_PER_CHAR = 8


@contextlib.contextmanager
def _counted_scan() -> Iterator[list[int]]:
    """Count the structure scan's steps while the block runs (no fixture: hypothesis)."""
    steps = [0]
    saved = {name: getattr(gl._Scan, name) for name in ("scan", "width", "has_unbounded")}

    def counting(real: Any) -> Any:
        def step(self: Any, *args: Any) -> Any:
            steps[0] += 1
            return real(self, *args)
        return step

    for name, real in saved.items():
        setattr(gl._Scan, name, counting(real))
    try:
        yield steps
    finally:
        for name, real in saved.items():
            setattr(gl._Scan, name, real)
# re warns about "[[" and friends (possible future set syntax); such patterns are still valid.
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")





def body_schemas(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every schema in a chat body that reaches the grammar compiler."""
    out = []
    if "response_format" in body:
        out.append(body["response_format"]["json_schema"]["schema"])
    out.extend(tool["function"]["parameters"] for tool in body.get("tools", []))
    return out


# ------------------------------------------------------------------ the public bug, its family

def test_regex_dfa_blowup_generator_bodies_are_flagged() -> None:
    bodies = regex_dfa_blowup_bodies()
    assert len(bodies) == 3
    for body in bodies:
        schemas = body_schemas(body)
        assert schemas
        for schema in schemas:
            problems = check_schema_complexity(schema)
            assert [ptr for ptr, _ in problems] == [PTR]
            assert PTR in problems[0][1]
    assert ERROR_CODE == "schema_too_complex"


@pytest.mark.parametrize("n", [17, 20, 24, 32, 40, 64, 1000])
@pytest.mark.parametrize("template", [
    "[ab]*a[ab]{%d}", "^[ab]*a[ab]{%d}$", "(a|b)*a(a|b){%d}", "[ab]+a[ab]{%d}",
    "[ab]{1,}a[ab]{%d}", ".*a.{%d}", "[ab]*a[ab]{%d,}", "[ab]*a[ab]{0,%d}", "(?:[ab]*a[ab]{%d})",
    "[ab]*?a[ab]{%d}", "[ab]*a[ab]{%d}?", "x*(?:y|[ab]*a[ab]{%d})", "(?:[ab]{%d})*",
])
def test_regex_dfa_blowup_family_is_flagged(template: str, n: int) -> None:
    message = check_pattern(template % n, PTR)
    assert message is not None and PTR in message


@pytest.mark.parametrize("n", [17, 20, 40, 60])
@pytest.mark.parametrize("atom", ["[ab]", "(?:a|b)", ".", r"\w", "[^x]"])
def test_regex_dfa_blowup_longhand_is_flagged(atom: str, n: int) -> None:
    pattern = f"{atom}*a" + atom * n
    assert len(pattern) <= DEFAULT_LIMITS.max_pattern_chars  # flagged for its shape, not length
    message = check_pattern(pattern, PTR)
    assert message is not None and "positions" in message


def test_count_cap_boundary_is_the_documented_limit() -> None:
    cap = DEFAULT_LIMITS.max_count_after_unbounded
    assert check_pattern(f"[ab]*a[ab]{{{cap}}}", PTR) is None
    assert check_pattern(f"[ab]*a[ab]{{{cap + 1}}}", PTR) is not None
    assert check_pattern("[ab]*a" + "[ab]" * (cap - 1), PTR) is None
    assert check_pattern("[ab]*a" + "[ab]" * (cap + 1), PTR) is not None
    loose = GrammarLimits(max_count_after_unbounded=64, max_positions_after_unbounded=64)
    assert check_pattern("[ab]*a[ab]{40}", PTR, limits=loose) is None


@pytest.mark.parametrize("pattern", [
    "[ab]{40}", "[ab]{40}.*", "[ab]{40,}", "^.{0,4096}$", "^[a-z]{1,200}$",
    "(?:(?:a|b){16}){16}", "a{1000}b*",
])
def test_large_counts_without_a_preceding_unbounded_repeat_are_accepted(pattern: str) -> None:
    assert check_pattern(pattern, PTR) is None


ORDINARY = [
    "^[a-z][a-z0-9_-]{0,15}$",
    r"^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}$",
    r"^[^@\s]+@[^@\s]+\.[^@\s]+$",
    r"^\d{4}-\d{2}-\d{2}$",
    r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$",
    r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
    r"^\+?[0-9 ()-]{7,20}$",
    r"^https?://[^\s/$.?#].[^\s]*$",
    r"^.*\.(jpg|jpeg|png|gif|webp)$",
    "^[a-z]+$|^foo-bar-baz-qux-a-long-literal-name$",
    "^(red|green|blue)$",
    "^[A-Z]{3}$",
    r"^v\d+\.\d+\.\d+$",
    r"\S",
    "",
]


@pytest.mark.parametrize("pattern", ORDINARY)
def test_ordinary_patterns_are_accepted(pattern: str) -> None:
    assert check_pattern(pattern, PTR) is None
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}}
    assert check_schema_complexity(schema) == []


# ------------------------------------------------------------------ the other pattern rules

def test_length_limit() -> None:
    limit = DEFAULT_LIMITS.max_pattern_chars
    assert check_pattern("a" * limit, PTR) is None
    message = check_pattern("a" * (limit + 1), PTR)
    assert message is not None and str(limit) in message and "enum" in message


def test_alternation_limit_applies_independently_of_length() -> None:
    wide = GrammarLimits(max_pattern_chars=10**6)
    branches = DEFAULT_LIMITS.max_alternation_branches

    def alt(k: int) -> str:
        return "^(" + "|".join(f"w{i:05d}" for i in range(k)) + ")$"

    assert check_pattern(alt(branches), PTR, limits=wide) is None
    message = check_pattern(alt(branches + 1), PTR, limits=wide)
    assert message is not None and "alternation" in message
    message = check_pattern(alt(5000), PTR, limits=wide)
    assert message is not None and "5000 branches" in message
    # Under the default 512-character limit, empty branches are the only way to exceed it.
    message = check_pattern("|" * 300, PTR)
    assert message is not None and "alternation" in message


@pytest.mark.parametrize("pattern", [
    "(a+)+", "(a*)*", "(a+)*$", "(?:a|b+)+", "(a+){2,}", r"^(\w+\s?)*$", "((ab)*c)+",
    "(?:x(?:a*)y){2,5}", r"^([a-z0-9]+\.)*[a-z]+$",
])
def test_nested_quantifiers_are_flagged(pattern: str) -> None:
    message = check_pattern(pattern, PTR)
    assert message is not None and "nests an unbounded repeat" in message


@pytest.mark.parametrize("pattern", ["(a+)?", "(ab)+", "(a{2,3})+", "(?:a?b?)+", "(a+)"])
def test_single_level_quantifiers_are_accepted(pattern: str) -> None:
    assert check_pattern(pattern, PTR) is None


@pytest.mark.parametrize("pattern", ["(", "[a-", "a{2,1}", "*a", "a**", r"\p{L}+", "(?<n>a)"])
def test_patterns_python_re_cannot_compile_are_flagged(pattern: str) -> None:
    message = check_pattern(pattern, PTR)
    assert message is not None and "not a valid regular expression" in message


def test_nul_verbose_flag_non_string_and_group_depth() -> None:
    assert "NUL" in (check_pattern("a\x00b", PTR) or "")
    assert "verbose" in (check_pattern("(?x) [ab]* a [ab] {40}", PTR) or "")
    assert "string" in (check_pattern(5, PTR) or "")  # type: ignore[arg-type]
    depth = DEFAULT_LIMITS.max_group_depth
    assert check_pattern("(?:" * depth + "a" + ")" * depth, PTR) is None
    message = check_pattern("(?:" * (depth + 1) + "a" + ")" * (depth + 1), PTR)
    assert message is not None and "deep" in message


@pytest.mark.parametrize("pattern", [
    r"[]a]*b[]a]{30}", "(a+)(?#c)+", "[ab]*a[ab](?#c){20}", "[ab]*a(?#(|)[ab]{20}",
    r"\x61*\x62{20}", "(?#c)a*b{20}", r"(?i:[ab])*a[ab]{20}",
    r"[ab]*+a[ab]{20}", r"(?>[ab]*)a[ab]{20}", r"(?=x)[ab]*a[ab]{20}", r"\[*a[\]]{20}",
])
def test_scanner_is_not_fooled_by_escapes_and_extensions(pattern: str) -> None:
    assert check_pattern(pattern, PTR) is not None


@pytest.mark.parametrize("pattern", [r"\{*a{20}".replace("{20}", r"\{20\}"), r"a*[{]20}",
                                     r"a*b\{20}", "a*b{,x}"])
def test_escaped_or_invalid_braces_are_literals(pattern: str) -> None:
    assert check_pattern(pattern, PTR) is None


# ------------------------------------------------------------------ schema walking

def test_schema_walk_finds_every_pattern_with_rfc6901_pointers() -> None:
    schema = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "pattern": "x*[ab]{40}"},
            "a/b~c": {"type": "string", "pattern": "(a+)+"},
            "ok": {"type": "string", "pattern": "^[a-z]+$"},
            "data": {"default": {"pattern": "(a+)+"}, "enum": [{"pattern": "(a+)+"}],
                     "patternProperties": {"(b+)+": {"type": "string"}}},
        },
        "anyOf": [{"pattern": "(c*)*"}],
        "items": [{"pattern": "(d*)*"}],
        "prefixItems": [True, {"pattern": "(e*)*"}],
        "$defs": {"n": {"pattern": "(f*)*"}},
        "definitions": {"m": {"items": {"pattern": "(g*)*"}}},
    }
    pointers = [ptr for ptr, _ in check_schema_complexity(schema)]
    assert pointers == [
        "/properties/pattern/pattern",
        "/properties/a~1b~0c/pattern",
        "/properties/data/patternProperties/(b+)+",
        "/anyOf/0/pattern",
        "/items/0/pattern",
        "/prefixItems/1/pattern",
        "/$defs/n/pattern",
        "/definitions/m/items/pattern",
    ]


def test_non_string_pattern_is_reported() -> None:
    assert check_schema_complexity({"pattern": ["a"]})[0][0] == "/pattern"


def test_node_limit() -> None:
    limit = DEFAULT_LIMITS.max_schema_nodes
    # root object + enum list + its items
    assert check_schema_complexity({"enum": list(range(limit - 2))}) == []
    problems = check_schema_complexity({"enum": list(range(limit - 1))})
    assert problems and problems[0][0] == "" and str(limit) in problems[0][1]
    problems = check_schema_complexity({"enum": [f"w{i:05d}" for i in range(5000)]})
    assert problems and problems[0][0] == ""


def nest(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return schema


def test_depth_limit() -> None:
    limit = DEFAULT_LIMITS.max_schema_depth
    assert check_schema_complexity(nest(limit - 1)) == []  # leaf "type" value at depth limit
    problems = check_schema_complexity(nest(limit))
    assert len(problems) == 1 and problems[0][0].startswith("/items/items")
    very_deep = check_schema_complexity(nest(50_000))  # iterative: no RecursionError
    assert very_deep and "deeper" in very_deep[0][1]


def test_recursive_refs_are_not_followed_and_are_accepted() -> None:
    schema = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}},
                                               "label": {"type": "string", "pattern": "^[a-z]+$"}}}
    assert check_schema_complexity(schema) == []


# ------------------------------------------------------------------ scanner vs. Python's parser

_ATOMS = ["a", "b", ".", "[ab]", "[^a]", r"\d", r"\.", r"\x41", "[]a]", r"\{", "[{]", "{", "}",
          "^", "$", r"\b", "[]{3}]", "[^]{2}]", "[(*|]", r"[\]{4}]", "(?#x{3})", "(?#(|)", "(?i)",
          r"\N{DIGIT ONE}"]
_QUANTS = ["", "", "", "*", "+", "?", "{2}", "{3,}", "{,4}", "{1,5}", "*?", "++", "{2,3}?",
           "{,}", "{x}"]


def _atom() -> st.SearchStrategy[str]:
    return st.builds(lambda a, q: a + q, st.sampled_from(_ATOMS), st.sampled_from(_QUANTS))


def _patterns(openers: list[str]) -> st.SearchStrategy[str]:
    return st.recursive(
        st.lists(_atom(), min_size=1, max_size=4).map("".join),
        lambda inner: st.builds(
            lambda opener, branches, q, tail: opener + "|".join(branches) + ")" + q + tail,
            st.sampled_from(openers),
            st.lists(inner, min_size=1, max_size=3),
            st.sampled_from(_QUANTS),
            inner,
        ),
        max_leaves=12,
    )


_Key = tuple[int, int | None, bool]
_ONE_CHAR = (sre_parse.LITERAL, sre_parse.NOT_LITERAL, sre_parse.IN, sre_parse.ANY)
_REPEATS = (sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT, sre_parse.POSSESSIVE_REPEAT)


def _sre_repeats(items: Any, out: set[_Key]) -> None:
    """(lo, hi, atom is one character) for every repeat in a ``re._parser`` tree."""
    for op, av in items:
        if op in _REPEATS:
            lo, hi, sub = av
            one = len(sub.data) == 1 and sub.data[0][0] in _ONE_CHAR
            out.add((lo, None if hi == sre_parse.MAXREPEAT else hi, one))
            _sre_repeats(sub, out)
        elif isinstance(av, tuple | list):
            for part in av:
                if isinstance(part, sre_parse.SubPattern):
                    _sre_repeats(part, out)
                elif isinstance(part, list):
                    for sub in part:
                        _sre_repeats(sub, out)
        elif isinstance(av, sre_parse.SubPattern):
            _sre_repeats(av, out)


def _our_repeats(pattern: str) -> set[_Key]:
    out: set[_Key] = set()
    todo: list[Any] = [_parse(pattern, GrammarLimits(max_group_depth=1000))]
    while todo:
        node = todo.pop()
        if isinstance(node, _Repeat):
            out.add((node.lo, node.hi, isinstance(node.atom, _Leaf)))
            todo.append(node.atom)
        elif isinstance(node, _Group):
            todo.extend(child for branch in node.branches for child in branch)
    return out


def _compare(pattern: str, with_atoms: bool) -> None:
    try:
        tree = sre_parse.parse(pattern)
    except re.error:
        return
    expected: set[_Key] = set()
    _sre_repeats(tree.data, expected)
    ours = _our_repeats(pattern)
    if not with_atoms:  # re drops (?:...) around one character, so compare bounds only
        expected = {(lo, hi, True) for lo, hi, _ in expected}
        ours = {(lo, hi, True) for lo, hi, _ in ours}
    assert ours == expected


@settings(max_examples=200, deadline=None)
@given(_patterns(["(", "(?=", "(?>", "(?i:", "(?P<g>"]))
def test_scanner_sees_the_same_repeats_as_python_re(pattern: str) -> None:
    _compare(pattern, with_atoms=True)


@settings(max_examples=150, deadline=None)
@given(_patterns(["(?:", "(?<=", "(?!", "(?#c)("]))
def test_scanner_sees_the_same_repeat_bounds_as_python_re(pattern: str) -> None:
    _compare(pattern, with_atoms=False)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab()[]{}|*+?.^$\\,:=!<>P#x0123456789-")),
               max_size=80))
def test_check_pattern_never_raises_and_is_linear(pattern: str) -> None:
    with _counted_scan() as steps:
        result = check_pattern(pattern, PTR)
    assert result is None or isinstance(result, str)
    assert steps[0] <= STEPS_PER_CHAR * (len(pattern) + 1), (steps[0], len(pattern))


def test_worst_case_length_patterns_are_linear() -> None:
    limit = DEFAULT_LIMITS.max_pattern_chars
    for pattern in ["a*" * (limit // 2), "(?:a*|b*)" * (limit // 9), "[ab]" * (limit // 4),
                    "(?:" * 32 + "a*" * 100 + ")" * 32, "|" * limit]:
        with _counted_scan() as steps:
            check_pattern(pattern[:limit], PTR)
        assert steps[0] <= STEPS_PER_CHAR * (limit + 1), (pattern[:20], steps[0])
