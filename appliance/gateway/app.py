"""The FastAPI application: route allow-list, Host check, API-key check, small routes.

Admission runs in one pure-ASGI middleware (:class:`Guard`) before routing, on the routed
path (``scope["path"]``, the value Starlette's router matches), never on a URL rebuilt from
the Host header (public bug host-header-auth-bypass, GHSA-94f4-hr76-p5j6):

1. a Host header holding ``/ ? # \\ @``, whitespace or a control byte, or two Host
   headers -> 400 ``invalid_host``;
2. a path not exactly on the allow-list (percent-encoded, trailing slash, other case, a
   non-empty ``root_path``) -> 404 ``not_found`` (``/v1/completions``: a 404 that says
   why it is not served); wrong method -> 405 (``HEAD`` is accepted wherever ``GET`` is);
3. every route but ``GET /health/live`` and ``GET /health/ready`` needs
   ``Authorization: Bearer <key>``; the key's SHA-256 is compared with every stored digest
   using ``hmac.compare_digest`` (no early exit) -> 401 ``unauthorized`` with
   ``WWW-Authenticate`` (keys and their ids: :mod:`.keystore`). A verified client
   certificate that the TLS policy maps to a key id (``scope[TLS_KEY_ID]``,
   :mod:`appliance.gateway.tls`) stands in for the key, with that key id's limits;
4. for ``POST /v1/chat/completions`` and ``POST /v1/responses`` only: an engine that is
   restarting -> 503 ``engine_restarting`` (:mod:`.engine_state`), then the key's limits
   and the global bound -> 429 ``rate_limited`` / 503 ``overloaded`` (:mod:`.admission`),
   all before the body is read.

Nothing but the allow-listed routes exists (no docs, no redirects; the OpenAPI document of
exactly this surface is ``GET /openapi.json``, :mod:`.openapi`), and the
engine is only contacted by ``/health/ready`` and ``/v1/chat/completions`` (which
``/v1/responses`` is mapped onto, :mod:`appliance.gateway.responses`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import aiohttp
from fastapi import FastAPI
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .admission import TICKET_KEY, Admission
from .asgi_io import INFO_KEY, send_error, send_json
from .chat import ChatHandler
from .engine_state import EngineStatus
from .errors import GatewayError
from .keystore import KeyEntry, KeyStore
from .observability import AuditLog, Metrics, RequestInfo
from .openapi import OPENAPI_PATH, openapi_endpoint
from .responses import ResponsesHandler
from .schema_subset import SchemaCache
from .settings import MAX_API_KEY_CHARS, GatewaySettings
from .tls import TLS_KEY_ID
from .upstream import make_session

LOG = logging.getLogger("appliance.gateway")
HOST_BAD = re.compile(rb"[/?#\\@\x00-\x20\x7f]")
PUBLIC = ("/health/live", "/health/ready")
MODEL_ROUTE = "/v1/models/{model}"
MODEL_PREFIX = "/v1/models/"
NOT_SERVED = {
    "/v1/completions": "the legacy /v1/completions API is not served: raw prompts bypass the "
    "signed chat template and it has no tool or structured-output contract the gateway can "
    "hold; use /v1/chat/completions (or /v1/responses)",
}


def route_key(path: str) -> str:
    """The route-table key for a routed path: the path itself, or ``/v1/models/{model}``
    for ``/v1/models/<id>`` (the id may hold ``/``: the served name is free text)."""
    if path.startswith(MODEL_PREFIX) and len(path) > len(MODEL_PREFIX):
        return MODEL_ROUTE
    return path


ENGINE_ROUTES = ("/v1/chat/completions", "/v1/responses")  # admission applies


class GatewayState:
    """Per-app state: settings, key digests, schema cache, metrics, audit, engine session."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        self.keys = KeyStore(settings.api_key_sha256, settings.default_key_limits,
                             settings.keys_file)
        self.cache = SchemaCache(max_depth=settings.max_schema_depth,
                                 max_nodes=settings.max_schema_nodes)
        self.metrics = Metrics()
        self.audit = AuditLog(settings.audit_log) if settings.audit_log else None
        self._session: aiohttp.ClientSession | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.engine = EngineStatus()
        self.metrics.watch_engine(lambda: self.engine)
        self.admission = Admission(settings.max_pending, self.metrics.registry)
        card = {"id": settings.served_model_name, "object": "model",
                "created": int(time.time()), "owned_by": "appliance"}
        self.models_body = json.dumps({"object": "list", "data": [card]}).encode()
        self.model_body = json.dumps(card).encode()

    @property
    def session(self) -> aiohttp.ClientSession:
        """The shared engine session (created lazily if the lifespan did not run)."""
        if self._session is None or self._session.closed:
            self._session = make_session(self.settings)
        return self._session

    async def start(self) -> None:
        """Open the engine session (lifespan startup)."""
        self.loop = asyncio.get_running_loop()
        _ = self.session

    def attach_engine(self, status: EngineStatus) -> None:
        """Follow a supervised engine's life (any thread, after start): its deaths turn
        readiness and admission off; after each restart the engine session is renewed (no
        pooled connection to the dead engine is reused)."""
        if self.loop is None:
            raise RuntimeError("attach_engine before the gateway started")
        self.engine = status
        status.subscribe(self.loop, self._renew_session, "up")

    def reload_threadsafe(self) -> None:
        """Schedule :meth:`reload` on the gateway loop (signal handlers, other threads)."""
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.reload)

    def reload(self) -> None:
        """SIGHUP: re-read the keys file and reopen the audit log (after logrotate);
        connections are kept."""
        self.keys.reload()
        if self.audit is not None:
            self.audit.reopen()
        LOG.warning("reloaded: keys file re-read, audit log reopened")

    def _renew_session(self) -> None:
        old, self._session = self._session, None
        if old is not None and not old.closed:
            asyncio.get_running_loop().create_task(old.close())

    async def close(self) -> None:
        """Close the engine session and the audit log (lifespan shutdown)."""
        if self._session is not None:
            await self._session.close()
        if self.audit is not None:
            self.audit.close()

    def authenticate(self, header: bytes) -> KeyEntry | None:
        """The key entry for a valid, unexpired ``Bearer`` header (:mod:`.keystore`)."""
        if header[:7].lower() != b"bearer ":
            return None
        token = header[7:].strip()
        if not token or len(token) > MAX_API_KEY_CHARS:
            return None
        return self.keys.authenticate(token)


