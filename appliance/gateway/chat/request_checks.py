"""Validation of ``POST /v1/chat/completions`` bodies before anything reaches the engine.

Allow-list, not deny-list: only the OpenAI chat fields below (plus three bounded vLLM
sampling knobs and vetted ``chat_template_kwargs`` keys) are accepted; the fields both routes
answer alike (``metadata``, ``store``, ``service_tier``, ``reasoning_effort``) and the OpenAI
fields refused by design, with their reasons, are in :mod:`..openai_fields`; every other field
(``guided_*``, ``structured_outputs``, ``chat_template``, ``prompt_embeds``,
``mm_processor_kwargs``, ``media_io_kwargs``, ``custom_generate``, …) is refused with
``forbidden_parameter`` (advisories CVE-2025-61620, CVE-2025-62426, CVE-2025-62164).
Sampling values are bounded (GHSA-3mwp-wvh9-7528 / CVE-2026-34756: huge ``n``, negative
``max_tokens``, out-of-vocabulary ``logit_bias``). Schemas go through
:mod:`appliance.gateway.schema.subset`. The body forwarded to the engine is re-serialised
from the checked values, so duplicate keys or parser differentials cannot smuggle fields.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from jsonschema.protocols import Validator

from scanner.readers import loads_strict as _strict_json

from .. import fastjson
from ..errors import GatewayError
from ..models.quirks import check_quirks
from ..openai_fields import SHARED, check_modalities, check_shared, unknown_field
from ..schema.subset import SchemaCache, SchemaProblem
from ..settings import GatewaySettings
from .bounds import (
    BOOLEAN,
    LOGIT_BIAS,
    LOGIT_BIAS_LIMIT,
    NUMERIC,
    STOP_MAX_CHARS,
    TOKEN_ID_MAX_DIGITS,
    USER_MAX_CHARS,
)
from .combinations import check_combinations
from .message_fields import clean_message

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {},
                                 "additionalProperties": False, "const": {}}
"""A function declared without ``parameters`` (or with ``null``) takes none: OpenAI's function
definition says omitting ``parameters`` defines an empty parameter list. This schema admits
only ``{}`` and replaces the missing one for the grammar, the engine and the call check, so the
model cannot invent arguments (``fn(**json.loads(arguments))`` must not get a ``TypeError``).
``const`` makes xgrammar compile the literal ``{}`` (``root ::= "{}"``): without it the grammar
is ``"{" [ \n\r\t]* "}"``, and the small demo model ran to ``max_tokens`` on whitespace
inside the braces in 1 of 3 calls (the hermes structural tag that ``--tool-strict-level
parameter`` uses has no whitespace bound in vLLM 0.32). An object schema the user wrote stays
exactly as written."""


@dataclass(slots=True)
class ChatRequest:
    """A checked chat request.

    ``body`` is the JSON forwarded to the engine; ``tools`` maps each offered function
    name to the validator of its ``parameters``; ``tool_choice`` is ``"none"``, ``"auto"``,
    ``"required"`` or ``"named"`` (then ``named_tool`` holds the name); ``response_format``
    is ``None``, ``"text"``, ``"json_object"`` or ``"json_schema"``.
    """

    body: bytes
    stream: bool = False
    include_usage: bool = False
    n: int = 1
    tools: dict[str, Validator] = field(default_factory=dict)
    tool_choice: str = "auto"
    named_tool: str | None = None
    parallel_tool_calls: bool = True
    response_format: str | None = None
    response_validator: Validator | None = None
    api: Any = None  # context of an API mapped onto chat (the Responses request), or None
    model: str = ""  # the served model it is for (routes it: appliance.gateway.models.table)

    @property
    def forced_tool(self) -> bool:
        """True when the grammar must produce at least one call (required / named)."""
        return bool(self.tools) and self.tool_choice in ("required", "named")

    @property
    def structured(self) -> bool:
        """True when the answer's content must be JSON (``response_format`` json_*)."""
        return self.response_format in ("json_object", "json_schema")


def _bad(param: str, message: str, code: str = "invalid_parameter") -> GatewayError:
    return GatewayError.of(code, message, param=param)


def loads_strict(raw: bytes | str, *, duplicate_keys: bool = False) -> Any:
    """Parse untrusted JSON with the scanner's strict parser (duplicate keys, NaN/Infinity,
    overflowing numbers, BOM and nesting deeper than 128 refused; ``duplicate_keys=True``
    lets repeated keys through, for answers nothing validates member by member).

    Raises ``ValueError`` (``scanner.core.strict_json.JSONProblem`` or ``UnicodeEncodeError``)."""
    data = raw if isinstance(raw, bytes) else raw.encode("utf-8")
    return _strict_json(data, max_depth=128, duplicate_keys=duplicate_keys)


