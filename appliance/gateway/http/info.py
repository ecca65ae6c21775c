"""The small routes: liveness, readiness, the model list and card, Prometheus metrics.

Only ``ready`` contacts the engines (``GET <upstream>/health`` within ``ready_timeout_s``,
each model's engine in parallel); the others answer from :class:`.state.GatewayState`
(model cards are rendered once).

``/health/ready`` answers 200 ``{"status": "ready", "models": {NAME: "ready", ...}}`` when
every model's engine is ready; 200 ``"status": "degraded"`` when some are (each other
model named with its refusal code, e.g. ``engine_restarting``); 503 (the default model's
``engine_restarting`` / ``engine_unavailable``) when none is, and 503
``admission_unavailable`` while the shared admission store (Redis) does not answer a PING,
since every request would then be refused.
"""

from __future__ import annotations

import asyncio
import json
import logging

import aiohttp
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.types import Receive, Scope, Send

from ..asgi_io import send_error, send_json
from ..auth.tenant import own_series
from ..errors import GatewayError
from ..models.access import KEY_ENTRY, allowed
from ..models.access import refusal as model_refusal
from ..models.engine_refusal import refusal
from ..models.table import Upstream
from ..state import GatewayState

LOG = logging.getLogger("appliance.gateway")
MODEL_PREFIX = "/v1/models/"


class InfoRoutes:
    """The handlers, each an ASGI coroutine bound to one app's state."""

    def __init__(self, state: GatewayState) -> None:
        self.state = state

    async def live(self, scope: Scope, receive: Receive, send: Send) -> None:
        """200 ``{"status": "live"}`` while the event loop runs."""
        await send_json(send, 200, b'{"status":"live"}')

    async def ready(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Readiness of every model (module docstring)."""
        state = self.state
        admission, codes = await asyncio.gather(
            state.admission.reachable(),
            asyncio.gather(*(self._probe(up) for up in state.upstreams.values())))
        if admission is not None:  # every request would be refused: not ready
            await send_error(send, admission)
            return
        models = dict(zip(state.upstreams, codes, strict=True))
        up = [name for name, code in models.items() if code == "ready"]
        if not up:
            default = state.default
            await send_error(send, refusal(default.engine) if not default.engine.ready
                             else GatewayError.of("engine_unavailable",
                                                  "the engine is not ready"))
            return
        status = "ready" if len(up) == len(models) else "degraded"
        await send_json(send, 200, json.dumps({"status": status, "models": models}).encode())

    async def _probe(self, upstream: Upstream) -> str:
        """``"ready"``, or the refusal code a request for this model would get now."""
        if not upstream.engine.ready:
            return refusal(upstream.engine).code
        timeout = aiohttp.ClientTimeout(total=self.state.settings.ready_timeout_s)
        try:
            async with upstream.session.get(upstream.model.base + "/health",
                                            timeout=timeout) as resp:
                await resp.read()
                if resp.status == 200:
                    return "ready"
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            LOG.info("readiness probe of %s failed: %s", upstream.name, type(exc).__name__)
        return "engine_unavailable"

    async def models(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The OpenAI model list: every served model the caller may use."""
        names = [name for name in self.state.upstreams if allowed(scope, name)]
        await send_json(send, 200, self.state.models_body(names))

    async def model(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``/v1/models/<id>``: a served model's card; 403 ``model_not_allowed`` for one
        the caller may not use, else 404 ``model_not_found``."""
        wanted = scope["path"][len(MODEL_PREFIX):]
        body = self.state.model_bodies.get(wanted)
        denied = model_refusal(scope, wanted) if body is not None else None
        if denied is not None:
            await send_error(send, denied)
        elif body is not None:
            await send_json(send, 200, body)
        else:
            await send_error(send, not_served(scope, self.state, wanted))

    async def metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Prometheus text exposition of this app's registry; per-key series of other keys
        only for the ``[gateway] metrics_keys`` (:func:`.tenant.own_series`)."""
        text = self.state.metrics.render()
        entry = scope.get(KEY_ENTRY)
        if entry is not None and entry.id not in self.state.settings.metrics_keys:
            text = own_series(text, entry.id)
        await send_json(send, 200, text, content_type=CONTENT_TYPE_LATEST.encode())


def not_served(scope: Scope, state: GatewayState, wanted: object) -> GatewayError:
    """404 ``model_not_found`` naming ``wanted`` and the served models the caller may use."""
    names = ", ".join(repr(n) for n in state.upstreams if allowed(scope, n)) or "none"
    return GatewayError.of("model_not_found", f"model {str(wanted)[:100]!r} is not served "
                           f"here; use one of: {names}", param="model")
