"""The gateway ASGI app: one route table, admission in front of it, then the handler.

A plain ASGI application (no web framework: nothing is routed, redirected or documented
but what :func:`route_table` declares). Admission runs on the routed path
(``scope["path"]``), never on a URL rebuilt from the Host header (public bug
host-header-auth-bypass, GHSA-94f4-hr76-p5j6):

1. a Host header holding ``/ ? # \\ @``, whitespace or a control byte, or two Host
   headers -> 400 ``invalid_host``;
2. a path not exactly in the table (percent-encoded, trailing slash, other case, a
   non-empty ``root_path``) -> 404 ``not_found`` (``/v1/completions``: a 404 that says
   why it is not served); a method the route does not declare -> 405 with ``Allow``
   (``HEAD`` is declared wherever ``GET`` is and answered without the body);
3. every route not declared ``public`` must come from ``[gateway] allowed_sources`` and
   then from the caller's own ``allowed_sources`` -> 403 ``source_not_allowed``
   (:mod:`.source_address`), and needs ``Authorization: Bearer <key>`` or a mapped
   client certificate -> 401 ``unauthorized`` (:mod:`.auth`);
4. routes declared ``engine`` (chat completions, responses): no model's engine ready
   (one model: its engine restarting) -> 503 ``engine_restarting``
   (:mod:`appliance.engine.state`), then the key's limits and the global bound -> 429
   ``rate_limited`` / 503 ``overloaded`` (the admission backend,
   :mod:`.admission_backend`: local or Redis), all before the body is read; after the
   body's checks, quotas and tpm, then at most ``max_queue_wait_s`` waiting for a start
   slot (:mod:`.admission_gate`).

Every answer carries ``X-Request-Id``; a handler exception is a JSON 500
``internal_error`` (logged with the request id), never a traceback. Nothing but the
routes in the table exists (no docs, no redirects; the OpenAPI document of exactly this
surface is ``GET /openapi.json``, :mod:`.openapi`). The engine is only
contacted by ``/health/ready`` and ``/v1/chat/completions`` (which ``/v1/responses`` is
mapped onto, :mod:`appliance.gateway.responses`).
"""

from __future__ import annotations

import logging
import re
import secrets
import time

from starlette.types import Message, Receive, Scope, Send

from ..admission.local import TICKET_KEY
from ..asgi_io import INFO_KEY, send_error
from ..auth.authenticate import authenticate
from ..auth.keystore import KeyEntry
from ..chat.handler import ChatHandler
from ..errors import GatewayError
from ..models.access import remember
from ..models.engine_refusal import refusal
from ..responses import ResponsesHandler
from ..settings import GatewaySettings
from ..state import GatewayState
from ..telemetry.metrics import RequestInfo
from ..telemetry.spans import end
from .info import InfoRoutes
from .openapi import openapi_endpoint
from .route_table import Route, RouteTable
from .routes import OPENAPI_PATH, bind

LOG = logging.getLogger("appliance.gateway")
HOST_BAD = re.compile(rb"[/?#\\@\x00-\x20\x7f]")
NOT_SERVED = {
    "/v1/completions": "the legacy /v1/completions API is not served: raw prompts bypass the "
    "signed chat template and it has no tool or structured-output contract the gateway can "
    "hold; use /v1/chat/completions (or /v1/responses)",
}


def route_table(state: GatewayState) -> tuple[Route, ...]:
    """Every route the gateway answers: the rows of :data:`.routes.ROUTES`, each bound to its
    handler here (one entry per row; :func:`.routes.bind` refuses a mismatch)."""
    info = InfoRoutes(state)
    return bind({
        "/health/live": info.live,
        "/health/ready": info.ready,
        "/v1/models": info.models,
        "/v1/models/{model}": info.model,
        "/v1/chat/completions": ChatHandler(state),
        "/v1/responses": ResponsesHandler(state),
        "/metrics": info.metrics,
        OPENAPI_PATH: openapi_endpoint(state.settings),
    })


