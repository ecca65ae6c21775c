"""A fake engine reply that honours the request, as a correct engine would (for fuzzing).

``honest_reply(body)`` answers the checked chat body the gateway forwards: ``n`` choices;
plain text ``"hi"``; with ``tool_choice`` ``required`` / named a call whose arguments are a
minimal instance of the tool's ``parameters``; with ``response_format`` json_object ``{}``,
json_schema a minimal instance of the schema. Where no minimal instance is found (a
``pattern``, a ``format``, a ``$ref`` …) the choice stops on ``length`` with no content, as
a grammar-constrained engine cut by ``max_tokens`` does. Streams get the chunk sequence
(role, content or one tool-call delta, finish) and a usage chunk when asked for.

So every 5xx the gateway answers under fuzzing is the gateway's own, never the fake
engine's: a grammar-constrained answer is valid or cut, never invalid.
"""

from __future__ import annotations

import json
from typing import Any

from gw_fake_engine import MODEL, Reply

from appliance.gateway.schema.subset import check_schema

NO = object()  # no minimal instance found


def minimal(schema: Any, depth: int = 0) -> Any:
    """A small instance of ``schema`` or :data:`NO` (validated by the caller)."""
    if schema is True or schema == {}:
        return None
    if not isinstance(schema, dict) or depth > 16:
        return NO
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return minimal(schema[key][0], depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = kind[0] if kind else None
    if kind == "object" or (kind is None and "properties" in schema):
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        out = {}
        for name in schema.get("required") or []:
            value = minimal(props.get(name, {}), depth + 1)
            if value is NO:
                return NO
            out[name] = value
        return out
    if kind == "array":
        count = schema.get("minItems", 0)
        item = minimal(schema.get("items", {}), depth + 1) if count else None
        return NO if item is NO or not isinstance(count, int) else [item] * count
    if kind == "string":
        return NO if "pattern" in schema or "format" in schema else "a" * int(
            schema.get("minLength", 0))
    if kind in ("integer", "number"):
        for key, step in (("minimum", 0), ("exclusiveMinimum", 1)):
            if isinstance(schema.get(key), int | float) and not isinstance(schema[key], bool):
                low = schema[key]
                return int(low) + step if kind == "integer" else low + step
        return 0
    return {"boolean": False, "null": None}.get(str(kind), NO)


def _instance(schema: Any) -> str | None:
    """JSON text of a minimal instance that the gateway's own validator accepts, or None."""
    try:
        validator = check_schema(schema)
    except Exception:  # noqa: BLE001 - the gateway refused it; nothing reaches us then
        return None
    value = minimal(schema)
    if value is NO or not validator.is_valid(value):
        return None
    return json.dumps(value)


def _choice(body: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The message and finish reason every choice gets."""
    tools = {t["function"]["name"]: t["function"] for t in body.get("tools") or []}
    choice = body.get("tool_choice", "auto")
    if tools and (choice == "required" or isinstance(choice, dict)):
        name = choice["function"]["name"] if isinstance(choice, dict) else next(iter(tools))
        args = _instance(tools[name].get("parameters", {"type": "object", "properties": {}}))
        if args is None:
            return {"content": None}, "length"
        return {"content": None, "tool_calls": [{"id": "call_0", "type": "function",
                                                 "function": {"name": name,
                                                              "arguments": args}}]}, "tool_calls"
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_object":
        return {"content": "{}"}, "stop"
    if fmt.get("type") == "json_schema":
        text = _instance(fmt["json_schema"]["schema"])
        return ({"content": ""}, "length") if text is None else ({"content": text}, "stop")
    return {"content": "hi"}, "stop"


def _head(kind: str) -> dict[str, Any]:
    return {"id": "chatcmpl-honest", "object": kind, "created": 1764400000, "model": MODEL}


def honest_reply(body: Any) -> Reply:
    """The :class:`Reply` a grammar-honouring engine gives to the forwarded ``body``."""
    if not isinstance(body, dict):
        return Reply(status=400, body={"error": {"message": "bad body", "code": 400}})
    message, finish = _choice(body)
    n = body.get("n", 1)
    usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    if not body.get("stream"):
        choices = [{"index": i, "message": {"role": "assistant", **message},
                    "logprobs": None, "finish_reason": finish} for i in range(n)]
        return Reply(body={**_head("chat.completion"), "choices": choices, "usage": usage})
    events: list[Any] = []
    for i in range(n):
        def chunk(delta: dict[str, Any], reason: str | None = None, i: int = i
                  ) -> dict[str, Any]:
            return {**_head("chat.completion.chunk"), "choices": [
                {"index": i, "delta": delta, "logprobs": None, "finish_reason": reason}]}
        events.append(chunk({"role": "assistant", "content": ""}))
        if message.get("tool_calls"):
            call = message["tool_calls"][0]
            events.append(chunk({"tool_calls": [{"index": 0, **call}]}))
        elif message.get("content"):
            events.append(chunk({"content": message["content"]}))
        events.append(chunk({}, finish))
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append({**_head("chat.completion.chunk"), "choices": [], "usage": usage})
    return Reply(events=events)
