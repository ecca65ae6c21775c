"""Client-chosen field combinations the engine cannot honour: refused at request time.

``stop`` with grammar-constrained output. vLLM applies stop strings to the detokenised
text *after* the grammar chose the tokens, so a stop string that occurs inside the
constrained JSON (``"\\n"``, ``"\\""``, ``"}"``, a word of an argument…) cuts the tool call
or the structured answer in the middle. The gateway then had to answer 502
``invalid_tool_call`` / ``invalid_structured_output`` — a server error caused by what the
client chose (found by a random campaign of 544 requests at 16 concurrent, issue 7). The
output is constrained whenever

* ``tools`` are offered and ``tool_choice`` is not ``"none"`` (``auto`` included: the
  launcher runs ``--tool-strict-level parameter``, so an ``auto`` call is constrained once
  it starts), or
* ``response_format`` is ``json_object`` or ``json_schema`` (strict or not).

Such requests get ``400 unsupported_combination`` with ``param`` ``"stop"`` and a message
naming both fields and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import GatewayError

COMBINATION_CODE = "unsupported_combination"


def _constrained_by(body: Mapping[str, Any]) -> str | None:
    """The field that makes the output grammar-constrained, or ``None``."""
    if body.get("tools") and body.get("tool_choice", "auto") != "none":
        choice = body.get("tool_choice", "auto")
        shown = choice if isinstance(choice, str) else "{named function}"
        return f"tool_choice={shown!s} (with tools)"
    fmt = body.get("response_format")
    if isinstance(fmt, Mapping) and fmt.get("type") in ("json_object", "json_schema"):
        return f"response_format.type={fmt['type']}"
    return None


def check_combinations(body: Mapping[str, Any]) -> None:
    """Raise 400 ``unsupported_combination`` for ``stop`` with constrained output.

    ``body`` must already have passed the field checks (shapes are known)."""
    stop = body.get("stop")
    if not stop:
        return
    constrained = _constrained_by(body)
    if constrained is not None:
        raise GatewayError.of(
            COMBINATION_CODE,
            f"'stop' cannot be combined with {constrained}: stop sequences cut "
            "grammar-constrained output (tool calls, JSON answers) in the middle, so the "
            "answer could not be valid. Fix: remove 'stop', or drop the constraint "
            "(tool_choice \"none\" / response_format text).", param="stop")
