"""``POST /v1/chat/completions``: check, forward, validate, relay; cancel on disconnect.

A client that goes away must not leave the engine generating for nobody (public bug
client-disconnect-upstream-cancel, vllm-project/vllm#9428): once the body is read, a
watcher task waits on ASGI ``receive()`` for ``http.disconnect`` and cancels the handler
task; cancellation closes the engine connection (``ClientResponse.close()``), which makes
vLLM abort the request. Such requests are recorded once with status 499
``client_cancelled``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import aiohttp
from starlette.types import Receive, Scope, Send

from ..admission.local import TICKET_KEY, charge_tokens, settings_for
from ..asgi_io import INFO_KEY, read_body, send_error, send_json
from ..auth.tenant import CacheIsolation, cache_salt, salted, tenant_id
from ..errors import GatewayError
from ..models.access import KEY_ENTRY
from ..models.access import refusal as model_refusal
from ..models.engine_client import read_limited, status_error, transport_error
from ..models.engine_refusal import refusal, translate
from ..models.table import Upstream
from ..settings import GatewaySettings
from ..state import GatewayState
from ..telemetry.metrics import RequestInfo
from ..telemetry.spans import end, end_engine
from .regenerate import HEADER, Regenerator, record_refusal, with_count
from .request_checks import ChatRequest, check_chat_request
from .response_checks import check_completion
from .sse import StreamRelay

LOG = logging.getLogger("appliance.gateway")
TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
ERROR_BODY_LIMIT = 64 * 1024
DRAIN_TIMEOUT_S = 1.0


class _DisconnectWatch:
    """Cancels ``target`` when the client disconnects while ``active``.

    :meth:`stop` drops the watcher task as it cancels it: the task's ``CancelledError``
    traceback holds ``_run``'s frame, which holds this object, so a kept ``task`` would
    make a reference cycle per request (the request's scope, uvicorn's cycle, the ticket)
    that only the garbage collector frees: ~60 us of collector time per request at 64
    connections.
    """

    __slots__ = ("active", "gone", "target", "task")

    def __init__(self, receive: Receive, target: asyncio.Task[object]) -> None:
        self.active = True
        self.gone = False
        self.target = target
        self.task: asyncio.Task[None] | None = asyncio.get_running_loop().create_task(
            self._run(receive))

    async def _run(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        if self.active:
            self.gone = True
            self.target.cancel()

    def stop(self) -> None:
        self.active = False
        task, self.task = self.task, None
        if task is not None:
            task.cancel()


class ChatHandler:
    """ASGI endpoint for chat completions (stream and non-stream)."""

    def __init__(self, state: GatewayState) -> None:
        self.state = state
        self.settings = state.settings
        self.isolation = CacheIsolation(state.settings.cache_isolation)
        self._salt_key = state.settings.cache_salt_key.get_secret_value().encode()
        settings = state.settings
        self.regenerator = Regenerator(settings.regenerate_invalid, settings.request_timeout_s,
                                       settings.max_response_bytes,
                                       settings.max_tool_args_bytes, state.metrics.registry)

    def _salted(self, scope: Scope, body: bytes) -> bytes:
        """``body`` with the caller's engine cache salt (:mod:`..auth.tenant`; none under
        ``cache_isolation = "none"``)."""
        entry = scope.get(KEY_ENTRY)
        tenant = None if entry is None else tenant_id(entry, self.isolation)
        return body if tenant is None else salted(body, cache_salt(self._salt_key, tenant))

    def _upstream(self, info: RequestInfo) -> Upstream:
        """The engine of the request's (checked) model (:mod:`..models.table`)."""
        return self.state.upstreams[info.model or self.settings.default_model.name]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        info: RequestInfo = scope[INFO_KEY]
        info.model = self.settings.default_model.name
        checks = info.trace.span("gateway.checks") if info.trace is not None else None
        try:
            raw = await read_body(scope, receive, self.settings.max_body_bytes)
            if raw is None:
                info.status, info.error = 499, "client_cancelled"
                end(checks, info.error)
                return
            info.request_bytes = len(raw)
            admission = self.state.admission
            req = self.check(raw, settings_for(scope, self.settings, admission))
            info.model = req.model
            denied = model_refusal(scope, req.model)
            if denied is not None:
                raise denied
            engine = self._upstream(info).engine
            if not engine.ready:  # this model's engine only; the others keep serving
                raise refusal(engine)
            await charge_tokens(scope, raw, req.body, admission)
            req.body = self._salted(scope, req.body)
        except GatewayError as exc:
            info.error = exc.code
            end(checks, exc.code)
            await send_error(send, exc)
            return
        end(checks)
        info.stream = req.stream
        info.tools = tuple(req.tools)
        audit = self.state.audit
        if audit is not None and audit.include_prompts:
            info.messages = json.loads(req.body).get("messages")
        task = asyncio.current_task()
        if task is None:  # always inside a task under an ASGI server
            raise RuntimeError("chat handler called outside an asyncio task")
        watch = _DisconnectWatch(receive, task)
        try:
            ticket = scope.get(TICKET_KEY)
            if ticket is not None:
                try:
                    await self.state.gate.enter(ticket)  # bounded wait for a start slot
                except GatewayError as exc:
                    info.error = exc.code
                    watch.active = False
                    await send_error(send, exc)
                    return
            span, carrier = self._engine_span(req, info)
            try:
                if req.stream:
                    await self._stream(req, send, info, watch, carrier)
                else:
                    await self._plain(req, send, info, watch, carrier, scope)
            finally:
                end_engine(span, info)
        except asyncio.CancelledError:
            if not watch.gone:
                raise
            task.uncancel()
            info.status, info.error = 499, "client_cancelled"
            LOG.info("request_id=%s client_cancelled: client disconnected, engine request "
                     "closed", info.request_id)
        finally:
            watch.stop()

    # -- hooks for APIs mapped onto chat completions (appliance.gateway.responses) --------
    def check(self, raw: bytes, settings: GatewaySettings) -> ChatRequest:
        """The checked chat request for a raw client body under ``settings`` (the key's
        own limits, :func:`.admission.settings_for`); raises :class:`GatewayError`."""
        return check_chat_request(raw, settings, self.state.cache)

    def relay(self, req: ChatRequest) -> StreamRelay:
        """The stream filter for a checked streaming request."""
        return StreamRelay(req, self.settings)

    def _headers(self, info: RequestInfo) -> dict[str, str]:
        return {"Content-Type": "application/json", "X-Request-Id": info.request_id}

    def _transport_failed(self, exc: BaseException, info: RequestInfo) -> GatewayError:
        info.upstream_exception = type(exc).__name__
        error = transport_error(exc)
        LOG.warning("request_id=%s upstream %s: %s -> %d %s", info.request_id,
                    type(exc).__name__, exc, error.status, error.code)
        return error

    async def _fail(self, send: Send, info: RequestInfo, watch: _DisconnectWatch,
                    error: GatewayError) -> None:
        error = await translate(self._upstream(info).engine, error)
        info.error = error.code
        watch.active = False
        await send_error(send, error)

    async def _post(self, req: ChatRequest, send: Send, info: RequestInfo,
                    watch: _DisconnectWatch, engine: Any) -> aiohttp.ClientResponse | None:
        """Send the checked request upstream (``engine``: the trace's engine span, whose
        ``traceparent`` it carries, or ``None``); on a transport error answer the client and
        return ``None``."""
        headers = self._headers(info)
        if engine is not None:
            headers.update(engine)
        upstream = self._upstream(info)
        info.engine_started = time.perf_counter()
        try:
            return await upstream.session.post(upstream.url, data=req.body, headers=headers)
        except TRANSPORT_ERRORS as exc:
            await self._fail(send, info, watch, self._transport_failed(exc, info))
            return None

    def _engine_span(self, req: ChatRequest, info: RequestInfo) -> tuple[Any, Any]:
        """The trace's engine span and the headers carrying its context, or ``None``s."""
        if info.trace is None:
            return None, None
        carrier: dict[str, str] = {}
        return info.trace.engine(req.body, carrier, self._upstream(info).url,
                                 req.model), carrier

    async def _plain(self, req: ChatRequest, send: Send, info: RequestInfo,
                     watch: _DisconnectWatch, carrier: Any, scope: Scope) -> None:
        resp = await self._post(req, send, info, watch, carrier)
        if resp is None:
            return
        released = False
        try:
            limit = self.settings.max_response_bytes if resp.status == 200 else ERROR_BODY_LIMIT
            raw = await read_limited(resp, limit)
            resp.release()
            released = True
        except TRANSPORT_ERRORS as exc:
            await self._fail(send, info, watch, self._transport_failed(exc, info))
            return
        except GatewayError as exc:
            await self._fail(send, info, watch, exc)
            return
        finally:
            if not released:
                resp.close()
        if resp.status != 200:
            await self._fail(send, info, watch, status_error(resp.status, raw))
            return
        info.first_token_at = time.perf_counter()
        relay = info.trace.span("gateway.relay") if info.trace is not None else None
        try:
            await self._answer(raw, req, send, info, watch, scope, carrier)
        finally:
            end(relay, info.error)

    async def _answer(self, raw: bytes, req: ChatRequest, send: Send, info: RequestInfo,
                      watch: _DisconnectWatch, scope: Scope, carrier: Any) -> None:
        """Check the engine's 200 answer and send it (or the refusal) to the client; a
        refused answer is asked again under ``[gateway] regenerate_invalid``
        (:mod:`.regenerate`)."""
        extra: tuple[tuple[bytes, bytes], ...] = ()
        try:
            checked = check_completion(raw, req, self.settings.max_tool_args_bytes)
        except GatewayError as exc:
            record_refusal(info, raw, exc)
            LOG.warning("request_id=%s refused engine answer: %s (%s)", info.request_id,
                        exc.code, exc.message)
            if not self.regenerator.wanted(exc, req):
                await self._fail(send, info, watch, exc)
                return
            found = await self.regenerator.run(
                exc, req, info, self._upstream(info), {**self._headers(info), **(carrier or {})},
                lambda: charge_tokens(scope, req.body, req.body, self.state.admission))
            info.regenerations = found.sent
            if found.checked is None:
                await self._fail(send, info, watch, with_count(found.error, found.sent))
                return
            checked = found.checked
            extra = ((HEADER, str(found.sent).encode()),)
        info.tool_calls_valid = checked.valid
        info.tool_calls_invalid += checked.withheld
        info.tool_calls_withheld = checked.withheld
        _usage(info, checked.usage)
        if checked.withheld:
            LOG.info("request_id=%s withheld %d tool call(s) cut by max_tokens (choices %s)",
                     info.request_id, checked.withheld, checked.cut_choices)
        watch.active = False
        await send_json(send, 200, self.render(checked.body, req), headers=extra)

    def render(self, body: bytes, req: ChatRequest) -> bytes:
        """The client's 200 body for a checked engine answer (hook for other APIs)."""
        return body

    async def _stream(self, req: ChatRequest, send: Send, info: RequestInfo,
                      watch: _DisconnectWatch, carrier: Any) -> None:
        resp = await self._post(req, send, info, watch, carrier)
        if resp is None:
            return
        reusable = False
        try:
            if resp.status != 200:
                try:
                    raw = await read_limited(resp, ERROR_BODY_LIMIT)
                except (*TRANSPORT_ERRORS, GatewayError):
                    raw = b""
                await self._fail(send, info, watch, status_error(resp.status, raw))
                return
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            relay = self.relay(req)
            span = info.trace.span("gateway.relay") if info.trace is not None else None
            try:
                await self._relay(resp, relay, send, info, watch)
            finally:
                end(span, relay.error.code if relay.error is not None else None)
            info.tool_calls_valid = relay.valid_calls
            info.tool_calls_invalid = relay.invalid_calls
            info.tool_calls_withheld = relay.withheld_calls
            if relay.error is not None:
                info.tool_call_reason = relay.error.reason
            _usage(info, relay.usage)
            if relay.error is not None:
                info.error = relay.error.code
                LOG.warning("request_id=%s stream ended with %s (%s)", info.request_id,
                            relay.error.code, relay.error.message)
            if relay.clean:
                reusable = await _drain(resp)
        finally:
            if reusable:
                resp.release()
            else:
                resp.close()

    async def _relay(self, resp: aiohttp.ClientResponse, relay: StreamRelay, send: Send,
                     info: RequestInfo, watch: _DisconnectWatch) -> None:
        try:
            async for chunk in resp.content.iter_any():
                out = relay.feed(chunk)
                if out and info.first_token_at is None:
                    info.first_token_at = time.perf_counter()
                if relay.done:
                    info.last_token_at = time.perf_counter()
                    watch.active = False
                    out = await self._engine_tail(out, relay, info)
                    await send({"type": "http.response.body", "body": out, "more_body": False})
                    return
                if out:
                    await send({"type": "http.response.body", "body": out, "more_body": True})
            tail = await self._engine_tail(relay.close(), relay, info)
        except TRANSPORT_ERRORS as exc:
            error = await translate(self._upstream(info).engine,
                                    self._transport_failed(exc, info))
            tail = relay.fail(error)
        watch.active = False
        await send({"type": "http.response.body", "body": tail, "more_body": False})

    async def _engine_tail(self, out: bytes, relay: StreamRelay, info: RequestInfo) -> bytes:
        """Replace a terminal upstream error event with ``engine_restarting`` when the
        engine died under the stream (``appliance.gateway.models.engine_refusal.translate``)."""
        error = relay.error
        if error is None or not out.endswith(error.sse()):
            return out
        better = await translate(self._upstream(info).engine, error)
        if better is error:
            return out
        relay.error = better
        return out[:-len(error.sse())] + better.sse()


def _usage(info: RequestInfo, usage: object) -> None:
    """Copy the engine's token counts (``usage.prompt_tokens`` / ``completion_tokens``)
    into ``info`` when they are integers."""
    if isinstance(usage, dict):
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        info.input_tokens = prompt if type(prompt) is int else None
        info.output_tokens = completion if type(completion) is int else None


async def _drain(resp: aiohttp.ClientResponse) -> bool:
    """Read what follows ``[DONE]`` (normally just the chunked terminator) so the engine
    connection can go back to the pool; False if that does not finish promptly."""
    if resp.content.at_eof():  # the terminator came with [DONE]: nothing to wait for
        return True
    try:
        async with asyncio.timeout(DRAIN_TIMEOUT_S):
            while await resp.content.readany():
                pass
    except TRANSPORT_ERRORS:
        return False
    return True
