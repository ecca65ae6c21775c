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
from typing import Any


class JSONProblem(ValueError):
    """Why a document was refused. ``kind`` is one of: ``encoding``, ``bom``, ``syntax``,
    ``duplicate_key``, ``non_finite``, ``depth``. ``offset`` is a byte offset when known."""

    def __init__(self, kind: str, message: str, offset: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.offset = offset


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise JSONProblem("duplicate_key", f"duplicate key {key!r}")
        out[key] = value
    return out


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JSONProblem("non_finite", f"number {text[:40]!r} overflows a float")
    return value


def _constant(name: str) -> float:
    raise JSONProblem("non_finite", f"{name} is not valid JSON")


def _max_depth(text: str, limit: int) -> None:
    """Bracket depth outside strings, in one linear pass."""
    depth = 0
    in_string = False
    escaped = False
    for index, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                raise JSONProblem("depth", f"nesting deeper than {limit}", index)
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
        raise JSONProblem("syntax", f"invalid JSON: {exc.msg}", exc.pos) from None
    except ValueError as exc:  # int too large to convert, etc.
        raise JSONProblem("syntax", f"invalid JSON: {exc}") from None
