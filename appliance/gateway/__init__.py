"""Async OpenAI-compatible gateway in front of vLLM (the appliance's only listener).

Public API::

    GatewaySettings(...)                              # pydantic model, keys stored hashed
    create_app(settings) -> GatewayApp                # plain ASGI app, one route table
    start_in_thread(settings, host, port=0, freeze_gc=False) -> GatewayHandle
        # the one run path (serve, demo, bench, tests): .port, .url, .state, .stop(),
        # .reload_tls()
    serve_until_signal(settings, host, port)          # the same, until SIGTERM/SIGINT
                                                      # (main thread; SIGHUP reloads)

Routes: ``GET /health/live``, ``GET /health/ready`` (no key), ``GET /v1/models``,
``GET /v1/models/{id}``, ``POST /v1/chat/completions``, ``POST /v1/responses`` (mapped onto
chat completions, :mod:`appliance.gateway.responses`), ``GET /metrics``, ``GET /openapi.json``
(the OpenAPI document of exactly this surface, :mod:`appliance.gateway.http.openapi`) (bearer key);
``HEAD`` wherever ``GET``. Request message fields: :mod:`appliance.gateway.chat.message_fields`.
Error codes: see :mod:`appliance.gateway.errors`.
TLS / mutual TLS on the listener (``settings.tls``): :mod:`appliance.gateway.auth.tls`.
OIDC bearer tokens (``settings.auth``): :mod:`appliance.gateway.auth.oidc`; model allow-lists:
:mod:`appliance.gateway.models.access`; the audit log (``settings.audit``):
:mod:`appliance.gateway.telemetry.metrics` over :mod:`appliance.audit`; traces
(``settings.telemetry``): :mod:`appliance.gateway.telemetry.tracing`.

Layout: :mod:`.http.routes` (the one route table, with OpenAPI metadata), :mod:`.http.app`
(admission and dispatch), :mod:`.chat` and :mod:`.responses` (the two model endpoints),
:mod:`.http.info` (health, models, metrics), :mod:`.http.openapi` (the document, derived from
the route table and the checks' tables), :mod:`.schema` (client JSON Schemas), :mod:`.errors`
(``GatewayCode``).

May import: :mod:`appliance.engine` (``EngineStatus`` only), :mod:`appliance.preflight`
(TLS file checks), :mod:`appliance.audit` (the audit chain), :mod:`appliance.config`,
:mod:`appliance.errors`, ``scanner``; never the
spine, the CLI, the toolbench or the built-in model.
"""

from .errors import GatewayError
from .http.app import create_app
from .http.server import GatewayHandle, serve_until_signal, start_in_thread
from .settings import GatewaySettings, hash_api_key

__all__ = [
    "GatewayError",
    "GatewayHandle",
    "GatewaySettings",
    "create_app",
    "hash_api_key",
    "serve_until_signal",
    "start_in_thread",
]
