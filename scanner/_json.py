"""Strict JSON for untrusted headers and configs (RFC 8259 plus safety rules).

Differences from ``json.loads``: the input must be UTF-8 bytes without a BOM; duplicate
object keys are an error, compared after unescaping (so ``"w"`` and ``"\\u0077"`` collide);
``NaN``/``Infinity`` and numbers that overflow to infinity are errors; nesting deeper than
``max_depth`` is an error (checked before parsing, so the recursive C parser never hits
the interpreter's recursion limit).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

# Strings (with escapes) or a bracket: counting brackets outside strings in C speed.
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


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            problem = JSONProblem("duplicate_key", f"duplicate key {key[:200]!r}")
            problem.key = key
            raise problem
        out[key] = value
    return out


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JSONProblem("non_finite", f"number {text[:40]!r} overflows a float")
    return value


def _constant(name: str) -> float:
    raise JSONProblem("non_finite", f"{name} is not valid JSON")


def _byte_offset(text: str, index: int) -> int:
    return len(text[:index].encode("utf-8", "surrogatepass"))


def _max_depth(text: str, limit: int) -> None:
    """Bracket depth outside strings, in one linear pass (regex tokens, C speed)."""
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


def loads_strict(data: bytes, *, max_depth: int = 64) -> Any:
    """Parse untrusted JSON bytes. Raises ``JSONProblem``; never another exception type
    for bad input."""
    if data.startswith(b"\xef\xbb\xbf"):
        raise JSONProblem("bom", "document starts with a UTF-8 byte order mark", 0)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JSONProblem("encoding", f"not UTF-8: {exc.reason}", exc.start) from None
    _max_depth(text, max_depth)
    try:
        return json.loads(
            text, object_pairs_hook=_pairs, parse_float=_float, parse_constant=_constant
        )
    except JSONProblem:
        raise
    except RecursionError:
        raise JSONProblem("depth", "nesting too deep") from None
    except json.JSONDecodeError as exc:
        raise JSONProblem("syntax", f"invalid JSON: {exc.msg}",
                          _byte_offset(text, exc.pos)) from None
    except ValueError as exc:  # int too large to convert, etc.
        raise JSONProblem("syntax", f"invalid JSON: {exc}") from None
