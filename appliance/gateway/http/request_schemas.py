"""JSON Schemas (2020-12, as OpenAPI 3.1 uses them) of the request bodies the gateway accepts.

Built from the same tables the checks use, so the document cannot drift from them:
:data:`.chat.request_checks.ALLOWED_FIELDS` (chat top-level fields), :mod:`.chat.bounds` (every
scalar field's range and limit), :mod:`.chat.message_fields`
(``FORWARDED`` / ``RESPONSE_ONLY`` / ``CLIENT_ECHO`` / ``CALL_KEYS`` / ``FUNCTION_KEYS``),
:data:`.responses.ACCEPTED` / ``FIXED`` / ``MESSAGE_ROLES`` (``/v1/responses``), and the bounds of
:class:`.settings.GatewaySettings` (``max_n``, ``max_tokens_cap``, ``max_messages``, ``max_tools``,
``max_stop``, ``max_top_logprobs``, ``vocab_size``, ``max_logit_bias``,
``chat_template_kwargs_allowed``, ``tools_enabled``, ``engine_quirks``). Every builder raises
``KeyError`` at document build time if a table holds a field without a schema here.

What JSON Schema cannot say is stated in ``description`` and enforced by the checks only:
tool ``parameters`` / ``json_schema.schema`` must be in the xgrammar subset
(:mod:`.schema.subset`), function names must be unique, a named ``tool_choice`` must name an
offered tool, ``stop`` cannot be combined with grammar-constrained output
(:mod:`.combinations`). Each schema is therefore *at least as wide* as what is accepted and
equal to it wherever JSON Schema can express the rule (so anything outside it is refused).
"""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator

from ..chat.bounds import (
    BOOLEAN,
    LOGIT_BIAS,
    NUMERIC,
    STOP_MAX_CHARS,
    TOKEN_ID_MAX_DIGITS,
    USER_MAX_CHARS,
)
from ..chat.message_fields import CALL_KEYS, CLIENT_ECHO, FORWARDED, FUNCTION_KEYS, RESPONSE_ONLY
from ..chat.request_checks import ALLOWED_FIELDS, NAME_RE, NO_PARAMETERS, ROLES, SIMPLE
from ..openai_fields import MODALITIES_TEXT, REFUSED, SHARED
from ..responses import ACCEPTED, FIXED, MESSAGE_ROLES
from ..schema.subset import ALLOWED as SCHEMA_KEYWORDS
from ..settings import GatewaySettings

Schema = dict[str, Any]
NAME_PATTERN = "^" + NAME_RE.pattern + "$"
NULL: Schema = {"type": "null"}
ANY: Schema = {}
SUBSET_NOTE = ("a JSON Schema in the subset the engine's grammar enforces (keywords: "
               + ", ".join(sorted(SCHEMA_KEYWORDS)) + "); anything else is 400 "
               "invalid_schema / unsupported_schema_feature / schema_too_complex")


def _nullable(schema: Schema) -> Schema:
    return {"anyOf": [NULL, schema]}


def below_regex(limit: int) -> str:
    """A regex matching the decimal integers in ``[0, limit)`` without leading zeros
    (``limit >= 1``)."""
    top = str(limit - 1)
    alts: list[str] = []
    for length in range(1, len(top)):
        alts.append("[0-9]" if length == 1 else f"[1-9][0-9]{{{length - 1}}}")
    for i, ch in enumerate(top):
        lo = 1 if i == 0 and len(top) > 1 else 0
        hi = int(ch) - 1
        if hi >= lo:
            rest = len(top) - i - 1
            alts.append(top[:i] + f"[{lo}-{hi}]" + (f"[0-9]{{{rest}}}" if rest else ""))
    alts.append(top)
    return "(?:" + "|".join(alts) + ")"