Handler = Callable[[Scope, Receive, Send], Awaitable[None]]


class Endpoint:
    """Wraps an ASGI coroutine so Starlette mounts it as an ASGI app (not request/response)."""

    def __init__(self, fn: Handler) -> None:
        self.fn = fn

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.fn(scope, receive, send)


class Guard:
    """Outermost middleware: Host check, allow-list, API key, audit and metrics."""

    def __init__(self, app: ASGIApp, state: GatewayState,
                 routes: dict[str, tuple[str, bool, Handler]]) -> None:
        self.app = app
        self.state = state
        self.routes = routes

    def admit(self, scope: Scope, info: RequestInfo) -> GatewayError | None:
        """Decide on the routed path; return the refusal or ``None`` to proceed."""
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
            return GatewayError(400, "invalid_host", "the Host header must be a plain host[:port]")
        path = scope["path"]
        route = self.routes.get(route_key(path))
        raw = scope.get("raw_path")
        if route is None or scope.get("root_path") or (raw is not None and b"%" in raw):
            return GatewayError(404, "not_found", NOT_SERVED.get(path, "no such route"))
        method, public, _handler = route
        # HEAD is GET without the body (uvicorn drops it), as Starlette's router has it.
        if scope["method"] != method and not (method == "GET" and scope["method"] == "HEAD"):
            allow = b"GET, HEAD" if method == "GET" else method.encode()
            return GatewayError(405, "method_not_allowed", f"{path} accepts {method} only",
                                headers=((b"allow", allow),))
        if public:
            return None
        # A verified, mapped client certificate authenticates like a key (gateway/tls.py).
        cert_id: str | None = scope.get(TLS_KEY_ID)
        if cert_id is not None:
            entry: KeyEntry | None = self.state.keys.for_certificate(cert_id)
        else:
            entry = self.state.authenticate(auth) if auths == 1 and auth is not None else None
        if entry is None:
            return GatewayError(401, "unauthorized", "a valid 'Authorization: Bearer <API key>' "
                                "header is required",
                                headers=((b"www-authenticate", b'Bearer realm="appliance"'),))
        info.key_id = entry.id
        if path in ENGINE_ROUTES:
            if not self.state.engine.ready:
                return self.state.engine.refusal()
            ticket = self.state.admission.admit(entry)
            if isinstance(ticket, GatewayError):
                return ticket
            scope[TICKET_KEY] = ticket
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.app(scope, receive, send)
            elif scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
            return
        started = time.perf_counter()
        path: str = route_key(scope["path"])
        known = path in self.routes
        info = RequestInfo(request_id=secrets.token_hex(8), method=scope["method"],
                           route=path if known else path[:200])
        scope[INFO_KEY] = info
        rid = info.request_id.encode()
        response_started = False

        async def guarded_send(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
                info.status = message["status"]
                message["headers"] = [*message.get("headers", ()), (b"x-request-id", rid)]
            await send(message)

        metrics = self.state.metrics
        metrics.in_flight.inc()
        try:
            refusal = self.admit(scope, info)
            if refusal is not None:
                info.error = refusal.code
                await send_error(guarded_send, refusal)
            else:
                # Admitted paths are exactly the router's routes: dispatch straight to the
                # handler (the same object the router holds), skipping Starlette's routing
                # and exception layers on the hot path.
                await self.routes[path][2](scope, receive, guarded_send)
        except Exception:  # noqa: BLE001 - fail closed with a JSON 500, never a traceback
            LOG.exception("request_id=%s internal error", info.request_id)
            info.error = "internal_error"
            if not response_started:
                await send_error(guarded_send, GatewayError(
                    500, "internal_error", f"internal error (request id {info.request_id})"))
            info.status = 500
        finally:
            ticket = scope.get(TICKET_KEY)
            if ticket is not None:
                self.state.admission.release(ticket)
            metrics.in_flight.dec()
            elapsed = time.perf_counter() - started
            if not known or path not in PUBLIC:
                metrics.observe(_label(info, known), elapsed)
                if self.state.audit is not None:
                    self.state.audit.write(info, elapsed * 1000.0)


def _label(info: RequestInfo, known: bool) -> RequestInfo:
    if known:
        return info
    return RequestInfo(info.request_id, info.method, "other", status=info.status)


def _routes(state: GatewayState) -> dict[str, tuple[str, bool, Handler]]:
    settings = state.settings

    async def live(scope: Scope, receive: Receive, send: Send) -> None:
        await send_json(send, 200, b'{"status":"live"}')

    async def ready(scope: Scope, receive: Receive, send: Send) -> None:
        if not state.engine.ready:
            await send_error(send, state.engine.refusal())
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
            await send_error(send, GatewayError(503, "engine_unavailable",
                                                "the engine is not ready"))

    async def models(scope: Scope, receive: Receive, send: Send) -> None:
        await send_json(send, 200, state.models_body)

    async def model(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"][len(MODEL_PREFIX):] == settings.served_model_name:
            await send_json(send, 200, state.model_body)
        else:
            await send_error(send, GatewayError(
                404, "model_not_found", f"model {scope['path'][len(MODEL_PREFIX):][:100]!r} "
                f"is not served here; use {settings.served_model_name!r}", param="model"))

    async def metrics(scope: Scope, receive: Receive, send: Send) -> None:
        await send_json(send, 200, state.metrics.render(),
                        content_type=CONTENT_TYPE_LATEST.encode())

    return {
        "/health/live": ("GET", True, live),
        "/health/ready": ("GET", True, ready),
        "/v1/models": ("GET", False, models),
        MODEL_ROUTE: ("GET", False, model),
        "/v1/chat/completions": ("POST", False, ChatHandler(state)),
        "/v1/responses": ("POST", False, ResponsesHandler(state)),
        "/metrics": ("GET", False, metrics),
        OPENAPI_PATH: ("GET", False, openapi_endpoint(settings)),
    }


def create_app(settings: GatewaySettings) -> FastAPI:
    """Build the gateway ASGI app for ``settings``.

    The engine session is opened by the app's lifespan (uvicorn runs it); ``app.state
    .gateway`` holds the :class:`GatewayState`. No docs/OpenAPI routes are registered.
    """
    state = GatewayState(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await state.start()
        try:
            yield
        finally:
            await state.close()

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None,
                  swagger_ui_oauth2_redirect_url=None, lifespan=lifespan)
    app.router.redirect_slashes = False
    table = _routes(state)
    for path, (method, _public, handler) in table.items():
        endpoint = handler if isinstance(handler, ChatHandler) else Endpoint(handler)
        # A class instance is mounted by Starlette as a raw ASGI app (typed as request/response).
        # ``{model:path}``: the Guard's route_key() maps every /v1/models/<id> here too.
        app.router.add_route(path.replace("{model}", "{model:path}"),
                             endpoint,  # type: ignore[arg-type]
                             methods=[method], include_in_schema=False)
    app.add_middleware(Guard, state=state, routes=table)
    app.state.gateway = state
    return app
