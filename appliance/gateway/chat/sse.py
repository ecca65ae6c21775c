"""Server-sent-event relay for streamed chat completions, with tool-call reassembly.

Design (decided here, documented in ``bench/README.md``): the engine's events are relayed
byte for byte, except

* **tool-call deltas are held back.** Bytes already sent cannot be retracted, so the gateway
  never forwards a tool-call fragment before the whole call is validated. Fragments are
  reassembled per ``choices[].index`` and ``tool_calls[].index`` (id, type and name may
  arrive only in the first delta; later deltas carry only argument text). When the choice's
  ``finish_reason`` arrives the calls are checked exactly like a non-stream answer
  (:func:`appliance.gateway.chat.response_checks.check_calls`) and released as one chunk holding
  every call in full (``index``, ``id``, ``type``, ``function.name``, complete
  ``function.arguments``) just before the finish chunk. Text deltas are not delayed.
* ``finish_reason: "length"`` is relayed as is; tool calls held back for that choice are
  dropped, never released (``response_checks``: truncation as OpenAI answers it). Text
  already sent stays sent.
* an invalid call, an engine error event or a stream that ends without ``finish_reason`` /
  ``[DONE]`` ends the stream with one SSE error event in the OpenAI error shape and
  ``data: [DONE]`` (public bug stream-tool-delta-reassembly: empty arguments, duplicated
  non-ASCII arguments, finish chunks that drop id/name).
* a usage-only chunk (``choices: []``) is forwarded only when the client asked for it with
  ``stream_options.include_usage`` (public bug stream-options-usage).

Every event is parsed (:func:`appliance.gateway.fastjson.loads`, orjson: NaN, invalid
UTF-8 and the like are refused as ``upstream_error``); events are only re-serialised when
modified (then from an exact stdlib re-parse, so no number is rounded). Each upstream read
is answered with one ASGI send holding every event of that read (:meth:`StreamRelay.feed`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import fastjson
from ..errors import GatewayError
from ..settings import GatewaySettings
from .request_checks import ChatRequest
from .response_checks import CallParts, check_calls, check_structured, cuts_call, invalid_call

DONE = b"data: [DONE]\n\n"
MAX_CALL_INDEX = 127
_ABSENT = object()


@dataclass(slots=True)
class _Call:
    id: str | None = None
    name: str | None = None
    args: list[str] = field(default_factory=list)
    size: int = 0


@dataclass(slots=True)
class _Choice:
    calls: dict[int, _Call] = field(default_factory=dict)
    content: list[str] | None = None
    content_size: int = 0
    finished: bool = False


def _without_calls(payload: bytes) -> Any:
    """The event re-parsed exactly (stdlib) with every choice's ``delta.tool_calls``
    removed: what the relay forwards of an event that carried call fragments."""
    obj = fastjson.reparse_exact(payload)
    for choice in obj["choices"]:
        choice["delta"].pop("tool_calls", None)
    return obj


def _upstream(message: str) -> GatewayError:
    return GatewayError.of("upstream_error", message)


def _without_choices(obj: Any) -> GatewayError:
    """The error for an event with no ``choices`` array (an engine error event or not)."""
    if isinstance(obj, dict) and isinstance(obj.get("error"), dict):
        message = str(obj["error"].get("message", ""))[:300]
        return _upstream(f"the engine reported an error: {message}")
    return _upstream("the engine sent an event without choices")


class StreamRelay:
    """Incremental SSE filter: ``feed(bytes) -> bytes to send``; ``close() -> tail``.

    After ``done`` is True nothing more is produced. ``error`` holds the error that ended
    the stream (also sent to the client), ``valid_calls`` / ``invalid_calls`` count tool
    calls for the audit log (``withheld_calls``: cut by ``max_tokens``, also invalid),
    ``clean`` is True when the stream ended with ``[DONE]``.
    """

    def __init__(self, req: ChatRequest, settings: GatewaySettings) -> None:
        self.req = req
        self.max_event = settings.max_stream_event_bytes
        self.max_args = settings.max_tool_args_bytes
        self.max_content = settings.max_response_bytes
        self.pending = b""
        self.choices: dict[int, _Choice] = {}
        self.done = False
        self.clean = False
        self.error: GatewayError | None = None
        self.valid_calls = 0
        self.invalid_calls = 0
        self.withheld_calls = 0
        self.usage: Any = None  # the engine's usage chunk, if any (audit log, traces)
        self.calls_allowed = bool(req.tools) and req.tool_choice != "none"

    # -- public -------------------------------------------------------------------------
    def feed(self, data: bytes) -> bytes:
        """Consume upstream bytes; return the bytes to send to the client now."""
        if self.done:
            return b""
        if self.pending:
            data = self.pending + data
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        parts = data.split(b"\n\n")
        self.pending = parts.pop()
        out: list[bytes] = []
        try:
            for event in parts:
                if event:
                    self._event(event, out)
                if self.done:
                    break
            if not self.done and len(self.pending) > self.max_event:
                raise _upstream(f"an engine event exceeds {self.max_event} bytes")
        except GatewayError as exc:
            self._fail(exc, out)
        return b"".join(out)

    def close(self) -> bytes:
        """Upstream ended (EOF). Return the tail to send (an error event if incomplete)."""
        if self.done:
            return b""
        out: list[bytes] = []
        self._fail(_upstream("the engine's stream ended before [DONE]"), out)
        return b"".join(out)

    def fail(self, error: GatewayError) -> bytes:
        """End the stream with ``error`` (e.g. an upstream timeout); return the bytes."""
        if self.done:
            return b""
        out: list[bytes] = []
        self._fail(error, out)
        return b"".join(out)

    # -- internals ----------------------------------------------------------------------
    def _fail(self, error: GatewayError, out: list[bytes]) -> None:
        if error.code == "invalid_tool_call":
            self.invalid_calls += sum(len(c.calls) for c in self.choices.values()) or 1
        self.error = error
        self.done = True
        out.append(error.sse())

    def _payload(self, event: bytes) -> bytes | None:
        lines = []
        for line in event.split(b"\n"):
            if line.startswith(b"data:"):
                value = line[5:]
                lines.append(value[1:] if value.startswith(b" ") else value)
        return b"\n".join(lines) if lines else None

    def _event(self, event: bytes, out: list[bytes]) -> None:
        # The per-event hot path (20 events per stream in bench/gateway.py): exact type
        # checks, locals, and no generator; the same checks as the spelled-out rules above.
        if event.startswith(b"data: ") and b"\n" not in event:
            payload = event[6:]
        else:
            lines = self._payload(event)
            if lines is None:
                return  # comment / keep-alive only
            payload = lines
        if payload == b"[DONE]":
            self._done(out)
            return
        try:
            obj = fastjson.loads(payload)
        except (ValueError, RecursionError):
            raise _upstream("the engine sent an event that is not JSON") from None
        choices = obj.get("choices") if type(obj) is dict else None
        if type(choices) is not list:
            raise _without_choices(obj)
        req = self.req
        if not choices:
            usage = obj.get("usage")
            if usage is not None:
                self.usage = usage
                if req.include_usage:
                    out.append(b"data: " + payload + b"\n\n")
            return
        modified = False
        released: list[bytes] | None = None
        n = req.n
        states = self.choices
        for choice in choices:
            if type(choice) is not dict:
                raise _upstream("the engine sent a malformed choice")
            delta = choice.get("delta")
            index = choice.get("index", 0)
            if type(delta) is not dict or type(index) is not int or not 0 <= index < n:
                raise _upstream("the engine sent a malformed choice")
            state = states.get(index)
            if state is None:
                state = states[index] = _Choice(content=[] if req.structured else None)
            reason = choice.get("finish_reason")
            if state.finished:
                if delta.get("tool_calls") or delta.get("content") or reason is not None:
                    raise _upstream(f"the engine continued choice {index} after finish_reason")
                continue  # an empty trailing delta carries nothing
            deltas = delta.pop("tool_calls", _ABSENT)
            if deltas is not _ABSENT:
                if deltas is not None and deltas != []:
                    self._absorb(state, deltas)
                modified = True
            content = state.content
            if content is not None:
                text = delta.get("content")
                if type(text) is str:
                    content.append(text)
                    state.content_size += len(text)
                    if state.content_size > self.max_content:
                        raise _upstream("the structured output exceeds the response size "
                                        "limit")
            if reason is not None:
                state.finished = True
                chunk = self._finish(obj, payload, index, state, reason)
                if chunk is not None:
                    if released is None:
                        released = []
                    released.append(chunk)
        if released is not None:
            out.extend(released)
        if not modified:
            out.append(b"data: " + payload + b"\n\n")
            return
        for choice in choices:  # forwarded without its call fragments, if anything is left
            if choice.get("delta") or choice.get("finish_reason") is not None or choice.get(
                    "logprobs"):
                try:
                    out.append(b"data: " + fastjson.dumps(_without_calls(payload)) + b"\n\n")
                except (ValueError, RecursionError):  # orjson parses deeper than the stdlib
                    raise _upstream("the engine sent an event nested too deeply") from None
                return

    def _absorb(self, state: _Choice, deltas: Any) -> None:
        """Add one event's call fragments (a non-empty ``delta.tool_calls``) to ``state``."""
        if type(deltas) is not list:
            raise invalid_call("malformed", "tool_calls delta is not an array")
        if not self.calls_allowed:
            raise invalid_call("calls_not_allowed", "the engine streamed a tool call although "
                               "no tool may be called (no tools or tool_choice \"none\")")
        calls = state.calls
        for item in deltas:
            index = item.get("index") if type(item) is dict else None
            if type(index) is not int or not 0 <= index <= MAX_CALL_INDEX:
                raise invalid_call("malformed", "tool call delta without a valid index")
            call = calls.get(index)
            if call is None:
                call = calls[index] = _Call()
            ident = item.get("id")
            if ident:
                if type(ident) is not str or (call.id is not None and call.id != ident):
                    raise invalid_call("malformed", f"tool call {index}: conflicting ids")
                call.id = ident
            kind = item.get("type")
            if kind is not None and kind != "function":
                raise invalid_call("malformed", f"tool call {index}: type is not function")
            fn = item.get("function")
            if fn is None:
                continue
            if type(fn) is not dict:
                raise invalid_call("malformed", f"tool call {index}: function is not an object")
            name = fn.get("name")
            if name:
                if type(name) is not str or (call.name is not None and call.name != name):
                    raise invalid_call("malformed", f"tool call {index}: conflicting names")
                call.name = name
            args = fn.get("arguments")
            if args is not None:
                if type(args) is not str:
                    raise invalid_call("malformed", f"tool call {index}: arguments not a string")
                call.args.append(args)
                call.size += len(args)
                if call.size > self.max_args:
                    raise invalid_call("too_large", f"tool call {index}: arguments exceed "
                                       f"{self.max_args} characters")

    def _finish(self, env: dict[str, Any], payload: bytes, index: int, state: _Choice,
                reason: Any) -> bytes | None:
        """Check choice ``index``'s calls at its finish; the chunk releasing them (or
        ``None``). Raises :class:`GatewayError` for an invalid call."""
        calls = [CallParts(i, c.id, c.name, "".join(c.args))
                 for i, c in sorted(state.calls.items())]
        if reason == "length":
            if cuts_call(self.req, bool(calls)):  # withheld: never released as a call
                self.withheld_calls += len(calls) or 1
                self.invalid_calls += len(calls) or 1
            return None
        self.valid_calls += check_calls(calls, self.req, self.max_args, index)
        if not calls:
            if state.content is not None:
                check_structured("".join(state.content), self.req)
            return None
        full = [{"index": c.index, "id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments}} for c in calls]
        if isinstance(env.get("created"), float):  # orjson rounds integers past 64 bits
            try:
                env = fastjson.reparse_exact(payload)
            except (ValueError, RecursionError):
                raise _upstream("the engine sent an event nested too deeply") from None
        chunk = {"id": env.get("id"), "object": env.get("object", "chat.completion.chunk"),
                 "created": env.get("created"), "model": env.get("model"),
                 "choices": [{"index": index, "delta": {"tool_calls": full},
                              "logprobs": None, "finish_reason": None}]}
        return b"data: " + fastjson.dumps(chunk) + b"\n\n"

    def _done(self, out: list[bytes]) -> None:
        if not self.choices or not all(c.finished for c in self.choices.values()):
            raise _upstream("the engine's stream ended without a finish_reason")
        self.done = True
        self.clean = True
        out.append(DONE)
