"""Gateway errors in the OpenAI error shape, plus the stable error codes.

Every refusal the gateway answers itself is a :class:`GatewayError`, serialised as::

    {"error": {"message": str, "type": str, "param": str | null, "code": str}}

(the shape the OpenAI API and vLLM use; ``reason`` is added for ``invalid_tool_call`` so a
client can tell a parallel-call violation from a schema mismatch). In a stream the same
object is sent as one SSE event, ``data: {"error": {...}}``, followed by ``data: [DONE]``.

Codes: :class:`GatewayCode`, one member per stable code, carrying its HTTP status and a
one-line meaning. A new code is one member there, then regenerate ``docs/errors.md``
(``python -m appliance.error_codes``); tests check the document lists exactly these codes, every
code literal in the source is a member, and a literal status agrees with its code's. Refusals
are built with ``GatewayError.of(code, message, ...)``, which takes the HTTP status from the
code; ``GatewayError(status, code, ...)`` remains for the one code without a status of its own
(``upstream_rejected``, which keeps the engine's 4xx).

Output cut by ``max_tokens`` is not an error: it is a 200 with ``finish_reason: "length"``,
and a cut tool call is withheld (see :mod:`appliance.gateway.chat.response_checks`).
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import ClassVar

from scanner.diagnostic import CodeRegistry, Diagnostic


class GatewayCode(StrEnum):
    """A stable gateway error code with its HTTP status (``None``: the engine's own 4xx
    status is kept) and a one-line meaning. The value is the code string."""

    status: int | None
    meaning: str

    def __new__(cls, code: str, status: int | None, meaning: str) -> GatewayCode:
        member = str.__new__(cls, code)
        member._value_ = code
        member.status = status
        member.meaning = meaning
        return member


    INVALID_HOST = ("invalid_host", 400,
                    "Host header holds / ? # \\ @, whitespace or a control character, "
                    "or appears twice")
    UNAUTHORIZED = ("unauthorized", 401, "missing, malformed or unknown bearer API key")
    NOT_FOUND = ("not_found", 404,
                 "path not on the route allow-list (also /v1/completions, with the reason)")
    METHOD_NOT_ALLOWED = ("method_not_allowed", 405, "route exists, method does not")
    REQUEST_TOO_LARGE = ("request_too_large", 413,
                         "body over max_body_bytes (not buffered past it)")
    REQUEST_HEADER_TOO_LARGE = ("request_header_too_large", 431,
                                "header block over max_header_bytes / header count")
    INVALID_JSON = ("invalid_json", 400,
                    "body is not UTF-8 JSON, has duplicate keys, NaN, ...")
    INVALID_REQUEST = ("invalid_request", 400,
                       "body is not a JSON object / a field has the wrong shape")
    FORBIDDEN_PARAMETER = ("forbidden_parameter", 400,
                           "field outside the OpenAI chat / responses allow-list (engine "
                           "extensions: guided_*, chat_template ...; message fields)")
    INVALID_PARAMETER = ("invalid_parameter", 400,
                         "value out of bounds (n, max_tokens, logit_bias, temperature, "
                         "messages ...)")
    INVALID_SCHEMA = ("invalid_schema", 400,
                      "tool parameters / response_format schema is not a valid JSON Schema "
                      "(pointer in param)")
    UNSUPPORTED_SCHEMA_FEATURE = ("unsupported_schema_feature", 400,
                                  "valid JSON Schema, but a keyword the engine's grammar "
                                  "(xgrammar) does not enforce")
    SCHEMA_TOO_COMPLEX = ("schema_too_complex", 400,
                          "a pattern whose automaton could blow up (grammar limits)")
    MODEL_NOT_FOUND = ("model_not_found", 404,
                       "model (or GET /v1/models/{id}) is not the served model name")
    TOOLS_UNAVAILABLE = ("tools_unavailable", 400,
                         "tools sent but the engine has no vetted tool parser (a setting: "
                         "400, so clients do not retry it)")
    INVALID_TOOL_CALL = ("invalid_tool_call", 502,
                         "engine returned a call that is not valid JSON, not schema-valid, "
                         "for an unknown tool, or too many calls")
    INVALID_STRUCTURED_OUTPUT = ("invalid_structured_output", 502,
                                 "response_format answer not strict JSON (json_schema: also "
                                 "a repeated key), not an object (json_object), or not valid "
                                 "against its schema")
    UPSTREAM_TIMEOUT = ("upstream_timeout", 504,
                        "engine did not answer within request_timeout_s")
    UPSTREAM_UNAVAILABLE = ("upstream_unavailable", 502, "engine connection refused / reset")
    UPSTREAM_ERROR = ("upstream_error", 502, "engine answered 5xx or a malformed response")
    UPSTREAM_REJECTED = ("upstream_rejected", None,
                         "engine refused the request with a 4xx (its status is kept)")
    ENGINE_UNAVAILABLE = ("engine_unavailable", 503, "readiness probe failed, or this model's "
                          "engine was given up after a crash loop (several models)")
    INTERNAL_ERROR = ("internal_error", 500, "bug in the gateway (logged with the request id)")
    UNSUPPORTED_ON_ENGINE = ("unsupported_on_engine", 400,
                             "a field the installed engine cannot survive "
                             "(policies/engine-quirks.json; param = the field, reason = the "
                             "quirk id)")
    UNSUPPORTED_COMBINATION = ("unsupported_combination", 400,
                               "stop with grammar-constrained output")
    RATE_LIMITED = ("rate_limited", 429,
                    "over the key's concurrent / rpm / tpm limit (Retry-After)")
    QUOTA_EXCEEDED = ("quota_exceeded", 429,
                      "over the key's (or group's) daily / monthly token quota (Retry-After: "
                      "until the UTC day or month turns)")
    OVERLOADED = ("overloaded", 503,
                  "over the global in-flight bound, or could not start within "
                  "max_queue_wait_s (Retry-After from the measured service rate)")
    ADMISSION_UNAVAILABLE = ("admission_unavailable", 503,
                             "the shared admission store (Redis) is unreachable: refused "
                             "(fail closed) until it answers again")
    ENGINE_RESTARTING = ("engine_restarting", 503,
                         "the engine died and is being restarted (Retry-After); also ends "
                         "in-flight requests")
    SHUTTING_DOWN = ("shutting_down", 503, "SIGTERM drain or crash loop: no new requests")
    MODEL_NOT_ALLOWED = ("model_not_allowed", 403,
                         "the model is served but not on the key's / group's models "
                         "allow-list")
    SOURCE_NOT_ALLOWED = ("source_not_allowed", 403,
                          "the request's source address is outside [gateway] "
                          "allowed_sources or the key's / group's allowed_sources")
    # OIDC bearer tokens ([auth.oidc], appliance.gateway.auth.oidc)
    TOKEN_MALFORMED = ("token_malformed", 401, "bearer JWT is not three base64url parts with "
                       "a JSON header, or PyJWT cannot decode it")
    TOKEN_ALG_NONE = ("token_alg_none", 401, "the JWT is unsigned (alg none)")
    TOKEN_ALG_NOT_ALLOWED = ("token_alg_not_allowed", 401,
                             "JWT alg not in [auth.oidc] algorithms (HS256 with the public "
                             "key as secret ...) or not the key's type")
    TOKEN_UNKNOWN_KID = ("token_unknown_kid", 401, "the JWT's kid names no key of the JWKS")
    TOKEN_BAD_SIGNATURE = ("token_bad_signature", 401, "the JWT signature does not verify")
    TOKEN_EXPIRED = ("token_expired", 401, "the JWT's exp (plus clock_skew_s) has passed")
    TOKEN_NOT_YET_VALID = ("token_not_yet_valid", 401,
                           "the JWT's nbf / iat (minus clock_skew_s) is in the future")
    TOKEN_WRONG_ISSUER = ("token_wrong_issuer", 401, "the JWT's iss is not [auth.oidc] issuer")
    TOKEN_WRONG_AUDIENCE = ("token_wrong_audience", 401,
                            "[auth.oidc] audience is not in the JWT's aud")
    TOKEN_MISSING_CLAIM = ("token_missing_claim", 401, "the JWT lacks exp / iss / aud / the "
                           "subject, or subject / groups have the wrong shape")
    TOKEN_GROUP_NOT_ALLOWED = ("token_group_not_allowed", 403, "valid JWT whose groups are "
                               "not in [auth.groups] and no [auth.oidc] default_limits")

    @classmethod
    def parse(cls, code: str) -> GatewayCode:
        """The member for ``code``; ``ValueError`` when it is not a gateway code."""
        if isinstance(code, GatewayCode):
            return code
        try:
            return _BY_CODE[code]
        except KeyError:
            raise ValueError(f"{code!r} is not a registered gateway code") from None


_BY_CODE: dict[str, GatewayCode] = {str.__str__(c): c for c in GatewayCode}

GATEWAY_CODES = CodeRegistry("gateway", {str(c): c.meaning for c in GatewayCode})
"""The :class:`GatewayCode` members as a :class:`~scanner.diagnostic.CodeRegistry`."""


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

    Attributes: ``status`` (HTTP status), ``code`` (the stable code string; ``gateway_code``
    is its :class:`GatewayCode`), ``message`` (human text naming the field and the fix),
    ``param`` (the offending field or JSON pointer, or ``None``), ``reason`` (sub-kind for
    ``invalid_tool_call``), ``headers`` (extra response headers, lower-case bytes pairs).
    ``code`` must be a :class:`GatewayCode` (or its string): ``ValueError`` otherwise.
    """

    registry: ClassVar[CodeRegistry] = GATEWAY_CODES

    def __init__(
        self,
        status: int,
        code: str | GatewayCode,
        message: str,
        *,
        param: str | None = None,
        reason: str | None = None,
        headers: tuple[tuple[bytes, bytes], ...] = (),
    ) -> None:
        super().__init__(message)
        self.gateway_code = GatewayCode.parse(code)
        self.status = status
        self.code: str = str(self.gateway_code)
        self.message = message
        self.param = param
        self.reason = reason
        self.headers = headers

    @classmethod
    def of(
        cls,
        code: str | GatewayCode,
        message: str,
        *,
        param: str | None = None,
        reason: str | None = None,
        headers: tuple[tuple[bytes, bytes], ...] = (),
    ) -> GatewayError:
        """The error for ``code`` (a :class:`GatewayCode` or its string) with the status the
        code carries (400 for ``upstream_rejected``, whose status is normally the engine's).
        The way every refusal is built: the status is never written beside the code."""
        member = GatewayCode.parse(code)
        return cls(member.status or 400, member, message, param=param, reason=reason,
                   headers=headers)

    @property
    def diagnostic(self) -> Diagnostic:
        """The error as a :class:`~scanner.diagnostic.Diagnostic` (``at`` = ``param``)."""
        return Diagnostic(self.code, self.message, self.param)

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
