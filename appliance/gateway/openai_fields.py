"""One table of OpenAI request fields and the appliance's answer to each, for both routes.

``POST /v1/chat/completions`` and ``POST /v1/responses`` answer a field the same way
wherever both APIs have it, and a refusal by design says so ("not supported by this
appliance: <reason>"). The answers (:class:`Answer`):

- ``forwarded``: checked and sent to the engine (the chat checks in
  :mod:`.chat.request_checks`, :data:`.chat.request_checks.ALLOWED_FIELDS`);
- ``mapped``: checked and translated (Responses fields, :mod:`.responses`);
- ``ignored``: accepted while its value is harmless here, never forwarded (:data:`SHARED`:
  ``metadata``, ``store: false``, ``service_tier: "auto" | "default"``, a null
  ``reasoning_effort``); any other value is refused with the field's reason;
- ``refused``: 400 ``forbidden_parameter`` with the reason (:data:`REFUSED`).

:data:`SHARED` holds the fields both routes answer alike, with the JSON Schema of the values
accepted (the OpenAPI document uses the same schema); :func:`check_shared` applies it.
Source of the field lists: OpenAI's API reference for chat completions and responses (2026).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from jsonschema import Draft202012Validator

from .errors import GatewayError

Schema = dict[str, Any]


class Answer(StrEnum):
    """What the appliance does with a request field."""

    FORWARDED = "forwarded"
    MAPPED = "mapped"
    IGNORED = "ignored"
    REFUSED = "refused"


@dataclass(frozen=True)
class SharedField:
    """A field both routes answer alike: values matching ``accepted`` are taken and not
    forwarded (``answer`` ``ignored``); a value of the right shape outside it is refused
    (``forbidden_parameter``, "not supported by this appliance: ``reason``"); ``shape``, when
    given, is the field's own OpenAI shape: a value outside it is ``invalid_parameter``."""

    name: str
    accepted: Schema
    reason: str
    shape: Schema | None = None
    shape_message: str = ""
    answer: Answer = Answer.IGNORED

    def schema(self) -> Schema:
        """The field's schema in the OpenAPI document (what is accepted, and why)."""
        return {**self.accepted, "description": f"{self.answer.value} (not forwarded): "
                f"{self.reason}"}


NOTHING_STORED = ("nothing is stored: the appliance keeps no completion or response to "
                  "retrieve, list or continue later (send the whole conversation)")
ONE_TIER = ("it serves every request from its own engine in one tier; send \"auto\", "
            "\"default\" or omit it")
NO_REASONING = ("the served model has no reasoning mode, so there is no effort to set; omit "
                "it or send null")
METADATA_MAX_KEYS = 16  # metadata: at most 16 keys (of at most 64 characters) ...
METADATA_MAX_KEY_CHARS = 64
METADATA_MAX_VALUE_CHARS = 512  # ... each mapped to a string of at most 512 characters
METADATA: Schema = {"type": ["object", "null"], "maxProperties": METADATA_MAX_KEYS,
                    "propertyNames": {"maxLength": METADATA_MAX_KEY_CHARS},
                    "additionalProperties": {"type": "string",
                                             "maxLength": METADATA_MAX_VALUE_CHARS}}

SHARED: dict[str, SharedField] = {f.name: f for f in (
    SharedField("metadata", METADATA, "tags for the caller's own records; the appliance keeps "
                "no stored completions to attach them to (echoed by /v1/responses)",
                METADATA, f"metadata maps at most {METADATA_MAX_KEYS} keys (of at most "
                f"{METADATA_MAX_KEY_CHARS} characters) to strings of at most "
                f"{METADATA_MAX_VALUE_CHARS}"),
    SharedField("store", {"enum": [False, None]}, NOTHING_STORED,
                {"type": ["boolean", "null"]}, "store must be a boolean"),
    SharedField("service_tier", {"enum": ["auto", "default", None]}, ONE_TIER,
                {"type": ["string", "null"]}, "service_tier must be a string"),
    SharedField("reasoning_effort", {"type": "null"}, NO_REASONING),
)}
"""Fields with one answer on chat and Responses."""

REFUSED: dict[str, str] = {
    "audio": "the served model is text-only (no audio output)",
    "modalities": "the served model is text-only; omit it or send [\"text\"]",
    "prediction": "predicted outputs are not supported by the engine as configured here",
    "web_search_options": "the appliance never reaches the network: no hosted web search",
    "functions": "deprecated by OpenAI; use tools",
    "function_call": "deprecated by OpenAI; use tool_choice",
    "verbosity": "the served model has no verbosity control",
    "prompt_cache_key": "the engine's prefix cache is not steered by clients",
    "safety_identifier": "no upstream provider to pass it to; use user for your own ids",
    "reasoning": NO_REASONING,
    "previous_response_id": NOTHING_STORED,
    "conversation": NOTHING_STORED,
    "prompt": "no stored prompt templates here; send the input itself",
    "max_tool_calls": "tool calls are bounded by the request's tools and max_output_tokens",
    "cache_salt": "the gateway salts the engine's prefix cache per caller itself ([gateway] "
                  "cache_isolation, docs/gateway.md#tenants); a salt chosen by a client could "
                  "select another caller's cache",
}
"""OpenAI fields refused by design, with the reason the error states. Which route has which
field: chat has ``audio`` ... ``safety_identifier``; Responses has ``reasoning`` (the
effort object) ... ``max_tool_calls`` and shares ``prompt_cache_key``/``safety_identifier``.
Both refuse vLLM's ``cache_salt`` extension (:mod:`.auth.tenant` sets it)."""

