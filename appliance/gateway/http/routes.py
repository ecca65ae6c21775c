"""Every route the gateway answers, declared once: path, methods, admission and OpenAPI facts.

:data:`ROUTES` is the one table. :func:`appliance.gateway.http.app.route_table` binds each row to
its ASGI handler (:func:`bind`: a row without a handler, or a handler without a row, is a
``ValueError`` at app build time) and :func:`appliance.gateway.http.openapi.build_document` lists
the same rows as the document's ``paths`` (``operation_id``, ``summary``; ``public`` rows carry
``security: []``). A new route is one row here plus its handler in ``route_table``;
``HEAD`` is listed wherever ``GET`` is (:data:`.routing.GET`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .route_table import GET, POST, Handler, Route

OPENAPI_PATH = "/openapi.json"


@dataclass(frozen=True, slots=True)
class RouteSpec:
    """One row: ``path`` (exact, or ending in ``{param}``), ``methods``, ``operation_id`` and
    ``summary`` (OpenAPI), ``public`` (no API key), ``engine`` (engine admission: readiness,
    key limits, global bound), ``recorded`` (metrics and audit log)."""

    path: str
    methods: tuple[str, ...]
    operation_id: str
    summary: str
    public: bool = False
    engine: bool = False
    recorded: bool = True


ROUTES: tuple[RouteSpec, ...] = (
    RouteSpec("/health/live", GET, "healthLive", "Liveness: the gateway process answers",
              public=True, recorded=False),
    RouteSpec("/health/ready", GET, "healthReady", "Readiness: the engine answers its probe",
              public=True, recorded=False),
    RouteSpec("/v1/models", GET, "listModels", "The one served model"),
    RouteSpec("/v1/models/{model}", GET, "getModel", "The served model by id"),
    RouteSpec("/v1/chat/completions", POST, "createChatCompletion",
              "Chat completion (checked request, validated answer)", engine=True),
    RouteSpec("/v1/responses", POST, "createResponse",
              "Responses API, mapped onto chat completions under the same checks", engine=True),
    RouteSpec("/metrics", GET, "metrics", "Prometheus metrics"),
    RouteSpec(OPENAPI_PATH, GET, "openapi", "This document"),
)


def bind(handlers: Mapping[str, Handler]) -> tuple[Route, ...]:
    """The :class:`.routing.Route` rows of :data:`ROUTES`, each with ``handlers[path]``.

    Raises ``ValueError`` naming the paths when ``handlers`` and :data:`ROUTES` differ."""
    declared = {spec.path for spec in ROUTES}
    if set(handlers) != declared:
        missing = sorted(declared - set(handlers))
        extra = sorted(set(handlers) - declared)
        raise ValueError(f"route handlers differ from ROUTES: no handler for {missing}, "
                         f"no route row for {extra}")
    return tuple(Route(spec.path, spec.methods, handlers[spec.path], public=spec.public,
                       engine=spec.engine, recorded=spec.recorded) for spec in ROUTES)
