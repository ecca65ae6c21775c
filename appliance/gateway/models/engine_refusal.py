"""The gateway's answers while the engine is down (state in :mod:`appliance.engine.state`).

``refusal(status) -> GatewayError``: ``503 engine_restarting`` with ``Retry-After`` (whole
seconds until the engine is expected back), or ``503 shutting_down`` (``Retry-After: 5``) while
draining or failed. ``await translate(status, error) -> GatewayError``: an engine-side failure
(``ENGINE_FAILURE_CODES``) during the engine's death becomes that refusal, waiting up to
``DEATH_GRACE_S`` seconds for the supervisor to confirm the death; any other error is
returned unchanged.
"""

from __future__ import annotations

from appliance.engine.state import DEATH_GRACE_S, EngineStatus

from ..errors import GatewayError

ENGINE_FAILURE_CODES = frozenset({"upstream_unavailable", "upstream_error",
                                  "engine_unavailable", "upstream_timeout"})


def refusal(status: EngineStatus) -> GatewayError:
    """``503 engine_restarting``; ``503 shutting_down`` while draining; ``503
    engine_unavailable`` once the engine was given up after a crash loop (with several
    models the others keep serving; with one, ``serve`` is exiting)."""
    retry = str(status.retry_after_s()).encode()
    if status.state == "failed":
        return GatewayError.of("engine_unavailable", "this model's engine was given up after "
                               f"a crash loop ({status.reason or 'see the engine log'}); "
                               "it is served again after the appliance restarts")
    if status.state == "draining":
        return GatewayError.of("shutting_down", "the appliance is shutting down; retry "
                               "on another replica", headers=((b"retry-after", b"5"),))
    return GatewayError.of("engine_restarting", "the engine is restarting after a "
                           f"failure; retry after {retry.decode()} s",
                           headers=((b"retry-after", retry),))


async def translate(status: EngineStatus, error: GatewayError) -> GatewayError:
    """Map an engine-side failure during the engine's death to ``engine_restarting``;
    any other error is returned unchanged."""
    if not status.supervised or error.code not in ENGINE_FAILURE_CODES:
        return error
    if await status.wait_down(0.0 if not status.ready else DEATH_GRACE_S):
        return refusal(status)
    return error
