"""The OpenAPI 3.1 document of exactly the surface the gateway accepts (``GET /openapi.json``).

:func:`build_document` returns it as a dict for one :class:`.settings.GatewaySettings`: the
bounds in the request schemas (``n`` up to ``max_n``, ``max_tokens`` up to ``max_tokens_cap``,
``tools`` only when ``tools_enabled``, the served model name, …) are this gateway's own.
Request bodies come from :mod:`.openapi_requests` (built from the checks' field tables);
paths are the rows of the route table (:data:`.routes.ROUTES`, with their operation ids and
summaries; a test holds them equal to the app's, both ways);
errors use the OpenAI error shape of :class:`.errors.GatewayError`, with the stable codes of
:mod:`.errors`. ``HEAD`` is accepted wherever ``GET`` is (not listed as operations).

The document is served at ``GET /openapi.json`` with a bearer key (like ``/v1/models``: it
names the model and the bounds); ``schemathesis`` fuzzes it against the fake engine in CI
(``tests/gateway/test_schemathesis.py``): no 5xx, every answer as documented.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.types import Receive, Scope, Send

from ..asgi_io import send_json
from ..settings import GatewaySettings
from .request_schemas import Schema, chat_request, responses_request, served_names
from .routes import OPENAPI_PATH, ROUTES, RouteSpec

JSON = "application/json"
SSE = "text/event-stream"
# Status -> codes the gateway answers with on each kind of route (:mod:`.errors`).
AUTH_ERRORS = {
    400: "invalid_host",
    401: "unauthorized; with [auth.oidc] also token_malformed, token_alg_none, "
         "token_alg_not_allowed, token_unknown_kid, token_bad_signature, token_expired, "
         "token_not_yet_valid, token_wrong_issuer, token_wrong_audience, token_missing_claim",
    403: "token_group_not_allowed (an identity provider's token in no [auth.groups]), "
         "source_not_allowed (the source address outside an allowed_sources list)",
    431: "request_header_too_large"}
ENGINE_ERRORS: dict[int | str, str] = {
    400: "invalid_json, invalid_request, forbidden_parameter, invalid_parameter, "
         "invalid_schema, unsupported_schema_feature, schema_too_complex, "
         "unsupported_on_engine, unsupported_combination, tools_unavailable, invalid_host, "
         "upstream_rejected",
    404: "model_not_found", 413: "request_too_large", 429: "rate_limited, quota_exceeded",
    502: "invalid_tool_call, invalid_structured_output, upstream_unavailable, upstream_error",
    503: "overloaded, admission_unavailable, engine_restarting, shutting_down, "
         "engine_unavailable",
    504: "upstream_timeout",
    "4XX": "upstream_rejected: the engine refused the request, its 4xx status kept",
}


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _error(codes: str) -> Schema:
    return {"description": f"error ({codes})", "content": {JSON: {"schema": _ref("Error")}}}


def _ok(description: str, schema: Schema, media: str = JSON) -> Schema:
    return {"description": description, "content": {media: {"schema": schema}}}


def _sse_event(name: Schema | None, payload: Schema, done: bool) -> Schema:
    """One server-sent event (schemathesis reads ``event`` / ``data`` / ``id`` / ``retry``):
    ``data`` is JSON matching ``payload``, or the chat stream's final ``[DONE]``."""
    data: Schema = {"type": "string", "contentMediaType": JSON, "contentSchema": payload}
    return {"type": "object", "required": ["data"], "properties": {
        "event": name or {"const": "message"},
        "data": {"anyOf": [{"const": "[DONE]"}, data]} if done else data}}


