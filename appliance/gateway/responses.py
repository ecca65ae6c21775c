"""``POST /v1/responses`` mapped onto chat completions, under the same checks.

The engine's own ``/v1/responses`` is never reached: a Responses body is translated into a
chat-completions body, which then goes through :func:`check_chat_request` (field bounds,
tool and ``text.format`` schemas against the xgrammar subset, ``tools_enabled``), is sent to
the engine's ``/v1/chat/completions``, and its answer through the same validation
(:mod:`.chat.response_checks`, :mod:`.chat.sse`) before it is rendered as a Response. So every
guarantee of chat completions holds: no invalid tool call, no schema-invalid structured
output, a cut tool call withheld.

Accepted (everything else is 400 ``forbidden_parameter``; the API is stateless):

* ``model``, ``input`` (a string, or items: messages with role ``user`` / ``system`` /
  ``developer`` / ``assistant`` and ``input_text`` / ``output_text`` parts,
  ``function_call`` and ``function_call_output``; the ``id`` / ``status`` / empty
  ``annotations`` of echoed output items are dropped), ``instructions`` (a system message);
* ``tools`` (``{"type": "function", name, description, parameters, strict}`` only),
  ``tool_choice`` (``none`` / ``auto`` / ``required`` / ``{"type": "function", name}``),
  ``parallel_tool_calls``;
* ``text.format`` (``text`` / ``json_object`` / ``json_schema`` with ``name``, ``schema``,
  ``strict``, ``description``) -> ``response_format``;
* ``max_output_tokens`` -> ``max_tokens``, ``temperature``, ``top_p``, ``user``, ``stream``;
* ``metadata`` (echoed), ``store: false``, ``service_tier: "auto" | "default"``,
  ``reasoning_effort: null`` (answered as chat answers them: :mod:`.openai_fields`),
  ``truncation: "disabled"``, ``background: false``, ``include: []``, ``reasoning: null``.

Refused with a reason (:data:`.openai_fields.REFUSED`): ``previous_response_id`` /
``conversation`` (nothing is stored: send the whole input), ``store: true``, a ``reasoning``
effort, hosted tools (web / file search, code interpreter, MCP, …), non-text input parts.

Answer: a ``response`` object with ``output`` items ``message`` (one ``output_text`` part)
and ``function_call`` (``call_id``, ``name``, validated ``arguments``); ``status``
``completed``, or ``incomplete`` with ``incomplete_details.reason = "max_output_tokens"``
when the engine stopped on ``length``. A stream sends the Responses events
(``response.created``, ``response.in_progress``, ``response.output_item.added``,
``response.content_part.added``, ``response.output_text.delta`` / ``.done``,
``response.content_part.done``, ``response.function_call_arguments.delta`` / ``.done``,
``response.output_item.done``, then ``response.completed`` or ``response.incomplete``),
each as ``event: <type>`` + ``data: {...}`` with a ``sequence_number``; a failure is an
``error`` event followed by ``response.failed``. Function-call items are sent only once the
call is validated (they come from the chat relay's held-back, checked calls).
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from .chat.handler import ChatHandler
from .chat.request_checks import ChatRequest, check_chat_request, loads_strict
from .chat.sse import StreamRelay
from .errors import GatewayError
from .openai_fields import REFUSED, SHARED, check_shared, refusal, unknown_field
from .settings import GatewaySettings

ECHO_KEYS = ("id", "status")
PASS_THROUGH = ("model", "temperature", "top_p", "parallel_tool_calls", "user", "stream")
FIXED: dict[str, tuple[Any, ...]] = {
    "truncation": ("disabled",), "background": (False,), "include": ([],), "reasoning": (None,),
}
ACCEPTED = frozenset({*PASS_THROUGH, *FIXED, *SHARED, "input", "instructions", "tools",
                      "tool_choice", "text", "max_output_tokens"})
MESSAGE_ROLES = frozenset({"user", "system", "developer", "assistant"})


def _fixed_ok(value: Any, allowed: tuple[Any, ...]) -> bool:
    """``value`` is one of ``allowed`` with the same JSON type (``store: 0`` is not
    ``false``; found by schemathesis)."""
    return any(type(value) is type(a) and value == a for a in allowed)


def _forbidden(param: str, message: str) -> GatewayError:
    return GatewayError.of("forbidden_parameter", message, param=param)


def _invalid(param: str, message: str) -> GatewayError:
    return GatewayError.of("invalid_parameter", message, param=param)


@dataclass(slots=True)
class ResponsesContext:
    """What the Response object echoes back, and its ids."""

    id: str
    created_at: int
    echo: dict[str, Any] = field(default_factory=dict)


def _text_of(parts: Any, param: str, role: str) -> str | list[dict[str, str]]:
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        raise _invalid(param, "content is a string or an array of text parts")
    out = []
    for j, part in enumerate(parts):
        where = f"{param}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        allowed = {"input_text"} if role != "assistant" else {"output_text", "input_text"}
        if not isinstance(kind, str) or kind not in allowed:
            raise _forbidden(f"{where}.type", f"only {sorted(allowed)} parts are accepted "
                             "(text-only model)")
        extra = set(part) - {"type", "text", "annotations", "logprobs"}
        if extra or part.get("annotations") not in (None, []) or not isinstance(
                part.get("text"), str):
            raise _invalid(where, "a text part is {type, text: str} (annotations empty)")
        out.append({"type": "text", "text": part["text"]})
    return out


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if not isinstance(role, str) or role not in MESSAGE_ROLES:
        raise _invalid(f"{where}.role", f"role must be one of {sorted(MESSAGE_ROLES)}")
    extra = set(item) - {"type", "role", "content", *ECHO_KEYS}
    if extra:
        raise _forbidden(f"{where}.{sorted(extra)[0]}", "message item field not accepted")
    return {"role": "system" if role == "developer" else role,
            "content": _text_of(item.get("content"), f"{where}.content", role)}


def _input(value: Any, instructions: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if instructions is not None:
        if not isinstance(instructions, str):
            raise _invalid("instructions", "instructions must be a string")
        messages.append({"role": "system", "content": instructions})
    if isinstance(value, str):
        return [*messages, {"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise _invalid("input", "input must be a string or a non-empty array of items")
    for i, item in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise _invalid(where, "each input item must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(_message(item, where))
        elif kind == "function_call":
            extra = set(item) - {"type", "call_id", "name", "arguments", *ECHO_KEYS}
            if extra or not all(isinstance(item.get(k), str) for k in (
                    "call_id", "name", "arguments")):
                raise _invalid(where, "a function_call item is {type, call_id, name, "
                               "arguments: str}")
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            last = messages[-1] if messages else None
            if last is None or last["role"] != "assistant":
                last = {"role": "assistant", "content": None}
                messages.append(last)
            last.setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            extra = set(item) - {"type", "call_id", "output", *ECHO_KEYS}
            if extra or not isinstance(item.get("call_id"), str):
                raise _invalid(where, "a function_call_output item is {type, call_id, "
                               "output}")
            messages.append({"role": "tool", "tool_call_id": item["call_id"],
                             "content": _text_of(item.get("output"), f"{where}.output",
                                                 "tool")})
        else:
            raise _forbidden(f"{where}.type", f"input item type {str(kind)[:40]!r} is not "
                             "accepted (message, function_call, function_call_output)")
    return messages


def _tools(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise _invalid("tools", "tools must be an array")
    out = []
    for i, tool in enumerate(value):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise _forbidden(f"tools[{i}].type", "only function tools are accepted (no hosted "
                             "tools)")
        extra = set(tool) - {"type", "name", "description", "parameters", "strict"}
        if extra:
            raise _forbidden(f"tools[{i}].{sorted(extra)[0]}", "unknown function tool field")
        fn = {k: tool[k] for k in ("name", "description", "parameters", "strict")
              if tool.get(k) is not None}
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(value: Any) -> Any:
    if value in ("none", "auto", "required"):
        return value
    if isinstance(value, dict) and value.get("type") == "function" and set(value) == {
            "type", "name"}:
        return {"type": "function", "function": {"name": value["name"]}}
    raise _invalid("tool_choice", "tool_choice is none, auto, required or {type: function, "
                   "name}")


def _format(value: Any) -> dict[str, Any]:
    fmt = value.get("format") if isinstance(value, dict) else None
    if not isinstance(value, dict) or set(value) - {"format"} or not isinstance(fmt, dict):
        raise _forbidden("text", "text is {format: {...}} (no verbosity)")
    kind = fmt.get("type")
    if kind in ("text", "json_object") and set(fmt) == {"type"}:
        return {"type": kind}
    if kind != "json_schema":
        raise _forbidden("text.format.type", "text.format type is text, json_object or "
                         "json_schema")
    extra = set(fmt) - {"type", "name", "schema", "strict", "description"}
    if extra:
        raise _forbidden(f"text.format.{sorted(extra)[0]}", "unknown text.format field")
    return {"type": "json_schema", "json_schema": {k: v for k, v in fmt.items() if k != "type"}}


def to_chat(body: Any) -> dict[str, Any]:
    """Translate a parsed Responses body into a chat-completions body (unchecked: the
    caller runs :func:`check_chat_request` on it). Raises :class:`GatewayError` 400."""
    if not isinstance(body, dict):
        raise GatewayError.of("invalid_request", "request body must be a JSON object")
    for key in body:
        if key not in ACCEPTED:
            raise unknown_field(key, "responses")
        if key in FIXED and not _fixed_ok(body[key], FIXED[key]):
            if key in REFUSED:  # reasoning: an effort object
                raise refusal(key, REFUSED[key])
            raise _forbidden(key, f"{key} must be {FIXED[key][0]!r} (or omitted) here")
    check_shared({k: body[k] for k in body if k in SHARED})  # the same answer as chat gives
    chat: dict[str, Any] = {k: body[k] for k in PASS_THROUGH if k in body}
    chat["messages"] = _input(body.get("input"), body.get("instructions"))
    if body.get("tools") is not None:  # {} / "" / 0 are refused, not ignored (schemathesis)
        chat["tools"] = _tools(body["tools"])
    if "tool_choice" in body:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    if body.get("text") is not None:
        chat["response_format"] = _format(body["text"])
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    if body.get("stream") is True:
        chat["stream_options"] = {"include_usage": True}
    return chat


PARAM_BACK = (("max_tokens", "max_output_tokens"), ("/response_format/json_schema",
              "/text/format"), ("response_format.json_schema", "text.format"),
              ("response_format", "text.format"), ("messages", "input"))


def _param_back(param: str | None) -> str | None:
    """A chat-body pointer in a refusal, renamed to the Responses field where it maps."""
    if param is None:
        return None
    for chat, responses in PARAM_BACK:
        if param.startswith(chat):
            return responses + param[len(chat):]
    if param.startswith("/tools/"):
        return param.replace("/function/", "/", 1)
    return param


def check_responses_request(raw: bytes, settings: GatewaySettings, cache: Any) -> ChatRequest:
    """Check a raw ``/v1/responses`` body; return the chat request to forward (with its
    :class:`ResponsesContext` in ``api``). Raises :class:`GatewayError` like
    :func:`check_chat_request`, with ``param`` renamed to the Responses field."""
    try:
        body = loads_strict(raw)
    except (ValueError, RecursionError) as exc:
        raise GatewayError.of("invalid_json", f"request body is not valid JSON: {exc}"
                              [:300]) from None
    chat = to_chat(body)
    try:
        req = check_chat_request(json.dumps(chat, ensure_ascii=False).encode("utf-8"),
                                 settings, cache)
    except GatewayError as exc:
        exc.param = _param_back(exc.param)
        raise
    except UnicodeEncodeError:
        raise GatewayError.of("invalid_json", "request body holds unpaired "
                              "surrogates") from None
    echo = {k: body.get(k) for k in ("instructions", "metadata", "temperature", "top_p",
                                     "max_output_tokens", "user")}
    echo.update({"tools": body.get("tools") or [], "tool_choice": body.get("tool_choice",
                 "auto"), "parallel_tool_calls": body.get("parallel_tool_calls", True),
                 "text": body.get("text") or {"format": {"type": "text"}}})
    req.api = ResponsesContext("resp_" + secrets.token_hex(12), int(time.time()), echo)
    return req


def _usage(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.get("total_tokens", prompt + completion)}


def _message_item(ident: str, text: str, status: str) -> dict[str, Any]:
    return {"id": ident, "type": "message", "role": "assistant", "status": status,
            "content": [{"type": "output_text", "text": text, "annotations": [],
                         "logprobs": []}]}


def _call_item(ident: str, call: dict[str, Any], status: str = "completed") -> dict[str, Any]:
    fn = call["function"]
    return {"id": ident, "type": "function_call", "call_id": call["id"], "name": fn["name"],
            "arguments": fn["arguments"], "status": status}


def response_object(ctx: ResponsesContext, model: str, output: list[dict[str, Any]],
                    finish: str | None, usage: Any, error: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
    """The ``response`` object (OpenAI Responses shape)."""
    status = "failed" if error else "incomplete" if finish == "length" else "completed"
    return {"id": ctx.id, "object": "response", "created_at": ctx.created_at,
            "status": status, "error": error, "model": model, "output": output,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete"
            else None, "usage": _usage(usage), "store": False, "truncation": "disabled",
            "previous_response_id": None, "reasoning": None, "background": False, **ctx.echo}


def render_completion(raw: bytes, ctx: ResponsesContext) -> bytes:
    """A checked ``chat.completion`` body rendered as a ``response`` object."""
    obj = json.loads(raw)
    choice = obj["choices"][0]
    message = choice.get("message") or {}
    finish = choice.get("finish_reason")
    status = "incomplete" if finish == "length" else "completed"
    output: list[dict[str, Any]] = []
    text = message.get("content")
    if isinstance(text, str) and text:
        output.append(_message_item(f"msg_{ctx.id[5:]}_0", text, status))
    for i, call in enumerate(message.get("tool_calls") or []):
        output.append(_call_item(f"fc_{ctx.id[5:]}_{i}", call))
    body = response_object(ctx, str(obj.get("model", "")), output, finish, obj.get("usage"))
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


class ResponsesRelay(StreamRelay):
    """The chat stream relay (validation unchanged) whose output is re-emitted as Responses
    events. Only choice 0 exists (no ``n``)."""

    def __init__(self, req: ChatRequest, settings: GatewaySettings) -> None:
        super().__init__(req, settings)
        self.ctx: ResponsesContext = req.api
        self.seq = 0
        self.pending_out = b""
        self.model = req.model or settings.default_model.name
        self.output: list[dict[str, Any]] = []
        self.text: list[str] | None = None  # the open message item's text
        self.finish: str | None = None
        self.usage: Any = None
        self.started = False

    def feed(self, data: bytes) -> bytes:
        return self._translate(super().feed(data))

    def close(self) -> bytes:
        return self._translate(super().close())

    def fail(self, error: GatewayError) -> bytes:
        return self._translate(super().fail(error))

    # -- translation ------------------------------------------------------------------------
    def _emit(self, out: list[bytes], kind: str, **fields: Any) -> None:
        event = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        out.append(b"event: " + kind.encode() + b"\ndata: " + json.dumps(
            event, ensure_ascii=False).encode("utf-8") + b"\n\n")

    def _start(self, out: list[bytes]) -> None:
        if not self.started:
            self.started = True
            snapshot = response_object(self.ctx, self.model, [], None, None)
            snapshot["status"] = "in_progress"
            self._emit(out, "response.created", response=snapshot)
            self._emit(out, "response.in_progress", response=snapshot)

    def _close_text(self, out: list[bytes]) -> None:
        if self.text is None:
            return
        text, self.text = "".join(self.text), None
        index = len(self.output)
        status = "incomplete" if self.finish == "length" else "completed"
        item = _message_item(f"msg_{self.ctx.id[5:]}_{index}", text, status)
        part = item["content"][0]
        ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
        self._emit(out, "response.output_text.done", text=text, logprobs=[], **ids)
        self._emit(out, "response.content_part.done", part=part, **ids)
        self._emit(out, "response.output_item.done", output_index=index, item=item)
        self.output.append(item)

    def _delta_text(self, out: list[bytes], delta: str) -> None:
        index = len(self.output)
        ident = f"msg_{self.ctx.id[5:]}_{index}"
        if self.text is None:
            self.text = []
            item = _message_item(ident, "", "in_progress")
            item["content"] = []
            self._emit(out, "response.output_item.added", output_index=index, item=item)
            self._emit(out, "response.content_part.added", item_id=ident, output_index=index,
                       content_index=0, part={"type": "output_text", "text": "",
                                              "annotations": [], "logprobs": []})
        self.text.append(delta)
        self._emit(out, "response.output_text.delta", item_id=ident, output_index=index,
                   content_index=0, delta=delta, logprobs=[])

    def _call(self, out: list[bytes], call: dict[str, Any]) -> None:
        self._close_text(out)
        index = len(self.output)
        item = _call_item(f"fc_{self.ctx.id[5:]}_{index}", call)
        self._emit(out, "response.output_item.added", output_index=index,
                   item={**item, "arguments": "", "status": "in_progress"})
        ids = {"item_id": item["id"], "output_index": index}
        self._emit(out, "response.function_call_arguments.delta", delta=item["arguments"],
                   **ids)
        self._emit(out, "response.function_call_arguments.done", name=item["name"],
                   arguments=item["arguments"], **ids)
        self._emit(out, "response.output_item.done", output_index=index, item=item)
        self.output.append(item)

    def _chunk(self, out: list[bytes], obj: dict[str, Any]) -> None:
        if obj.get("usage") is not None:
            self.usage = obj["usage"]
        for choice in obj.get("choices") or []:
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str) and delta["content"]:
                self._delta_text(out, delta["content"])
            for call in delta.get("tool_calls") or []:
                self._call(out, call)
            if choice.get("finish_reason") is not None:
                self.finish = choice["finish_reason"]

    def _end(self, out: list[bytes]) -> None:
        self._close_text(out)
        body = response_object(self.ctx, self.model, self.output, self.finish, self.usage)
        kind = "response.incomplete" if body["status"] == "incomplete" else \
            "response.completed"
        self._emit(out, kind, response=body)

    def _failed(self, out: list[bytes], err: dict[str, Any]) -> None:
        self._emit(out, "error", code=err.get("code"), message=err.get("message"),
                   param=err.get("param"))
        body = response_object(self.ctx, self.model, self.output, self.finish, self.usage,
                               {"code": err.get("code"), "message": err.get("message")})
        self._emit(out, "response.failed", response=body)

    def _translate(self, data: bytes) -> bytes:
        """Chat SSE bytes produced by the relay -> Responses SSE bytes."""
        if not data:
            return b""
        data = self.pending_out + data
        events = data.split(b"\n\n")
        self.pending_out = events.pop()
        out: list[bytes] = []
        self._start(out)
        for event in events:
            if not event.startswith(b"data: "):
                continue
            payload = event[6:]
            if payload == b"[DONE]":
                if self.error is None:
                    self._end(out)
                continue
            obj = json.loads(payload)
            if isinstance(obj.get("error"), dict):
                self._failed(out, obj["error"])
            else:
                self._chunk(out, obj)
        return b"".join(out)


class ResponsesHandler(ChatHandler):
    """ASGI endpoint for ``POST /v1/responses`` (stream and non-stream)."""

    def check(self, raw: bytes, settings: GatewaySettings) -> ChatRequest:
        return check_responses_request(raw, settings, self.state.cache)

    def relay(self, req: ChatRequest) -> StreamRelay:
        return ResponsesRelay(req, self.settings)

    def render(self, body: bytes, req: ChatRequest) -> bytes:
        ctx: ResponsesContext = req.api
        return render_completion(body, ctx)