class GatewayApp:
    """The ASGI callable: lifespan (engine session), admission, dispatch, bookkeeping.

    ``state`` is the app's :class:`GatewayState`; ``table`` its :class:`RouteTable`.
    """

    def __init__(self, state: GatewayState, routes: tuple[Route, ...]) -> None:
        self.state = state
        self.table = RouteTable(routes)

    def admit(self, scope: Scope, route: Route | None,
              info: RequestInfo) -> GatewayError | KeyEntry | None:
        """Decide on the routed path; return the refusal, ``None`` to proceed, or, for an
        engine route, the authenticated key that admission (:meth:`_admit_engine`) must
        admit first."""
        host: bytes | None = None
        auth: bytes | None = None
        hosts = auths = 0
        for name, value in scope["headers"]:
            if name == b"host":
                hosts += 1
                host = value
            elif name == b"authorization":
                auths += 1
                auth = value
        if hosts > 1 or (host is not None and HOST_BAD.search(host)):
            return GatewayError.of("invalid_host", "the Host header must be a plain host[:port]")
        path = scope["path"]
        raw = scope.get("raw_path")
        if route is None or scope.get("root_path") or (raw is not None and b"%" in raw):
            return GatewayError.of("not_found", NOT_SERVED.get(path, "no such route"))
        if scope["method"] not in route.methods:
            return GatewayError.of("method_not_allowed",
                                   f"{path} accepts {', '.join(route.methods)} only",
                                   headers=((b"allow", route.allow),))
        if route.public:
            return None
        sources = self.state.sources
        barred = sources.gateway_refusal(scope)
        if barred is not None:
            return barred
        entry = authenticate(self.state.keys, scope, auth, auths, self.state.oidc)
        if isinstance(entry, GatewayError):
            return entry
        info.key_id = entry.id
        barred = sources.key_refusal(scope, entry.id, entry.limits.allowed_sources)
        if barred is not None:
            return barred
        remember(scope, entry)
        if route.engine:
            if not self.state.serving():  # no model's engine is ready (one: its own)
                return refusal(self.state.engine)
            return entry
        return None

    async def _admit_engine(self, scope: Scope, entry: KeyEntry) -> GatewayError | None:
        ticket = await self.state.admission.admit(entry.id, entry.limits)
        if isinstance(ticket, GatewayError):
            return ticket
        scope[TICKET_KEY] = ticket
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1008})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.state.start()
                except Exception as exc:  # noqa: BLE001 - reported to the server, which exits
                    await send({"type": "lifespan.startup.failed", "message": repr(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.state.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        route = self.table.match(scope["path"])
        info = RequestInfo(request_id=secrets.token_hex(8), method=scope["method"],
                           route=route.path if route is not None else scope["path"][:200])
        info.started = started
        scope[INFO_KEY] = info
        rid = info.request_id.encode()
        head = scope["method"] == "HEAD"
        response_started = False

        async def guarded_send(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
                info.status = message["status"]
                message["headers"] = [*message.get("headers", ()), (b"x-request-id", rid)]
            elif message["type"] == "http.response.body":
                if head:
                    message = {**message, "body": b""}  # HEAD: GET without the body
                else:
                    info.response_bytes += len(message.get("body", b""))
            await send(message)

        metrics = self.state.metrics
        metrics.serving += 1
        trace = None
        if route is not None and route.engine and self.state.tracing is not None:
            trace = info.trace = self.state.tracing.start(scope, scope["method"], route.path,
                                                          info.request_id)
        try:
            span = trace.span("gateway.admission") if trace is not None else None
            refusal = self.admit(scope, route, info)
            if isinstance(refusal, KeyEntry):
                refusal = await self._admit_engine(scope, refusal)
            if span is not None:
                end(span, refusal.code if refusal is not None else None)
            if refusal is not None:
                info.error = refusal.code
                await send_error(guarded_send, refusal)
            elif route is not None:
                await route.handler(scope, receive, guarded_send)
        except Exception:  # noqa: BLE001 - fail closed with a JSON 500, never a traceback
            LOG.exception("request_id=%s internal error", info.request_id)
            info.error = "internal_error"
            if not response_started:
                await send_error(guarded_send, GatewayError.of(
                    "internal_error", f"internal error (request id {info.request_id})"))
            info.status = 500
        finally:
            ticket = scope.get(TICKET_KEY)
            if ticket is not None:
                self.state.gate.leave(ticket)
                await self.state.admission.release(ticket)
            metrics.serving -= 1
            if trace is not None:
                trace.finish(info)
            if route is None or route.recorded:
                elapsed = time.perf_counter() - started
                metrics.observe(_label(info, route is not None), elapsed)
                if self.state.audit is not None:
                    info.source = self.state.sources.shown(scope)
                    self.state.audit.write(info, elapsed * 1000.0)


def _label(info: RequestInfo, known: bool) -> RequestInfo:
    if known:
        return info
    return RequestInfo(info.request_id, info.method, "other", status=info.status)


def create_app(settings: GatewaySettings) -> GatewayApp:
    """Build the gateway ASGI app for ``settings`` (routes: :func:`route_table`).

    The engine session is opened by the ASGI lifespan (uvicorn runs it; without one it is
    opened on first use); ``app.state`` is the :class:`GatewayState`.
    """
    state = GatewayState(settings)
    return GatewayApp(state, route_table(state))