def _check_content(content: Any, param: str, role: str) -> None:
    if content is None and role == "assistant":
        return
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise _bad(param, "content must be a string or an array of text parts")
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        if not isinstance(part, dict) or part.get("type") != "text":
            raise _bad(f"{where}.type", "only text content parts are accepted (text-only model)",
                       "forbidden_parameter")
        if set(part) - {"type", "text"} or not isinstance(part.get("text"), str):
            raise _bad(where, "a text part is {\"type\": \"text\", \"text\": str}")


def tool_call_parts(item: Any) -> tuple[str, str] | None:
    """``(name, arguments)`` of an OpenAI tool call ``{type: function, function: {name,
    arguments: str}}`` (``type`` may be absent), or ``None`` for any other shape."""
    fn = item.get("function") if isinstance(item, dict) else None
    if (not isinstance(fn, dict) or item.get("type", "function") != "function"
            or not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments"), str)):
        return None
    return fn["name"], fn["arguments"]


def _check_messages(value: Any, settings: GatewaySettings) -> list[dict[str, Any]]:
    """The messages to forward (dropped fields removed, :mod:`.message_fields`)."""
    if not isinstance(value, list) or not value:
        raise _bad("messages", "messages must be a non-empty array")
    if len(value) > settings.max_messages:
        raise _bad("messages", f"at most {settings.max_messages} messages are accepted")
    cleaned = []
    for i, msg in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise _bad(where, "each message must be an object")
        role = msg.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise _bad(f"{where}.role", f"role must be one of {sorted(ROLES)}")
        out = clean_message(msg, where)
        _check_content(out.get("content"), f"{where}.content", role)
        if role == "tool" and not isinstance(out.get("tool_call_id"), str):
            raise _bad(f"{where}.tool_call_id", "tool messages need a tool_call_id string")
        cleaned.append(out)
    return cleaned


def _schema(cache: SchemaCache, schema: Any, param: str) -> Validator:
    try:
        return cache.get(schema)
    except SchemaProblem as exc:
        pointer = param + exc.pointer
        raise GatewayError.of(exc.code, f"{pointer}: {exc.message}", param=pointer) from None


def _check_tools(value: Any, settings: GatewaySettings, cache: SchemaCache,
                 req: ChatRequest) -> None:
    if not isinstance(value, list):
        raise _bad("tools", "tools must be an array")
    if len(value) > settings.max_tools:
        raise _bad("tools", f"at most {settings.max_tools} tools are accepted")
    for i, tool in enumerate(value):
        where = f"/tools/{i}"
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or tool.get("type") != "function" or set(tool) - {
                "type", "function"}:
            raise _bad(where, "a tool is {\"type\": \"function\", \"function\": {...}}")
        extra = set(fn) - {"name", "description", "parameters", "strict"}
        if extra:
            raise _bad(f"{where}/function/{sorted(extra)[0]}", "unknown function field",
                       "forbidden_parameter")
        name = fn.get("name")
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            raise _bad(f"{where}/function/name", "function names match [A-Za-z0-9_-]{1,64}")
        if name in req.tools:
            raise _bad(f"{where}/function/name", f"duplicate function name {name!r}")
        if not isinstance(fn.get("description", ""), str) or not isinstance(
                fn.get("strict", False), bool):
            raise _bad(f"{where}/function", "description must be a string, strict a boolean")
        if fn.get("parameters") is None:
            fn["parameters"] = dict(NO_PARAMETERS)  # forwarded too: the grammar admits only {}
        params = fn["parameters"]
        pointer = f"{where}/function/parameters"
        if not isinstance(params, dict) or params.get("type") != "object":
            raise GatewayError.of("invalid_schema", f"{pointer}: tool parameters must be an "
                                  "object schema with \"type\": \"object\"", param=pointer)
        req.tools[name] = _schema(cache, params, pointer)


def _check_tool_choice(value: Any, req: ChatRequest) -> None:
    if value in ("none", "auto", "required"):
        req.tool_choice = value
    elif (isinstance(value, dict) and value.get("type") == "function" and set(value) == {
            "type", "function"} and isinstance(value["function"], dict)
            and set(value["function"]) == {"name"}
            and isinstance(value["function"]["name"], str)):
        req.tool_choice = "named"
        req.named_tool = value["function"]["name"]
        if req.named_tool not in req.tools:
            raise _bad("tool_choice", f"tool_choice names {req.named_tool!r}, not an offered tool")
    else:
        raise _bad("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or "
                   "{\"type\": \"function\", \"function\": {\"name\": ...}}")
    if not req.tools and value != "none":
        raise _bad("tool_choice", "tool_choice needs a non-empty tools array")


def _check_response_format(value: Any, cache: SchemaCache, req: ChatRequest) -> None:
    kind = value.get("type") if isinstance(value, dict) else None
    if kind in ("text", "json_object") and set(value) == {"type"}:
        req.response_format = kind
        return
    if kind != "json_schema":
        raise _bad("response_format.type", "response_format type must be text, json_object "
                   "or json_schema", "forbidden_parameter" if isinstance(kind, str) else
                   "invalid_parameter")
    spec = value.get("json_schema")
    if set(value) != {"type", "json_schema"} or not isinstance(spec, dict):
        raise _bad("response_format", "json_schema response_format is {type, json_schema}")
    extra = set(spec) - {"name", "schema", "strict", "description"}
    if extra:
        raise _bad(f"response_format.json_schema.{sorted(extra)[0]}", "unknown field",
                   "forbidden_parameter")
    if not isinstance(spec.get("name"), str) or not NAME_RE.fullmatch(spec["name"]):
        raise _bad("response_format.json_schema.name", "name matches [A-Za-z0-9_-]{1,64}")
    if "schema" not in spec:
        raise _bad("response_format.json_schema.schema", "a schema is required")
    req.response_format = "json_schema"
    req.response_validator = _schema(cache, spec["schema"], "/response_format/json_schema/schema")


def _check_logit_bias(value: Any, settings: GatewaySettings) -> None:
    if not isinstance(value, dict):
        raise _bad("logit_bias", "logit_bias must map token ids to biases")
    if settings.vocab_size is None and value:
        raise _bad("logit_bias", "logit_bias is disabled: the gateway has no vocab_size")
    if len(value) > settings.max_logit_bias:
        raise _bad("logit_bias", f"at most {settings.max_logit_bias} logit_bias entries")
    vocab = settings.vocab_size or 0
    for key, bias in value.items():
        if not (key.isascii() and key.isdigit() and len(key) <= TOKEN_ID_MAX_DIGITS
                and int(key) < vocab):
            raise _bad("logit_bias", f"token id {key[:20]!r} must be an integer in [0, {vocab})")
        if not LOGIT_BIAS.accepts(bias, settings):
            raise _bad("logit_bias", f"bias for token {key} must be a number in "
                       f"[{-LOGIT_BIAS_LIMIT}, {LOGIT_BIAS_LIMIT}]")


def _check_stop(value: Any, settings: GatewaySettings) -> None:
    items = [value] if isinstance(value, str) else value
    if value is None:
        return
    if not isinstance(items, list) or len(items) > settings.max_stop or not all(
            isinstance(s, str) and 0 < len(s) <= STOP_MAX_CHARS for s in items):
        raise _bad("stop", f"stop is a string or up to {settings.max_stop} strings "
                   f"(1..{STOP_MAX_CHARS} chars)")


def _check_simple(body: dict[str, Any], key: str, settings: GatewaySettings) -> None:
    value = body[key]
    bound = NUMERIC.get(key)
    if bound is not None:
        if not bound.accepts(value, settings):
            raise _bad(key, bound.message(key, settings))
        if key == "top_logprobs" and body.get("logprobs") is not True:
            raise _bad(key, "top_logprobs needs logprobs: true")
    elif key in BOOLEAN:
        if not isinstance(value, bool):
            raise _bad(key, f"{key} must be a boolean")
    elif key == "user":
        if not isinstance(value, str) or len(value) > USER_MAX_CHARS:
            raise _bad(key, f"user must be a string of at most {USER_MAX_CHARS} characters")
    elif key == "stop":
        _check_stop(value, settings)
    elif key == "logit_bias":
        _check_logit_bias(value, settings)


SIMPLE = frozenset({
    "max_tokens", "max_completion_tokens", "n", "temperature", "top_p", "frequency_penalty",
    "presence_penalty", "seed", "top_logprobs", "top_k", "min_p", "repetition_penalty",
    "logprobs", "parallel_tool_calls", "stream", "user", "stop", "logit_bias",
})
STRUCTURED = frozenset({
    "model", "messages", "tools", "tool_choice", "response_format", "stream_options",
    "chat_template_kwargs",
})
TAKEN = frozenset({*SHARED, "modalities"})
"""Accepted with a harmless value and never forwarded (:mod:`..openai_fields`)."""
ALLOWED_FIELDS = SIMPLE | STRUCTURED | TAKEN


def _check_stream_options(body: dict[str, Any], req: ChatRequest) -> None:
    value = body["stream_options"]
    if value is None:
        return
    if not req.stream:
        raise _bad("stream_options", "stream_options is only allowed with stream: true")
    if not isinstance(value, dict):
        raise _bad("stream_options", "stream_options must be an object")
    for key in value:
        if key != "include_usage":
            raise _bad(f"stream_options.{key}", f"stream_options.{key} is not accepted")
    usage = value.get("include_usage", False)
    if not isinstance(usage, bool):
        raise _bad("stream_options", "stream_options.include_usage must be a boolean")
    req.include_usage = usage


def _check_template_kwargs(value: Any, settings: GatewaySettings) -> None:
    if not isinstance(value, dict):
        raise _bad("chat_template_kwargs", "chat_template_kwargs must be an object",
                   "forbidden_parameter")
    for key, flag in value.items():
        if key not in settings.chat_template_kwargs_allowed or not isinstance(flag, bool):
            raise _bad(f"chat_template_kwargs.{key}", "only vetted boolean chat_template_kwargs "
                       f"{list(settings.chat_template_kwargs_allowed)} are accepted",
                       "forbidden_parameter")


def check_chat_request(raw: bytes, settings: GatewaySettings, cache: SchemaCache) -> ChatRequest:
    """Check a raw request body; return the :class:`ChatRequest` to forward.

    Raises :class:`GatewayError` (400 ``invalid_json`` / ``invalid_request`` /
    ``forbidden_parameter`` / ``invalid_parameter`` / ``invalid_schema`` /
    ``unsupported_schema_feature`` / ``tools_unavailable``, 404 ``model_not_found``).
    """
    try:
        body = loads_strict(raw)
    except (ValueError, RecursionError) as exc:
        raise GatewayError.of("invalid_json", f"request body is not valid JSON: {exc}"
                              [:300]) from None
    if not isinstance(body, dict):
        raise GatewayError.of("invalid_request", "request body must be a JSON object")
    for key in body:
        if key not in ALLOWED_FIELDS:
            raise unknown_field(key, "chat")
    check_shared(body)  # the same answer as /v1/responses gives; removed: never forwarded
    check_modalities(body)
    for key in [k for k, v in body.items() if v is None and k in SIMPLE]:
        del body[key]  # null = absent (OpenAI's schema makes these nullable); not forwarded
    req = ChatRequest(body=b"")
    model = body.get("model", settings.default_model.name)
    if not isinstance(model, str) or not any(m.name == model for m in settings.models):
        raise GatewayError.of("model_not_found", f"model {str(model)[:100]!r} is not served "
                              "here; GET /v1/models lists the models you may use",
                              param="model")
    req.model = model
    body["messages"] = _check_messages(body.get("messages"), settings)
    for key in body:
        if key in SIMPLE:
            _check_simple(body, key, settings)
    req.stream = body.get("stream", False) is True
    req.n = body.get("n", 1)
    req.parallel_tool_calls = body.get("parallel_tool_calls", True)
    if "stream_options" in body:
        _check_stream_options(body, req)
    if "chat_template_kwargs" in body:
        _check_template_kwargs(body["chat_template_kwargs"], settings)
    tools = body.get("tools")
    if tools:
        if not settings.tools_enabled:
            # 400, not 503: a setting, not a passing state (clients retry a 503; schemathesis)
            raise GatewayError.of("tools_unavailable", "tool calling is not enabled on this "
                                  "appliance (the engine runs without a vetted tool parser)",
                                  param="tools")
        _check_tools(tools, settings, cache, req)
    elif tools is not None and not isinstance(tools, list):
        raise _bad("tools", "tools must be an array")
    if "tool_choice" in body:
        _check_tool_choice(body["tool_choice"], req)
    if body.get("response_format") is not None:
        _check_response_format(body["response_format"], cache, req)
    check_quirks(body, settings.engine_quirks, settings.engine_name)
    check_combinations(body)
    body["model"] = model
    if req.stream:  # the engine's usage chunk for metrics and audit; relayed only if asked
        body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    if "max_tokens" not in body and "max_completion_tokens" not in body:
        body["max_tokens"] = settings.max_tokens_cap
    try:
        req.body = fastjson.dumps(body)
    except (UnicodeEncodeError, RecursionError, ValueError):
        raise GatewayError.of("invalid_json", "request body holds unpaired surrogates or "
                              "nests too deeply") from None
    return req
