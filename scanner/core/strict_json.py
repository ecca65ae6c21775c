"""Strict JSON for untrusted headers and configs (RFC 8259 plus safety rules).

Differences from ``json.loads``: the input must be UTF-8 bytes without a BOM; duplicate
object keys are an error, compared after unescaping (so ``"w"`` and ``"\\u0077"`` collide);
``NaN``/``Infinity`` and numbers that overflow to infinity are errors; nesting deeper than
``max_depth`` is an error (checked on the parsed document; nesting deep enough to reach the
interpreter's recursion limit makes the C parser raise ``RecursionError``, reported the same).
"""

from __future__ import annotations

import gc
import json
import math
import re
from collections.abc import Callable, Mapping
from itertools import chain
from typing import Any

_NO_GC_BYTES = 64 << 10  # documents at least this large are parsed with the cyclic GC paused
_COUNT_MAX_BYTES = 64 << 10  # larger documents skip the bracket count and are walked for depth
# Strings (with escapes) or a bracket: brackets outside strings, for naming a depth offset.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


class JSONProblem(ValueError):
    """Why a document was refused. ``kind`` is one of: ``encoding``, ``bom``, ``syntax``,
    ``duplicate_key``, ``non_finite``, ``depth``. ``offset`` is a byte offset into the
    document when known."""

    def __init__(self, kind: str, message: str, offset: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.offset = offset
        self.key: str | None = None  # the repeated key, for ``duplicate_key``


def _duplicate(pairs: list[tuple[str, Any]]) -> JSONProblem:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            break
        seen.add(key)
    problem = JSONProblem("duplicate_key", f"duplicate key {key[:200]!r}")
    problem.key = key
    return problem


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _duplicate(pairs)
    return out


def _watching(watch: frozenset[str], found: set[str],
              watch_if: Mapping[str, Callable[[Any], bool]]) -> Callable[
                  [list[tuple[str, Any]]], dict[str, Any]]:
    conditional = frozenset(watch_if)

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out = _pairs(pairs)
        if not watch.isdisjoint(out):
            found.update(watch.intersection(out))
        if conditional and not conditional.isdisjoint(out):
            found.update(k for k in conditional.intersection(out) if watch_if[k](out[k]))
        return out
    return hook


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JSONProblem("non_finite", f"number {text[:40]!r} overflows a float")
    return value


def _constant(name: str) -> float:
    raise JSONProblem("non_finite", f"{name} is not valid JSON")


def _decoder(hook: Callable[[list[tuple[str, Any]]], dict[str, Any]]) -> json.JSONDecoder:
    return json.JSONDecoder(object_pairs_hook=hook, parse_float=_float,
                            parse_constant=_constant)


_DECODER = _decoder(_pairs)  # built once: the common case has no watched keys
_LAST_WINS = _decoder(dict)  # duplicate_keys=True: every other rule still applies


def _byte_offset(text: str, index: int) -> int:
    return len(text[:index].encode("utf-8", "surrogatepass"))


def _max_depth(text: str, limit: int) -> None:
    """Bracket depth outside strings, in one linear pass over the text. Raises
    ``JSONProblem("depth")`` with the offset of the first bracket past ``limit``. Slow on
    big documents: only run once a document has already failed (to name the cause)."""
    depth = 0
    for match in _TOKENS.finditer(text):
        ch = match.group()
        if ch in "[{":
            depth += 1
            if depth > limit:
                raise JSONProblem("depth", f"nesting deeper than {limit}",
                                  _byte_offset(text, match.start()))
        elif ch in "]}":
            depth -= 1


def _within_depth(doc: Any, limit: int) -> bool:
    """Whether the parsed ``doc`` nests containers at most ``limit`` deep (level by level,
    no recursion; for valid JSON this equals the bracket depth of its text)."""
    level = [doc] if type(doc) is dict or type(doc) is list else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return False
        # One flat pass per level (chain in C), not a comprehension per node: a tokenizer's
        # 50k two-element merge lists made that the larger part of a strict parse.
        values = chain.from_iterable([n.values() if type(n) is dict else n for n in level])
        level = [v for v in values if type(v) is dict or type(v) is list]
    return True


def loads_strict(data: bytes, *, max_depth: int = 64, watch: frozenset[str] = frozenset(),
                 found: set[str] | None = None, duplicate_keys: bool = False,
                 watch_if: Mapping[str, Callable[[Any], bool]] | None = None) -> Any:
    """Parse untrusted JSON bytes. Raises ``JSONProblem``; never another exception type
    for bad input.

    ``duplicate_keys=True`` accepts repeated object keys (the last one wins, as in
    ``json.loads``); every other rule holds. Only for a document whose use does not depend
    on which of two values a reader keeps (nothing validates or reads its members), such as
    a gateway ``json_object`` answer; never for a model file or a document checked against a
    schema. It cannot be combined with ``found``.

    ``watch``/``found``: every key of ``watch`` that is an object key anywhere in the
    document is added to ``found`` (so a caller can skip walking a multi-megabyte
    ``tokenizer.json`` that holds none of the keys it looks for). ``watch_if`` adds keys
    that count only when their predicate accepts the member's value (a tokenizer's vocab
    has ``"class"`` as a key, with an integer id).

    The document is parsed first (CPython's C parser raises ``RecursionError`` on deep
    nesting, reported as ``depth``) and its nesting checked on the result; the slower
    bracket scan that names the offending offset runs only for a document already refused,
    so that a document that is both too deep and otherwise invalid is reported as ``depth``.
    """
    if data.startswith(b"\xef\xbb\xbf"):
        raise JSONProblem("bom", "document starts with a UTF-8 byte order mark", 0)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JSONProblem("encoding", f"not UTF-8: {exc.reason}", exc.start) from None
    if found is None:
        decoder = _LAST_WINS if duplicate_keys else _DECODER
    elif duplicate_keys:
        raise ValueError("duplicate_keys=True cannot watch keys")
    else:
        decoder = _decoder(_watching(watch, found, watch_if or {}))
    # A parsed document holds no reference cycles, so the cyclic collector has nothing to
    # free while the parser builds it: paused for large documents (a tokenizer's 100k
    # containers otherwise trigger ~100 collections, a full one among them).
    pause = len(data) >= _NO_GC_BYTES and gc.isenabled()
    if pause:
        gc.disable()
    try:
        doc = decoder.decode(text)
    except (RecursionError, ValueError) as exc:  # JSONProblem and JSONDecodeError included
        _max_depth(text, max_depth)  # too deep and otherwise invalid: depth is named first
        raise _as_problem(exc, text) from None
    finally:
        if pause:
            gc.enable()
    # Each level of nesting needs a bracket byte, so a document with at most ``max_depth``
    # of them (any small one, such as a request body) cannot be too deep: no walk needed.
    # Counted only in small documents: a large one nearly always has more, and counting a
    # multi-megabyte tokenizer.json's brackets cost ~4 ms before the walk it never saved.
    if (len(data) > _COUNT_MAX_BYTES or data.count(b"{") + data.count(b"[") > max_depth) \
            and not _within_depth(doc, max_depth):
        _max_depth(text, max_depth)
        raise JSONProblem("depth", f"nesting deeper than {max_depth}")
    return doc


def _as_problem(exc: RecursionError | ValueError, text: str) -> JSONProblem:
    """The ``JSONProblem`` for an exception the parser raised on ``text``."""
    if isinstance(exc, JSONProblem):
        return exc
    if isinstance(exc, RecursionError):
        return JSONProblem("depth", "nesting too deep")
    if isinstance(exc, json.JSONDecodeError):
        return JSONProblem("syntax", f"invalid JSON: {exc.msg}", _byte_offset(text, exc.pos))
    return JSONProblem("syntax", f"invalid JSON: {exc}")  # int too large to convert, etc.
