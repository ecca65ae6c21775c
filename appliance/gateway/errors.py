"""Gateway errors in the OpenAI error shape, plus the stable error codes.

Every refusal the gateway answers itself is a :class:`GatewayError`, serialised as::

    {"error": {"message": str, "type": str, "param": str | null, "code": str}}

(the shape the OpenAI API and vLLM use; ``reason`` is added for ``invalid_tool_call`` so a
client can tell a parallel-call violation from a schema mismatch). In a stream the same
object is sent as one SSE event, ``data: {"error": {...}}``, followed by ``data: [DONE]``.

Codes (stable, tests key on them):

=============================  ======  ====================================================
code                           status  meaning
=============================  ======  ====================================================
``invalid_host``               400     Host header holds ``/ ? # \\ @``, whitespace or a
                                       control character, or appears twice
``unauthorized``               401     missing, malformed or unknown bearer API key
``not_found``                  404     path not on the route allow-list (also
                                       ``/v1/completions``, with the reason)
``method_not_allowed``         405     route exists, method does not
``request_too_large``          413     body over ``max_body_bytes`` (not buffered past it)
``request_header_too_large``   431     header block over ``max_header_bytes`` / count
``invalid_json``               400     body is not UTF-8 JSON, has duplicate keys, NaN, …
``invalid_request``            400     body is not a JSON object / a field has the wrong
                                       shape
``forbidden_parameter``        400     field outside the OpenAI chat / responses
                                       allow-list (engine extensions: ``guided_*``,
                                       ``chat_template`` …; message fields:
                                       :mod:`.message_fields`)
``invalid_parameter``          400     value out of bounds (``n``, ``max_tokens``,
                                       ``logit_bias``, ``temperature``, ``messages`` …)
``invalid_schema``             400     tool ``parameters`` / ``response_format`` schema is
                                       not a valid JSON Schema (pointer in ``param``)
``unsupported_schema_feature`` 400     valid JSON Schema, but a keyword the engine's
                                       grammar (xgrammar) does not enforce
``schema_too_complex``         400     a ``pattern`` whose automaton could blow up
                                       (``appliance.grammar_limits``)
``model_not_found``            404     ``model`` (or ``GET /v1/models/{id}``) is not the
                                       served model name
``tools_unavailable``          400     tools sent but the engine has no vetted tool parser
                                       (a setting: 400, so clients do not retry it)
``invalid_tool_call``          502     engine returned a call that is not valid JSON, not
                                       schema-valid, for an unknown tool, or too many calls
``invalid_structured_output``  502     ``response_format`` answer not valid against its
                                       schema
``upstream_timeout``           504     engine did not answer within ``request_timeout_s``
``upstream_unavailable``       502     engine connection refused / reset
``upstream_error``             502     engine answered 5xx or a malformed response
``upstream_rejected``          4xx     engine refused the request (its status is kept)
``engine_unavailable``         503     readiness probe failed
``internal_error``             500     bug in the gateway (logged with the request id)
``unsupported_on_engine``      400     a field the installed engine cannot survive
                                       (``policies/engine-quirks.json``; ``param`` = the
                                       field, ``reason`` = the quirk id)
``unsupported_combination``    400     ``stop`` with grammar-constrained output
``rate_limited``               429     over the key's concurrent / rpm / tpm limit
                                       (``Retry-After``)
``overloaded``                 503     over the global in-flight bound (``Retry-After``)
``engine_restarting``          503     the engine died and is being restarted
                                       (``Retry-After``); also ends in-flight requests
``shutting_down``              503     SIGTERM drain or crash loop: no new requests
=============================  ======  ====================================================

Output cut by ``max_tokens`` is not an error: it is a 200 with ``finish_reason: "length"``,
and a cut tool call is withheld (see :mod:`appliance.gateway.response_checks`).
"""

from __future__ import annotations

import json

ERROR_TYPES: dict[int, str] = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def error_type_for(status: int) -> str:
    """OpenAI ``error.type`` for an HTTP status (4xx client, 5xx server)."""
    if status in ERROR_TYPES:
        return ERROR_TYPES[status]
    return "invalid_request_error" if status < 500 else "server_error"


class GatewayError(Exception):
    """A refusal answered by the gateway itself.

    Attributes: ``status`` (HTTP status), ``code`` (stable code from the table above),
    ``message`` (human text naming the field and the fix), ``param`` (the offending field or
    JSON pointer, or ``None``), ``reason`` (sub-kind for ``invalid_tool_call``),
    ``headers`` (extra response headers, lower-case bytes pairs).
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        param: str | None = None,
        reason: str | None = None,
        headers: tuple[tuple[bytes, bytes], ...] = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param
        self.reason = reason
        self.headers = headers

    def payload(self) -> dict[str, dict[str, str | None]]:
        """The OpenAI-shaped error object (``{"error": {...}}``)."""
        err: dict[str, str | None] = {
            "message": self.message,
            "type": error_type_for(self.status),
            "param": self.param,
            "code": self.code,
        }
        if self.reason is not None:
            err["reason"] = self.reason
        return {"error": err}

    def body(self) -> bytes:
        """UTF-8 JSON body for a plain (non-stream) error response."""
        return json.dumps(self.payload(), ensure_ascii=False).encode("utf-8")

    def sse(self) -> bytes:
        """One SSE error event followed by the ``[DONE]`` terminator."""
        return b"data: " + self.body() + b"\n\ndata: [DONE]\n\n"
