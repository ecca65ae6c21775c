"""Per-key and per-group model allow-lists (``KeyLimits.models``, :mod:`appliance.config.keys`;
``[auth.groups.<name>] models``): which served models a caller may use and see.

:func:`remember` keeps the authenticated :class:`~.keystore.KeyEntry` in the ASGI scope
(``GatewayApp.admit``); :func:`refusal` is the 403 ``model_not_allowed`` for a request whose
(served, checked) ``model`` is not on the caller's list; :func:`allowed` decides what
``/v1/models`` shows.
"""

from __future__ import annotations

from typing import Any

from ..auth.keystore import KeyEntry
from ..errors import GatewayError

KEY_ENTRY = "appliance.gateway.key"


def remember(scope: Any, entry: KeyEntry) -> None:
    """Keep the caller's entry for the handlers."""
    scope[KEY_ENTRY] = entry


def allowed(scope: Any, model: str) -> bool:
    """True when the caller in ``scope`` may use ``model`` (no entry: public route)."""
    entry: KeyEntry | None = scope.get(KEY_ENTRY)
    return entry is None or entry.limits.allows(model)


def refusal(scope: Any, model: str) -> GatewayError | None:
    """403 ``model_not_allowed`` naming ``model`` and the caller, or ``None``."""
    if allowed(scope, model):
        return None
    entry: KeyEntry = scope[KEY_ENTRY]
    names = ", ".join(repr(m) for m in entry.limits.models or ()) or "none"
    return GatewayError.of("model_not_allowed", f"key {entry.id!r} may not use model "
                           f"{model[:100]!r} (its models: {names})", param="model")
