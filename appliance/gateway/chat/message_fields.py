"""Which fields of a request ``messages[]`` item are forwarded, dropped or refused.

Agent loops send the assistant message they received back on the next turn
(``messages.append(completion.choices[0].message)``, the pattern in OpenAI's guide). The
openai SDK then echoes every field the engine answered with, ``null`` ones included
(``annotations``, ``audio``, ``function_call``, ``refusal``); after ``parse()`` it adds
``parsed`` (and ``function.parsed_arguments`` in tool calls); litellm adds
``provider_specific_fields``. None of these change what the model generates, so they are
accepted and **dropped** before the body is forwarded (never forwarded). A field that would
change generation and is not supported (``audio`` with a value, the deprecated
``function_call`` with a value, non-empty ``annotations``, anything unknown) stays a 400
``forbidden_parameter`` naming the field.

=============================  ==========  ============================================
field                          role        disposition
=============================  ==========  ============================================
``role``, ``content``          any         forwarded (checked)
``name``                       any         forwarded if a string, dropped if null
``tool_call_id``               any         forwarded if a string (required on ``tool``),
                                           dropped if null
``tool_calls``                 assistant   forwarded as ``{id, type, function: {name,
                                           arguments}}``; null / ``[]`` dropped;
                                           ``index`` and ``function.parsed_arguments``
                                           dropped
``refusal``                    assistant   forwarded if a non-empty string, dropped if
                                           null / ``""``
``reasoning``,                 assistant   forwarded if a string, dropped if null
``reasoning_content``
``annotations``                assistant   dropped if null / ``[]``; refused otherwise
``audio``, ``function_call``   assistant   dropped if null; refused otherwise
``parsed``                     assistant   dropped (openai SDK's client-side parse of
                                           ``content``)
``provider_specific_fields``   assistant   dropped if null or an object (litellm's echo)
anything else                  any         refused (400 ``forbidden_parameter``)
=============================  ==========  ============================================
"""

from __future__ import annotations

from typing import Any

from ..errors import GatewayError

FORWARDED = frozenset({"role", "content", "name", "tool_calls", "tool_call_id", "refusal",
                       "reasoning", "reasoning_content"})
PLAIN = frozenset({"role", "content"})
OPTIONAL_STRINGS = ("name", "tool_call_id", "refusal", "reasoning", "reasoning_content")
# Response-only assistant fields: accepted (and dropped) only when empty.
RESPONSE_ONLY = frozenset({"annotations", "audio", "function_call"})
# Client-side echo fields that never change generation: always dropped.
CLIENT_ECHO = frozenset({"parsed", "provider_specific_fields"})
CALL_KEYS = frozenset({"id", "type", "function", "index"})
FUNCTION_KEYS = frozenset({"name", "arguments", "parsed_arguments"})
FIX = {
    "audio": "audio is not supported by this text-only model; send null or drop it",
    "function_call": "function_call is the deprecated pre-tools field; send tool_calls",
    "annotations": "annotations are response-only and this engine never returns them; "
                   "send null or drop them",
}


def _refuse(param: str, message: str) -> GatewayError:
    return GatewayError.of("forbidden_parameter", message, param=param)


def _dropped(key: str, value: Any, where: str) -> bool:
    """True if assistant field ``key`` is a droppable echo; raise if it must be refused."""
    if key in CLIENT_ECHO:
        if key == "provider_specific_fields" and not (value is None or isinstance(value, dict)):
            raise _refuse(f"{where}.{key}", "provider_specific_fields must be null or an "
                          "object (it is dropped)")
        return True
    if value is None or (key == "annotations" and value == []):
        return True
    raise _refuse(f"{where}.{key}", f"message field {key!r} with a value is not accepted: "
                  f"{FIX[key]}")


def clean_call(call: Any, param: str) -> dict[str, Any]:
    """A history tool call reduced to ``{id, type: function, function: {name, arguments}}``.

    Raises 400 ``invalid_parameter`` for another shape, ``forbidden_parameter`` for an
    unknown key."""
    fn = call.get("function") if isinstance(call, dict) else None
    if (not isinstance(call, dict) or not isinstance(fn, dict)
            or call.get("type", "function") != "function" or not isinstance(call.get("id"), str)
            or not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments"), str)):
        raise GatewayError.of("invalid_parameter", "a tool call is {id, type: function, "
                              "function: {name, arguments: str}}", param=param)
    for keys, obj, at in ((CALL_KEYS, call, param), (FUNCTION_KEYS, fn, f"{param}.function")):
        extra = sorted(set(obj) - keys)
        if extra:
            raise _refuse(f"{at}.{extra[0]}", f"tool call field {extra[0]!r} is not accepted")
    return {"id": call["id"], "type": "function",
            "function": {"name": fn["name"], "arguments": fn["arguments"]}}


def clean_message(msg: dict[str, Any], where: str) -> dict[str, Any]:
    """``msg`` with the dropped fields removed (see the table above); ``role`` is checked
    by the caller. Raises :class:`GatewayError` 400 ``forbidden_parameter`` /
    ``invalid_parameter``."""
    if msg.keys() <= PLAIN:  # the common case: nothing to drop or rebuild
        return msg
    assistant = msg.get("role") == "assistant"
    out: dict[str, Any] = {}
    for key, value in msg.items():
        if key in FORWARDED:
            if key in OPTIONAL_STRINGS:
                if value is None or (key == "refusal" and value == ""):
                    continue
                if not isinstance(value, str):
                    raise GatewayError.of("invalid_parameter", f"{key} must be a string",
                                          param=f"{where}.{key}")
            out[key] = value
        elif assistant and (key in RESPONSE_ONLY or key in CLIENT_ECHO):
            _dropped(key, value, where)
        else:
            raise _refuse(f"{where}.{key}", f"message field {key!r} is not accepted")
    calls = out.pop("tool_calls", None)
    if calls is not None and calls != []:
        if not assistant:
            raise GatewayError.of("invalid_parameter", "only assistant messages carry "
                                  "tool_calls", param=f"{where}.tool_calls")
        if not isinstance(calls, list):
            raise GatewayError.of("invalid_parameter", "tool_calls must be an array",
                                  param=f"{where}.tool_calls")
        out["tool_calls"] = [clean_call(c, f"{where}.tool_calls[{j}]")
                             for j, c in enumerate(calls)]
    return out
