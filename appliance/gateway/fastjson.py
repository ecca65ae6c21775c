"""JSON on the gateway's per-request hot path: ``orjson`` where it is exact, stdlib otherwise.

Why ``orjson`` (pinned in ``pyproject.toml`` ``dependencies``): the gateway parses every
SSE event of every stream (20 per request in ``bench/gateway.py``) and serialises every
forwarded body; the stdlib ``json`` module cost ~8 us per event and ~18 us per body, ~35 %
of the gateway's CPU per stream, while ``orjson`` (Rust, well kept, wheels for every
platform the appliance ships on) does the same in ~2 us / ~1 us.

Strict parsing of *client* JSON (duplicate keys refused,
:func:`scanner.core.strict_json.loads_strict`) is unchanged: orjson keeps the last of
duplicate keys, so it is not used there.

Differences from the stdlib that matter here, and how they are held:

* **parse** (:func:`loads`, engine output only): orjson refuses ``NaN`` / ``Infinity``,
  numbers that overflow a double, a UTF-8 BOM, invalid UTF-8 and lone surrogates, which
  ``json.loads`` would accept (the engine never sends them: vLLM serialises with pydantic /
  Starlette, ``allow_nan=False``), so such an event is refused (fail closed, the caller's
  ``upstream_error``). Integers beyond 64 bits come back as ``float``; no check reads such a
  number, and a body that must be re-serialised is re-parsed with the stdlib first
  (:func:`reparse_exact`), so nothing the engine sent is rounded.
* **serialise** (:func:`dumps`): compact UTF-8 (as ``json.dumps(ensure_ascii=False,
  separators=(",", ":"))``). Where orjson refuses a value (an integer beyond 64 bits, a lone
  surrogate, nesting past 255) the stdlib serialises it instead, raising what it raises
  (``UnicodeEncodeError`` for a lone surrogate, ``RecursionError``), so callers keep their
  error handling. Floats use the shortest repr (``1e16`` instead of ``1e+16``): the same
  number.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson

_SORT = orjson.OPT_SORT_KEYS

loads: Callable[[bytes | str], Any] = orjson.loads
"""Parse engine output (see the module docstring). Raises ``ValueError``
(``orjson.JSONDecodeError``). The C function itself: no Python frame per SSE event."""


def reparse_exact(data: bytes | str) -> Any:
    """Parse with the stdlib (integers of any size kept exact), for a document that is about
    to be re-serialised. Raises ``ValueError``."""
    return json.loads(data)


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON bytes. Raises ``UnicodeEncodeError`` (lone surrogate),
    ``RecursionError`` / ``ValueError`` (too deep, not serialisable)."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def canonical(obj: Any) -> str:
    """A canonical key for ``obj`` (sorted keys, compact): equal for equal JSON values.
    Raises ``RecursionError`` / ``ValueError`` / ``TypeError`` as ``json.dumps`` does."""
    try:
        return "o" + orjson.dumps(obj, option=_SORT).decode("utf-8")
    except TypeError:
        return "j" + json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
