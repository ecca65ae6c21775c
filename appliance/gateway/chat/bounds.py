"""Bounds of the chat request's scalar fields, declared once for the checks and the document.

:data:`NUMERIC` maps each bounded number field to an :class:`IntRange` or :class:`NumRange`
whose ends are constants or a :class:`.settings.GatewaySettings` attribute (a callable of the
settings). :mod:`.request_checks` refuses a value outside it (``400 invalid_parameter``,
message ``"<field> must be an integer in [low, high]"`` / ``"... a number in (low, high]"``)
and :mod:`appliance.gateway.http.request_schemas` renders the same range as JSON Schema
(``minimum`` / ``exclusiveMinimum`` / ``maximum``). The other constants are the limits of the
non-numeric scalars (``user``, ``stop``, ``logit_bias``), also shared by both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..schema.subset import is_int, is_number
from ..settings import GatewaySettings

INT64 = 2**63
USER_MAX_CHARS = 256
STOP_MAX_CHARS = 1000  # each stop string: 1..1000 characters
LOGIT_BIAS_LIMIT = 100  # each bias in [-100, 100]
TOKEN_ID_MAX_DIGITS = 10  # a logit_bias key: decimal token id of at most 10 digits
BOOLEAN = ("logprobs", "parallel_tool_calls", "stream")

Setting = Callable[[GatewaySettings], int]


def _end(value: int | Setting, settings: GatewaySettings) -> int:
    return value(settings) if callable(value) else value


@dataclass(frozen=True)
class IntRange:
    """Integers in ``[low, high]``; an end may be read from the settings."""

    low: int | Setting
    high: int | Setting

    def ends(self, settings: GatewaySettings) -> tuple[int, int]:
        return _end(self.low, settings), _end(self.high, settings)

    def accepts(self, value: Any, settings: GatewaySettings) -> bool:
        low, high = self.ends(settings)
        return is_int(value) and low <= value <= high

    def message(self, key: str, settings: GatewaySettings) -> str:
        low, high = self.ends(settings)
        return f"{key} must be an integer in [{low}, {high}]"

    def schema(self, settings: GatewaySettings) -> dict[str, Any]:
        low, high = self.ends(settings)
        return {"type": "integer", "minimum": low, "maximum": high}


@dataclass(frozen=True)
class NumRange:
    """Numbers in ``[low, high]``, or ``(low, high]`` when ``low_open``."""

    low: float
    high: float
    low_open: bool = False

    def accepts(self, value: Any, settings: GatewaySettings) -> bool:
        return (is_number(value) and self.low <= value <= self.high
                and not (self.low_open and value == self.low))

    def message(self, key: str, settings: GatewaySettings) -> str:
        span = (f"({self.low}, {self.high}]" if self.low_open
                else f"[{self.low}, {self.high}]")
        return f"{key} must be a number in {span}"

    def schema(self, settings: GatewaySettings) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "number", "maximum": self.high}
        out["exclusiveMinimum" if self.low_open else "minimum"] = self.low
        return out


def _max_tokens(s: GatewaySettings) -> int:
    return s.max_tokens_cap


NUMERIC: dict[str, IntRange | NumRange] = {
    "max_tokens": IntRange(1, _max_tokens),
    "max_completion_tokens": IntRange(1, _max_tokens),
    "n": IntRange(1, lambda s: s.max_n),
    "temperature": NumRange(0.0, 2.0),
    "top_p": NumRange(0.0, 1.0, low_open=True),
    "frequency_penalty": NumRange(-2.0, 2.0),
    "presence_penalty": NumRange(-2.0, 2.0),
    "seed": IntRange(-INT64, INT64 - 1),
    "top_logprobs": IntRange(0, lambda s: s.max_top_logprobs),
    "top_k": IntRange(-1, lambda s: s.vocab_size or 1 << 20),
    "min_p": NumRange(0.0, 1.0),
    "repetition_penalty": NumRange(0.0, 2.0, low_open=True),
}
LOGIT_BIAS = NumRange(-LOGIT_BIAS_LIMIT, LOGIT_BIAS_LIMIT)