MODALITIES_TEXT: Schema = {"anyOf": [{"type": "null"}, {"const": ["text"]}]}


def refusal(name: str, reason: str) -> GatewayError:
    """400 ``forbidden_parameter``: "<name> is not supported by this appliance: <reason>"."""
    return GatewayError.of("forbidden_parameter",
                           f"{name} is not supported by this appliance: {reason}", param=name)


def unknown_field(name: str, route: str) -> GatewayError:
    """The refusal of a field the route does not accept: an OpenAI field refused by design
    states its reason; anything else is not part of the route's OpenAI API."""
    if name in REFUSED:
        return refusal(name, REFUSED[name])
    return GatewayError.of(
        "forbidden_parameter",
        f"field {name!r} is not an OpenAI {route} field accepted here; this appliance takes "
        "only vetted OpenAI fields (engine extensions such as guided_*, chat_template or "
        "prompt_embeds reach engine code with published advisories)", param=name)


_VALIDATORS = {name: (Draft202012Validator(f.accepted),
                      Draft202012Validator(f.shape) if f.shape else None)
               for name, f in SHARED.items()}


def check_shared(body: dict[str, Any]) -> None:
    """Check every :data:`SHARED` field in ``body`` and remove it (never forwarded).

    Raises :class:`GatewayError` 400: ``invalid_parameter`` when the value breaks the
    field's OpenAI shape, ``forbidden_parameter`` (:func:`refusal`) when it asks for what the
    appliance does not do."""
    for name in [k for k in body if k in SHARED]:
        value = body.pop(name)
        accepted, shape = _VALIDATORS[name]
        if accepted.is_valid(value):
            continue
        if shape is not None and not shape.is_valid(value):
            raise GatewayError.of("invalid_parameter", SHARED[name].shape_message,
                                  param=name)
        raise refusal(name, SHARED[name].reason)


def check_modalities(body: dict[str, Any]) -> None:
    """``modalities``: ``["text"]`` (or null) is what this model does anyway: taken and not
    forwarded; anything else is refused with the reason."""
    if "modalities" in body:
        if not Draft202012Validator(MODALITIES_TEXT).is_valid(body.pop("modalities")):
            raise refusal("modalities", REFUSED["modalities"])


def markdown() -> str:
    """``docs/openai-fields.md``: the tables above, for people (``python -m
    appliance.gateway.openai_fields > docs/openai-fields.md``; a test keeps it equal)."""
    lines = [
        "# OpenAI request fields: what the appliance does with each",
        "",
        "Generated from `appliance/gateway/openai_fields.py` (`python -m "
        "appliance.gateway.openai_fields > docs/openai-fields.md`). Both "
        "`POST /v1/chat/completions` and `POST /v1/responses` answer these fields alike; "
        "the forwarded chat fields and their bounds are in the OpenAPI document "
        "(`GET /openapi.json`, [gateway-openapi.md](gateway-openapi.md)).",
        "",
        "## Accepted with a harmless value, never forwarded",
        "",
        "| field | accepted values (JSON Schema) | why; any other value is refused with this |",
        "|---|---|---|",
    ]
    for field in SHARED.values():
        accepted = json.dumps(field.accepted, sort_keys=True)
        lines.append(f"| `{field.name}` | `{accepted}` | {field.reason} |")
    lines.append("| `modalities` (chat) | `[\"text\"]` or null | "
                 f"{REFUSED['modalities']} |")
    lines += ["", "## Refused by design", "",
              "Answered 400 `forbidden_parameter`, message "
              "`<field> is not supported by this appliance: <reason>`.", "",
              "| field | reason |", "|---|---|"]
    lines += [f"| `{name}` | {reason} |" for name, reason in sorted(REFUSED.items())
              if name != "modalities"]
    lines += ["", "## Tools without `parameters`", "",
              "A function declared without `parameters` (or with `null`) takes no arguments, "
              "as OpenAI defines it: the grammar, the engine and the call check get "
              "`{\"type\": \"object\", \"properties\": {}, \"additionalProperties\": false, "
              "\"const\": {}}` (the grammar is then the literal `{}`, with no room for "
              "whitespace), so every call's `arguments` is `\"{}\"`. An object schema you "
              "write yourself is used exactly as written (without `additionalProperties: "
              "false` it admits any extra argument).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(), end="")