# -- chat completions -------------------------------------------------------------------------
def _text_part() -> Schema:
    return {"type": "object", "required": ["type", "text"], "additionalProperties": False,
            "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}


def _content(nullable: bool) -> Schema:
    options: list[Schema] = [{"type": "string"}, {"type": "array", "items": _text_part()}]
    return {"anyOf": [NULL, *options] if nullable else options}


def _history_call() -> Schema:
    fields: dict[str, Schema] = {"id": {"type": "string"}, "type": {"const": "function"},
                                 "function": {}, "index": ANY}
    fn: dict[str, Schema] = {"name": {"type": "string"}, "arguments": {"type": "string"},
                             "parsed_arguments": ANY}
    fields["function"] = {"type": "object", "required": ["name", "arguments"],
                          "additionalProperties": False,
                          "properties": {k: fn[k] for k in sorted(FUNCTION_KEYS)}}
    return {"type": "object", "required": ["id", "function"], "additionalProperties": False,
            "properties": {k: fields[k] for k in sorted(CALL_KEYS)}}


def _message(role: str) -> Schema:
    """One ``messages[]`` item of ``role`` (:mod:`.chat.message_fields`)."""
    assistant = role == "assistant"
    optional_string = _nullable({"type": "string"})
    fields: dict[str, Schema] = {
        "role": {"const": role}, "content": _content(assistant), "name": optional_string,
        "tool_call_id": {"type": "string"} if role == "tool" else optional_string,
        "refusal": optional_string, "reasoning": optional_string,
        "reasoning_content": optional_string,
        "tool_calls": _nullable({"type": "array", "items": _history_call()} if assistant
                                else {"type": "array", "maxItems": 0}),
    }
    echo: dict[str, Schema] = {
        "annotations": _nullable({"type": "array", "maxItems": 0}), "audio": NULL,
        "function_call": NULL, "parsed": ANY,
        "provider_specific_fields": _nullable({"type": "object"}),
    }
    keys = sorted(FORWARDED | (RESPONSE_ONLY | CLIENT_ECHO if assistant else frozenset()))
    required = ["role"] + ([] if assistant else ["content"]) + (
        ["tool_call_id"] if role == "tool" else [])
    return {"type": "object", "title": f"{role} message", "required": required,
            "additionalProperties": False,
            "properties": {k: fields[k] if k in fields else echo[k] for k in keys}}


KEYWORDS: Schema = {"enum": sorted(SCHEMA_KEYWORDS)}


NO_PARAMETERS_NOTE = ("omitted or null: the function takes no arguments (OpenAI: omitting "
                      "parameters defines an empty parameter list); its calls' arguments are "
                      "always {} (the schema " + json.dumps(NO_PARAMETERS) + " is used)")


def _parameters() -> Schema:
    return {"type": "object", "required": ["type"], "properties": {"type": {"const": "object"}},
            "propertyNames": KEYWORDS, "description": "tool parameters: " + SUBSET_NOTE + "; "
            + NO_PARAMETERS_NOTE}


def _chat_tools(settings: GatewaySettings) -> Schema:
    if not settings.tools_enabled:
        return {"anyOf": [NULL, {"type": "array", "maxItems": 0}],
                "description": "tool calling is not enabled on this appliance (tools_enabled)"}
    fn = {"type": "object", "required": ["name"], "additionalProperties": False,
          "properties": {"name": {"type": "string", "pattern": NAME_PATTERN},
                         "description": {"type": "string"},
                         "parameters": _nullable(_parameters()),
                         "strict": {"type": "boolean"}}}
    tool = {"type": "object", "required": ["type", "function"], "additionalProperties": False,
            "properties": {"type": {"const": "function"}, "function": fn}}
    return _nullable({"type": "array", "maxItems": settings.max_tools, "items": tool,
                      "description": "function names are unique"})


def _chat_tool_choice() -> Schema:
    named = {"type": "object", "required": ["type", "function"], "additionalProperties": False,
             "properties": {"type": {"const": "function"}, "function": {
                 "type": "object", "required": ["name"], "additionalProperties": False,
                 "properties": {"name": {"type": "string"}}}}}
    return {"anyOf": [{"enum": ["none", "auto", "required"]}, named],
            "description": "a named function must be one of tools"}


def _json_schema_format(name_key: str | None) -> Schema:
    """``response_format`` json_schema (``name_key`` = the object holding name/schema, or
    ``None`` when they sit beside ``type`` as in ``text.format``)."""
    spec: Schema = {"type": "object", "required": ["name", "schema"],
                    "properties": {"name": {"type": "string", "pattern": NAME_PATTERN},
                                   "schema": {"type": ["object", "boolean"],
                                              "propertyNames": KEYWORDS,
                                              "description": SUBSET_NOTE},
                                   "strict": ANY, "description": ANY}}
    if name_key is None:
        spec["properties"]["type"] = {"const": "json_schema"}
        spec["required"] = ["type", "name", "schema"]
        spec["additionalProperties"] = False
        return spec
    spec["additionalProperties"] = False
    return {"type": "object", "required": ["type", name_key], "additionalProperties": False,
            "properties": {"type": {"const": "json_schema"}, name_key: spec}}


def _plain_formats() -> list[Schema]:
    return [{"type": "object", "required": ["type"], "additionalProperties": False,
             "properties": {"type": {"const": kind}}} for kind in ("text", "json_object")]


def _stop(settings: GatewaySettings) -> Schema:
    one = {"type": "string", "minLength": 1, "maxLength": STOP_MAX_CHARS}
    many = {"type": "array", "maxItems": settings.max_stop, "items": one}
    return {"anyOf": [NULL, one, many] if settings.max_stop else [NULL, {
        "type": "array", "maxItems": 0}],
        "description": "not with grammar-constrained output (tools, json response_format)"}


def _logit_bias(settings: GatewaySettings) -> Schema:
    if settings.vocab_size is None:
        return {"type": "object", "maxProperties": 0,
                "description": "disabled: the gateway has no vocab_size"}
    return {"type": "object", "maxProperties": settings.max_logit_bias,
            "propertyNames": {"maxLength": TOKEN_ID_MAX_DIGITS,
                              "pattern": f"^0*{below_regex(settings.vocab_size)}$"},
            "additionalProperties": LOGIT_BIAS.schema(settings)}


def served_names(settings: GatewaySettings) -> Schema:
    """The ``model`` values accepted: the one served name (``const``) or several (``enum``,
    the routing table's names, :mod:`.upstreams`)."""
    names = [m.name for m in settings.models]
    return {"const": names[0]} if len(names) == 1 else {"enum": names}


def _chat_fields(settings: GatewaySettings) -> dict[str, Schema]:
    fields = _chat_values(settings)
    for key in SIMPLE:  # null = absent for every simple field (request_checks drops it)
        if not Draft202012Validator(fields[key]).is_valid(None):
            fields[key] = _nullable(fields[key])
    return fields


def _chat_values(settings: GatewaySettings) -> dict[str, Schema]:
    boolean: Schema = {"type": "boolean"}
    return {
        "model": served_names(settings),
        "messages": {"type": "array", "minItems": 1, "maxItems": settings.max_messages,
                     "items": {"oneOf": [_message(r) for r in sorted(ROLES)]}},
        **{key: bound.schema(settings) for key, bound in NUMERIC.items()},
        **{key: boolean for key in BOOLEAN},
        "user": {"type": "string", "maxLength": USER_MAX_CHARS}, "stop": _stop(settings),
        "logit_bias": _logit_bias(settings), "tools": _chat_tools(settings),
        "tool_choice": _chat_tool_choice(),
        "response_format": {"anyOf": [NULL, *_plain_formats(), _json_schema_format(
            "json_schema")]},
        "stream_options": {"type": ["object", "null"], "additionalProperties": False,
                           "properties": {"include_usage": boolean}},
        "chat_template_kwargs": {
            "type": "object", "additionalProperties": False,
            "properties": {k: boolean for k in settings.chat_template_kwargs_allowed}},
        **{name: field.schema() for name, field in SHARED.items()},
        "modalities": {**MODALITIES_TEXT, "description": "ignored (not forwarded): "
                       + REFUSED["modalities"]},
    }


# Responses fields that become a quirk's chat feature (responses.to_chat).
RESPONSES_FEATURES = {"max_tokens": "max_output_tokens", "response_format": "text",
                      "messages": "input"}


def _refused(original: Schema, note: str) -> Schema:
    """What is left of ``original`` when any non-null value is refused: ``null`` if the
    checks accept ``null`` there, else nothing (the field must be absent)."""
    if Draft202012Validator(original).is_valid(None):
        return {"type": "null", "description": note}
    return {"not": {}, "description": note}


def _apply_quirks(body: Schema, settings: GatewaySettings, responses: bool = False) -> None:
    """A field an engine quirk refuses (:mod:`.quirks`: used = present and not ``null``)."""
    props = body["properties"]
    for quirk in settings.engine_quirks:
        note = f"refused on {settings.engine_name} (engine quirk {quirk.id}): {quirk.fix}"
        *parents, leaf = quirk.feature.split(".")
        if responses:
            if parents == ["stream_options"] or quirk.feature == "stream_options":
                props["stream"] = {"const": False, "description": note}  # stream adds usage
                continue
            if not parents and leaf in RESPONSES_FEATURES:
                leaf = RESPONSES_FEATURES[leaf]
        node = body
        for part in parents:
            node = node.get("properties", {}).get(part, {})
        if leaf in node.get("properties", {}):
            node["properties"][leaf] = _refused(node["properties"][leaf], note)


# Cross-field rules JSON Schema can say (dependentSchemas), shared by both bodies' checks.
NEEDS_TOOLS: Schema = {"anyOf": [{"properties": {"tool_choice": {"const": "none"}}},
                                 {"required": ["tools"],
                                  "properties": {"tools": {"type": "array", "minItems": 1}}}]}

EMPTY: Schema = {"anyOf": [NULL, {"type": "array", "maxItems": 0}]}
# combinations.py: a non-empty stop only with unconstrained output.
STOP_UNCONSTRAINED: Schema = {"anyOf": [
    {"properties": {"stop": EMPTY}},
    {"allOf": [
        {"anyOf": [{"properties": {"tools": EMPTY}},
                   {"required": ["tool_choice"],
                    "properties": {"tool_choice": {"const": "none"}}}]},
        {"properties": {"response_format": {"anyOf": [
            NULL, {"properties": {"type": {"const": "text"}}}]}}},
    ]},
]}


def chat_request(settings: GatewaySettings) -> Schema:
    """The ``POST /v1/chat/completions`` body schema under ``settings``."""
    fields = _chat_fields(settings)
    body: Schema = {
        "type": "object", "title": "ChatCompletionRequest", "required": ["messages"],
        "additionalProperties": False,
        "properties": {k: fields[k] for k in sorted(ALLOWED_FIELDS)},
        "dependentSchemas": {
            "top_logprobs": {"required": ["logprobs"],
                             "properties": {"logprobs": {"const": True}}},
            "stream_options": {"anyOf": [{"properties": {"stream_options": NULL}},
                                         {"required": ["stream"],
                                          "properties": {"stream": {"const": True}}}]},
            "tool_choice": NEEDS_TOOLS,
            "stop": STOP_UNCONSTRAINED,
        },
    }
    _apply_quirks(body, settings)
    return body


# -- responses --------------------------------------------------------------------------------
def _input_part(kinds: tuple[str, ...]) -> Schema:
    return {"type": "object", "required": ["type", "text"], "additionalProperties": False,
            "properties": {"type": {"enum": list(kinds)}, "text": {"type": "string"},
                           "annotations": _nullable({"type": "array", "maxItems": 0}),
                           "logprobs": ANY}}


def _input_content(kinds: tuple[str, ...]) -> Schema:
    return {"anyOf": [{"type": "string"}, {"type": "array", "items": _input_part(kinds)}]}


def _input_items() -> list[Schema]:
    echo: dict[str, Schema] = {"id": ANY, "status": ANY}
    messages = []
    for role in sorted(MESSAGE_ROLES):
        kinds = ("input_text", "output_text") if role == "assistant" else ("input_text",)
        messages.append({"type": "object", "title": f"{role} message item",
                         "required": ["role", "content"], "additionalProperties": False,
                         "properties": {"type": {"const": "message"}, "role": {"const": role},
                                        "content": _input_content(kinds), **echo}})
    string: Schema = {"type": "string"}
    call = {"type": "object", "title": "function_call item", "additionalProperties": False,
            "required": ["type", "call_id", "name", "arguments"],
            "properties": {"type": {"const": "function_call"}, "call_id": string,
                           "name": string, "arguments": string, **echo}}
    output = {"type": "object", "title": "function_call_output item",
              "additionalProperties": False, "required": ["type", "call_id", "output"],
              "properties": {"type": {"const": "function_call_output"}, "call_id": string,
                             "output": _input_content(("input_text",)), **echo}}
    return [*messages, call, output]


def _responses_tools(settings: GatewaySettings) -> Schema:
    if not settings.tools_enabled:
        return _chat_tools(settings)
    tool = {"type": "object", "required": ["type", "name"], "additionalProperties": False,
            "properties": {"type": {"const": "function"},
                           "name": {"type": "string", "pattern": NAME_PATTERN},
                           "description": _nullable({"type": "string"}),
                           "parameters": _nullable(_parameters()),
                           "strict": _nullable({"type": "boolean"})}}
    return _nullable({"type": "array", "maxItems": settings.max_tools, "items": tool,
                      "description": "function names are unique; hosted tools are refused"})


def _responses_fields(settings: GatewaySettings) -> dict[str, Schema]:
    chat = _chat_fields(settings)
    named = {"type": "object", "required": ["type", "name"], "additionalProperties": False,
             "properties": {"type": {"const": "function"}, "name": {"type": "string"}}}
    fields: dict[str, Schema] = {
        "model": chat["model"], "temperature": chat["temperature"], "top_p": chat["top_p"],
        "parallel_tool_calls": chat["parallel_tool_calls"], "user": chat["user"],
        "stream": chat["stream"],
        "input": {"anyOf": [{"type": "string"}, {
            "type": "array", "minItems": 1, "maxItems": settings.max_messages,
            "items": {"oneOf": _input_items()}}]},
        "instructions": _nullable({"type": "string"}),
        "tools": _responses_tools(settings),
        "tool_choice": {"anyOf": [{"enum": ["none", "auto", "required"]}, named],
                        "description": "a named function must be one of tools"},
        "text": {"type": ["object", "null"], "required": ["format"],
                 "additionalProperties": False,
                 "properties": {"format": {"anyOf": [*_plain_formats(),
                                                     _json_schema_format(None)]}}},
        "max_output_tokens": _nullable(NUMERIC["max_tokens"].schema(settings)),
    }
    fields.update({name: field.schema() for name, field in SHARED.items()})
    for key, values in FIXED.items():
        fields[key] = {"enum": list(values),
                       "description": "stateless gateway: only this value is accepted"}
    return fields


def responses_request(settings: GatewaySettings) -> Schema:
    """The ``POST /v1/responses`` body schema under ``settings``."""
    fields = _responses_fields(settings)
    body: Schema = {
        "type": "object", "title": "ResponsesRequest", "required": ["input"],
        "additionalProperties": False,
        "properties": {k: fields[k] for k in sorted(ACCEPTED)},
        "dependentSchemas": {"tool_choice": NEEDS_TOOLS},
    }
    _apply_quirks(body, settings, responses=True)
    return body
