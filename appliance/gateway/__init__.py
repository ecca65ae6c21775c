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

Layout (by role; each subpackage's ``__init__`` maps its modules; the layers are the
``gateway-layers`` import-linter contract in ``pyproject.toml``)::

    http/           the ASGI app, the one route table (http.routes.ROUTES), the small
                    routes, the OpenAPI document, the server and its worker processes
    responses       ``POST /v1/responses`` mapped onto chat completions
    chat/           ``POST /v1/chat/completions``: the handler, the request and answer checks
    state           GatewayState: everything a handler needs, built from the settings
    admission/      per-key limits, bounded waiting, quotas; local and Redis backends
    models/         the served models: routing rows, engine sessions, access lists, quirks
    auth/           API keys, OIDC tokens, client certificates, source addresses, tenants
    telemetry/      Prometheus metrics, the audit log, OpenTelemetry traces
    settings        GatewaySettings (validated once; keys stored hashed)
    openai_fields   the OpenAI request fields both model routes share, and the answer to each
    asgi_io         raw-ASGI helpers: JSON and error responses, bounded body reads
    schema/         client JSON Schemas, checked before the grammar compiler sees them
    errors          GatewayError, GatewayCode (the stable codes)
    fastjson        JSON on the per-request hot path (orjson where exact)

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
