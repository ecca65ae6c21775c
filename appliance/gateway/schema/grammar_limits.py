"""Pre-limits on JSON Schemas before they reach the engine's grammar compiler.

Structured outputs (``response_format`` ``json_schema``, tool ``parameters`` under
``tool_choice``) are compiled by the engine into a grammar. A pattern whose automaton is
exponential in size, or a schema that is simply huge, can pin that compile step and stall the
engine loop: GHSA-rwxx-mrjm-wc2m (CVE-2026-55574), fixed upstream by a regex compile timeout
in vllm-project/vllm PR#45172. vLLM's timeout (``VLLM_REGEX_COMPILATION_TIMEOUT_S``) covers
only ``structured_outputs.regex``; a ``pattern`` inside a JSON Schema goes to
``compile_json_schema`` without one, so the gateway refuses such schemas up front with HTTP 400
``error.code = "schema_too_complex"`` (:data:`ERROR_CODE`).

The limits are policy, chosen to keep worst-case automata small while letting ordinary
patterns (identifiers, e-mail addresses, ISO dates, UUIDs) through. See :class:`GrammarLimits`.

The pattern checks are static: one linear scan of at most ``max_pattern_chars`` characters
plus ``re.compile`` on the same bounded string; nothing is ever matched, so no timeout is
needed. The schema walk is iterative (no recursion limit) and stops at the node limit.

The gateway calls :func:`check_pattern` for every ``pattern`` while it checks the keyword
subset (:mod:`appliance.gateway.schema.subset`, whose size limit is the gateway setting
``max_schema_nodes``); :func:`check_schema_complexity` and its node/depth limits serve
callers that check a schema on its own. Both walk the schema with the same walker
(:mod:`appliance.gateway.schema.walk`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from . import walk

ERROR_CODE = "schema_too_complex"


@dataclass(frozen=True, slots=True)
class GrammarLimits:
    """Policy limits (source: GHSA-rwxx-mrjm-wc2m / CVE-2026-55574, vllm PR#45172).

    * ``max_pattern_chars``: characters in one ``pattern`` (512).
    * ``max_count_after_unbounded``: a repeat count ``{n}`` / ``{n,m}`` / ``{n,}`` above this,
      placed after or inside an unbounded repeat (``*``, ``+``, ``{n,}``), is refused (16).
      ``[ab]*a[ab]{n}`` ("the n-th symbol from the end is a") has a minimal DFA of 2**n
      states, so 16 bounds that family at 65,536 states.
    * ``max_positions_after_unbounded``: the same family written out longhand
      (``[ab]*a[ab][ab]...``): character-class positions that can follow an unbounded repeat
      in sequence, bounded repeats expanded, literals only inside an alternation (16).
    * ``max_alternation_branches``: branches of one ``a|b|...`` alternation (256; under the
      512-character limit only empty branches reach it, it guards a raised length limit).
    * Always refused: an unbounded repeat nested in a repeat (``(a+)+``, ``(\\w+\\s?)*``),
      which backtracks exponentially in Python ``re`` (the gateway re-validates output with
      ``jsonschema``, which uses ``re``). Safe shapes such as ``([a-z]+\\.)*`` are refused
      too: rewrite them without the nesting.
    * ``max_group_depth``: nesting of ``(...)`` groups (32).
    * ``max_schema_nodes``: JSON values (objects, arrays, scalars) in one schema (2000).
    * ``max_schema_depth``: JSON nesting depth of one schema document (32).
    """

    max_pattern_chars: int = 512
    max_count_after_unbounded: int = 16
    max_positions_after_unbounded: int = 16
    max_alternation_branches: int = 256
    max_group_depth: int = 32
    max_schema_nodes: int = 2000
    max_schema_depth: int = 32


DEFAULT_LIMITS = GrammarLimits()

# ---------------------------------------------------------------------------- regex scanning
# The tree below models Python ``re`` syntax (the pattern has already compiled with ``re``),
# only as far as the checks need: literals, single-character classes, groups with their
# alternation branches, and repeats with their bounds.

_LIT, _CLS, _ZERO = 0, 1, 2  # literal char, char class / dot / class escape, zero-width
_CLASS_ESCAPES = frozenset("dDwWsS")
_ZERO_ESCAPES = frozenset("AZbB")
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
_COUNT = re.compile(r"\{(\d*)(,?)(\d*)\}")
_FLAGS = re.compile(r"\(\?([aiLmsux]*)(?:-([imsx]*))?([:)])")


@dataclass(slots=True)
class _Leaf:
    start: int
    kind: int


@dataclass(slots=True)
class _Group:
    start: int
    branches: list[list[_Node]]


@dataclass(slots=True)
class _Repeat:
    start: int  # where the repeated atom starts
    qpos: int  # where the quantifier starts
    end: int  # just after the quantifier
    atom: _Node
    lo: int
    hi: int | None  # None: unbounded


_Node = _Leaf | _Group | _Repeat


class _Refused(Exception):
    """Internal: the pattern is refused; ``args[0]`` is the reason."""


def _escape_end(p: str, i: int) -> tuple[int, int]:
    """``p[i] == '\\'``: return (index after the escape, leaf kind)."""
    c = p[i + 1]
    if c in _CLASS_ESCAPES:
        return i + 2, _CLS
    if c in _ZERO_ESCAPES:
        return i + 2, _ZERO
    if c in _HEX_ESCAPES:
        return i + 2 + _HEX_ESCAPES[c], _LIT
    if c == "N" and i + 2 < len(p) and p[i + 2] == "{":
        return p.index("}", i + 2) + 1, _LIT
    if c.isdigit():  # octal escape or back-reference: consume the digits
        j = i + 1
        while j < len(p) and j < i + 4 and p[j].isdigit():
            j += 1
        return j, _CLS
    return i + 2, _LIT


def _class_end(p: str, i: int) -> int:
    """``p[i] == '['``: return the index after the closing ``]``."""
    j = i + 1
    if j < len(p) and p[j] == "^":
        j += 1
    if j < len(p) and p[j] == "]":  # a leading ']' is a literal
        j += 1
    while p[j] != "]":
        j += 2 if p[j] == "\\" else 1
    return j + 1


_BODY, _ATOM, _SKIP = 0, 1, 2  # what a "(" opens: a group body, an atom, nothing


def _group_header(p: str, i: int) -> tuple[int, int]:
    """``p[i] == '('``: return (index after the header, _BODY / _ATOM / _SKIP)."""
    if not p.startswith("(?", i):
        return i + 1, _BODY
    flags = _FLAGS.match(p, i)
    if flags is not None:
        if "x" in flags.group(1):
            raise _Refused("uses the verbose (?x) flag, which the grammar backend does not read")
        return flags.end(), _BODY if flags.group(3) == ":" else _SKIP
    nxt = p[i + 2]
    if nxt == "#":  # a comment is invisible: a following quantifier binds to the atom before
        return p.index(")", i) + 1, _SKIP
    if p.startswith("(?P=", i):  # named back-reference
        return p.index(")", i) + 1, _ATOM
    if p.startswith("(?P<", i):
        return p.index(">", i) + 1, _BODY
    if p.startswith("(?<=", i) or p.startswith("(?<!", i):
        return i + 4, _BODY
    if nxt == "(":  # conditional (?(id)yes|no)
        return p.index(")", i + 3) + 1, _BODY
    return i + 3, _BODY  # (?: (?= (?! (?>


def _parse(p: str, limits: GrammarLimits) -> _Group:
    """Build the tree of a pattern that ``re.compile`` accepted."""
    root = _Group(0, [[]])
    stack = [root]
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        branch = stack[-1].branches[-1]
        if c == "(":
            body, opens = _group_header(p, i)
            if opens != _BODY:
                if opens == _ATOM:
                    branch.append(_Leaf(i, _CLS))
                i = body
                continue
            if len(stack) > limits.max_group_depth:
                raise _Refused(f"nests groups more than {limits.max_group_depth} deep")
            group = _Group(i, [[]])
            branch.append(group)
            stack.append(group)
            i = body
        elif c == ")":
            stack.pop()
            i += 1
        elif c == "|":
            stack[-1].branches.append([])
            i += 1
        elif c in "*+?{":
            m = _COUNT.match(p, i) if c == "{" else None
            if c == "{" and (m is None or p[i + 1] == "}"):
                branch.append(_Leaf(i, _LIT))  # not a valid count: a literal '{'
                i += 1
                continue
            if m is not None:
                lo = int(m.group(1) or 0)
                hi = None if m.group(2) and not m.group(3) else int(m.group(3) or lo)
                end = m.end()
            else:
                lo, hi = (0, None) if c == "*" else (1, None) if c == "+" else (0, 1)
                end = i + 1
            if end < n and p[end] in "?+":  # lazy or possessive
                end += 1
            atom = branch.pop()
            branch.append(_Repeat(atom.start, i, end, atom, lo, hi))
            i = end
        elif c == "[":
            branch.append(_Leaf(i, _CLS))
            i = _class_end(p, i)
        elif c == "\\":
            end, kind = _escape_end(p, i)
            branch.append(_Leaf(i, kind))
            i = end
        else:
            branch.append(_Leaf(i, _CLS if c == "." else _ZERO if c in "^$" else _LIT))
            i += 1
    if len(stack) != 1:
        raise _Refused("has unbalanced parentheses")
    return root


class _Scan:
    """One top-down pass over the tree; records the first problem of each kind."""

    def __init__(self, pattern: str, limits: GrammarLimits) -> None:
        self.p = pattern
        self.limits = limits
        self.found: dict[str, str] = {}
        self.widths: dict[tuple[int, bool], int] = {}
        self.unbounded: dict[int, bool] = {}

    def has_unbounded(self, node: _Node) -> bool:
        key = id(node)
        if key not in self.unbounded:
            if isinstance(node, _Repeat):
                value = node.hi is None or self.has_unbounded(node.atom)
            elif isinstance(node, _Group):
                value = any(self.has_unbounded(c) for b in node.branches for c in b)
            else:
                value = False
            self.unbounded[key] = value
        return self.unbounded[key]

    def width(self, node: _Node, in_alt: bool) -> int:
        """Character positions of ``node``: a class counts 1, a literal only inside an
        alternation (``(a|b)`` acts like ``[ab]``), a branching group its widest branch, a
        repeat its atom times its upper bound (or lower bound, at least 1, if unbounded)."""
        key = (id(node), in_alt)
        if key not in self.widths:
            if isinstance(node, _Leaf):
                value = 1 if node.kind == _CLS or (in_alt and node.kind == _LIT) else 0
            elif isinstance(node, _Repeat):
                count = node.hi if node.hi is not None else max(node.lo, 1)
                value = count * self.width(node.atom, in_alt)
            else:
                alt = in_alt or len(node.branches) > 1
                value = max(sum(self.width(c, alt) for c in b) for b in node.branches)
            self.widths[key] = value
        return self.widths[key]

    def note(self, kind: str, message: str) -> None:
        self.found.setdefault(kind, message)

    def scan(self, node: _Node, after: bool, tail: int, in_alt: bool) -> None:
        """``after``: an unbounded repeat precedes ``node`` in sequence or encloses it;
        ``tail``: positions that can follow ``node`` in sequence (see :meth:`width`)."""
        lim = self.limits
        if isinstance(node, _Repeat):
            count = self.p[node.qpos:node.end]
            cap = lim.max_count_after_unbounded
            if after and (node.lo > cap or (node.hi is not None and node.hi > cap)):
                self.note("count", f"repeats {count} at offset {node.qpos} after or inside an "
                          f"unbounded repeat; counts above {cap} there can make the grammar "
                          "automaton exponential (like [ab]*a[ab]{40})")
            if (node.hi is None or node.hi > 1) and self.has_unbounded(node.atom):
                self.note("nested", f"nests an unbounded repeat inside the repeat {count} at "
                          f"offset {node.qpos} (like (a+)+), which backtracks exponentially; "
                          "rewrite it without the nesting")
            if node.hi is None and tail > lim.max_positions_after_unbounded:
                self.note("positions", f"has {tail} character-class positions after the "
                          f"unbounded repeat at offset {node.qpos} (limit "
                          f"{lim.max_positions_after_unbounded}); this can make the grammar "
                          "automaton exponential (like [ab]*a[ab][ab]...)")
            self.scan(node.atom, after or node.hi is None, tail, in_alt)
        elif isinstance(node, _Group):
            if len(node.branches) > lim.max_alternation_branches:
                self.note("branches", f"has an alternation of {len(node.branches)} branches "
                          f"(limit {lim.max_alternation_branches}); list the values with enum")
            alt = in_alt or len(node.branches) > 1
            for branch in node.branches:
                rest = sum(self.width(c, alt) for c in branch)
                seen = after
                for child in branch:
                    rest -= self.width(child, alt)
                    self.scan(child, seen, rest + tail, alt)
                    seen = seen or self.has_unbounded(child)


_PRIORITY = ("branches", "nested", "count", "positions")


def _structure_problem(p: str, limits: GrammarLimits) -> str | None:
    scan = _Scan(p, limits)
    scan.scan(_parse(p, limits), False, 0, False)
    return next((scan.found[k] for k in _PRIORITY if k in scan.found), None)


def check_pattern(pattern: str, pointer: str, *,
                  limits: GrammarLimits = DEFAULT_LIMITS) -> str | None:
    """Return why the JSON-Schema ``pattern`` is refused, or ``None`` if it is acceptable.

    ``pointer`` is the RFC 6901 pointer of the ``pattern`` keyword; the message names it and
    the fix, and maps to HTTP 400 ``schema_too_complex``. Checks, in order: type, length,
    NUL, ``re.compile`` (no timeout needed: nothing is matched), verbose flag, group nesting,
    alternation size, nested unbounded repeats, large counts after or inside an unbounded
    repeat, and class positions after an unbounded repeat (see :class:`GrammarLimits`).
    Never raises. Source: GHSA-rwxx-mrjm-wc2m / CVE-2026-55574, vllm PR#45172.
    """
    where = f"pattern at {pointer}" if pointer else "pattern"
    if not isinstance(pattern, str):
        return f"{where} must be a string"
    if len(pattern) > limits.max_pattern_chars:
        return (f"{where} is {len(pattern)} characters (limit {limits.max_pattern_chars}); "
                "shorten it or list the values with enum")
    if "\x00" in pattern:
        return f"{where} contains a NUL character"
    try:
        re.compile(pattern)
    except (re.error, OverflowError, RecursionError, ValueError) as exc:
        return f"{where} is not a valid regular expression: {exc}"
    try:
        problem = _structure_problem(pattern, limits)
    except _Refused as exc:
        problem = str(exc.args[0])
    except (IndexError, ValueError, RecursionError):  # fail closed on a scan we cannot finish
        problem = "could not be analysed"
    return None if problem is None else f"{where} {problem}"


# ---------------------------------------------------------------------------- schema walking

def check_schema_complexity(schema: Any, *,
                            limits: GrammarLimits = DEFAULT_LIMITS) -> list[tuple[str, str]]:
    """Return ``(json_pointer, message)`` for every part of ``schema`` that is too complex.

    ``schema`` is a decoded JSON Schema (dict/bool; other values are walked as data), walked
    with the shared schema walker (:func:`.walk.walk`). Reports each ``pattern`` (and
    ``patternProperties`` key) refused by :func:`check_pattern`, a document nested deeper
    than ``max_schema_depth`` (once, at the first such pointer; it is not descended further)
    and one with more than ``max_schema_nodes`` JSON values (pointer ``""``; the walk stops
    there). Pointers are RFC 6901, relative to ``schema``, in document order. Recursive
    ``$ref`` is fine: references are not followed. An empty list means acceptable. Never
    raises. Error code: ``schema_too_complex``. Source: GHSA-rwxx-mrjm-wc2m.
    """
    problems: list[tuple[str, str]] = []
    seen = [0, False]  # JSON values visited, depth problem reported

    def visit(value: Any, path: walk.Path, role: int) -> bool:
        seen[0] += 1
        if seen[0] > limits.max_schema_nodes:
            problems.append(("", f"schema has more than {limits.max_schema_nodes} JSON values; "
                                 "split it or simplify it"))
            raise walk.StopWalk
        if len(path) > limits.max_schema_depth:
            if not seen[1]:
                problems.append((walk.pointer(path), "schema nests deeper than "
                                 f"{limits.max_schema_depth} levels; flatten it"))
                seen[1] = True
            return False
        if isinstance(value, dict) and role in (walk.SCHEMA, walk.PATTERN_MAP):
            for key, item in value.items():
                if role == walk.PATTERN_MAP or key == "pattern":
                    where = walk.pointer((*path, str(key)))
                    msg = check_pattern(item if role == walk.SCHEMA else key, where,
                                        limits=limits)
                    if msg is not None:
                        problems.append((where, msg))
        return True

    walk.walk(schema, visit)
    return problems
