"""The small routes: liveness, readiness, the model list and card, Prometheus metrics.

Only ``ready`` contacts the engine (``GET <upstream>/health`` within ``ready_timeout_s``);
the others answer from :class:`.state.GatewayState` (model bodies are rendered once).
"""

from __future__ import annotations

import logging

import aiohttp
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.types import Receive, Scope, Send

from .asgi_io import send_error, send_json
from .engine_refusal import refusal
from .errors import GatewayError
from .model_access import allowed
from .model_access import refusal as model_refusal
from .state import GatewayState

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
        """200 ``{"status": "ready"}`` when the engine is up and its ``/health`` is 200;
        else 503 (``engine_restarting`` / ``engine_unavailable``)."""
        state, settings = self.state, self.state.settings
        if not state.engine.ready:
            await send_error(send, refusal(state.engine))
            return
        timeout = aiohttp.ClientTimeout(total=settings.ready_timeout_s)
        ok = False
        try:
            async with state.session.get(settings.upstream_base + "/health",
                                         timeout=timeout) as resp:
                await resp.read()
                ok = resp.status == 200
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            LOG.info("readiness probe failed: %s", type(exc).__name__)
        if ok:
            await send_json(send, 200, b'{"status":"ready"}')
        else:
            await send_error(send, GatewayError.of("engine_unavailable",
                                                   "the engine is not ready"))

    async def models(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The OpenAI model list: the served model, if the caller may use it."""
        if allowed(scope, self.state.settings.served_model_name):
            await send_json(send, 200, self.state.models_body)
        else:
            await send_json(send, 200, b'{"object":"list","data":[]}')

    async def model(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``/v1/models/<id>``: the served model's card, else 404 ``model_not_found``."""
        name = self.state.settings.served_model_name
        wanted = scope["path"][len(MODEL_PREFIX):]
        denied = model_refusal(scope, name) if wanted == name else None
        if denied is not None:
            await send_error(send, denied)
        elif wanted == name:
            await send_json(send, 200, self.state.model_body)
        else:
            await send_error(send, GatewayError.of(
                "model_not_found", f"model {wanted[:100]!r} is not served here; use "
                f"{name!r}", param="model"))

    async def metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Prometheus text exposition of this app's registry."""
        await send_json(send, 200, self.state.metrics.render(),
                        content_type=CONTENT_TYPE_LATEST.encode())