def _components(settings: GatewaySettings) -> Schema:
    string: Schema = {"type": "string"}
    integer: Schema = {"type": "integer"}
    index: Schema = {"type": "integer", "minimum": 0, "maximum": settings.max_n - 1}
    model: Schema = {"type": "object", "required": ["id", "object", "created", "owned_by"],
             "properties": {"id": served_names(settings),
                            "object": {"const": "model"}, "created": integer,
                            "owned_by": string}}
    call = {"type": "object", "required": ["id", "type", "function"], "properties": {
        "id": string, "type": {"const": "function"}, "function": {
            "type": "object", "required": ["name", "arguments"],
            "properties": {"name": string, "arguments": string}}}}
    choice = {"type": "object", "required": ["index", "message", "finish_reason"],
              "properties": {"index": index,
                             "message": {"type": "object", "required": ["role"], "properties": {
                                 "role": {"const": "assistant"},
                                 "content": {"type": ["string", "null"]},
                                 "tool_calls": {"type": ["array", "null"], "items": call}}},
                             "finish_reason": {"type": ["string", "null"]}}}
    completion = {"type": "object", "required": ["id", "object", "model", "choices"],
                  "properties": {"id": string, "object": {"const": "chat.completion"},
                                 "created": integer, "model": string,
                                 "choices": {"type": "array", "minItems": 1,
                                             "maxItems": settings.max_n, "items": choice},
                                 "usage": {"type": ["object", "null"]}}}
    response = {"type": "object", "required": ["id", "object", "status", "model", "output"],
                "properties": {"id": string, "object": {"const": "response"},
                               "created_at": integer,
                               "status": {"enum": ["completed", "incomplete"]},
                               "model": string, "output": {"type": "array", "items": {
                                   "type": "object", "required": ["type"], "properties": {
                                       "type": {"enum": ["message", "function_call"]}}}},
                               "usage": {"type": ["object", "null"]}}}
    error = {"type": "object", "required": ["error"], "additionalProperties": False,
             "properties": {"error": {
                 "type": "object", "required": ["message", "type", "param", "code"],
                 "additionalProperties": False,
                 "properties": {"message": string, "type": string,
                                "param": {"type": ["string", "null"]}, "code": string,
                                "reason": string}}}}
    chunk = {"type": "object", "required": ["object", "choices"], "properties": {
        "id": string, "object": {"const": "chat.completion.chunk"}, "model": string,
        "choices": {"type": "array", "maxItems": settings.max_n, "items": {
            "type": "object", "required": ["index", "delta"], "properties": {
                "index": index, "delta": {"type": "object"},
                "finish_reason": {"type": ["string", "null"]}}}},
        "usage": {"type": ["object", "null"]}}}
    event = {"type": "object", "required": ["type", "sequence_number"], "properties": {
        "type": {"type": "string", "pattern": "^(response\\.[a-z_.]+|error)$"},
        "sequence_number": {"type": "integer", "minimum": 0}}}
    return {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description":
                                       "an API key of the appliance (or a mapped client "
                                       "certificate under mutual TLS)"}},
        "schemas": {
            "Error": error, "Model": model,
            "ModelList": {"type": "object", "required": ["object", "data"], "properties": {
                "object": {"const": "list"}, "data": {"type": "array", "items": _ref("Model")}}},
            "ChatCompletion": completion, "Response": response,
            "ChatCompletionRequest": chat_request(settings),
            "ResponsesRequest": responses_request(settings),
            "ChatCompletionChunk": chunk, "ResponseEvent": event,
            "ChatStreamEvent": _sse_event(None, {"anyOf": [_ref("ChatCompletionChunk"),
                                                           _ref("Error")]}, done=True),
            "ResponseStreamEvent": _sse_event({"type": "string"}, _ref("ResponseEvent"),
                                              done=False),
            "Status": {"type": "object", "required": ["status"], "properties": {
                "status": {"enum": ["live", "ready"]}}},
        },
    }


def _operation(route: RouteSpec, settings: GatewaySettings) -> Schema:
    path, method = route.path, route.methods[0].lower()  # HEAD is not listed
    op: Schema = {"operationId": route.operation_id, "summary": route.summary}
    responses: dict[str, Schema] = {}
    if route.public:
        op["security"] = []
        responses.update({str(s): _error(c) for s, c in AUTH_ERRORS.items()
                          if s not in (401, 403)})
    else:
        responses.update({str(s): _error(c) for s, c in AUTH_ERRORS.items()})
    if path.startswith("/health/"):
        responses["200"] = _ok("up", _ref("Status"))
        if path == "/health/ready":
            responses["503"] = _error("engine_unavailable, engine_restarting, shutting_down")
    elif path == "/v1/models":
        responses["200"] = _ok("the served model", _ref("ModelList"))
    elif path == "/v1/models/{model}":
        op["parameters"] = [{"name": "model", "in": "path", "required": True,
                             "schema": {"type": "string"},
                             "examples": {"served": {"value": settings.default_model.name}}}]
        responses["200"] = _ok("the served model", _ref("Model"))
        responses["404"] = _error("model_not_found, not_found (a percent-encoded path)")
        responses["403"] = _error("model_not_allowed (not on the caller's models list), "
                                  "token_group_not_allowed, source_not_allowed")
    elif path == "/metrics":
        responses["200"] = _ok("Prometheus text exposition", {"type": "string"}, "text/plain")
    elif path == OPENAPI_PATH:
        responses["200"] = _ok("this document", {"type": "object"})
    else:
        name = "ChatCompletionRequest" if path.endswith("completions") else "ResponsesRequest"
        answer = "ChatCompletion" if path.endswith("completions") else "Response"
        stream = "ChatStreamEvent" if path.endswith("completions") else "ResponseStreamEvent"
        op["requestBody"] = {"required": True, "content": {JSON: {"schema": _ref(name)}}}
        responses.update({str(s): _error(c) for s, c in ENGINE_ERRORS.items()})
        responses["403"] = _error("model_not_allowed (not on the caller's models list), "
                                  "token_group_not_allowed, source_not_allowed")
        responses["200"] = {"description": "the validated answer (stream: true -> SSE events; "
                            "a failure after the start is one error event)",
                            "content": {JSON: {"schema": _ref(answer)},
                                        SSE: {"schema": _ref(stream)}}}
    op["responses"] = dict(sorted(responses.items()))
    return {method: op}


def build_document(settings: GatewaySettings) -> dict[str, Any]:
    """The OpenAPI 3.1 document (a JSON-able dict) for a gateway running ``settings``."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "model-appliance gateway", "version": "1",
                 "description": "OpenAI-compatible gateway: exactly the routes and request "
                 "fields below are accepted; everything else is refused (404 not_found, "
                 "405 method_not_allowed, 400 forbidden_parameter). HEAD is accepted "
                 "wherever GET is. Every answer carries X-Request-Id."},
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "security": [{"bearer": []}],
        "paths": {route.path: _operation(route, settings) for route in ROUTES},
        "components": _components(settings),
    }


def openapi_endpoint(settings: GatewaySettings
                     ) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The raw-ASGI handler of ``GET /openapi.json`` (the document rendered once)."""
    body = json.dumps(build_document(settings), ensure_ascii=False).encode("utf-8")

    async def openapi(scope: Scope, receive: Receive, send: Send) -> None:
        await send_json(send, 200, body)

    return openapi
