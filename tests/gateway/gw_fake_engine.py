"""A scriptable fake OpenAI engine (raw ASGI under uvicorn, in a thread) for gateway tests.

Every request is recorded in ``calls`` (path, method, headers, parsed JSON body). The reply
is chosen by ``engine.reply`` (a :class:`Reply` or a callable ``body -> Reply``). Client
disconnects seen by the engine are recorded in ``disconnects`` (monotonic times).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn

MODEL = "appliance-model"


@dataclass
class Reply:
    status: int = 200
    body: Any = None              # JSON-able object or raw bytes (non-stream)
    events: list[Any] | None = None  # SSE payloads (dict -> JSON, bytes/str raw); [DONE] added
    done: bool = True             # append data: [DONE]
    delay_s: float = 0.0          # before the response headers
    body_delay_s: float = 0.0     # after the headers, before the body / first event
    gap_s: float = 0.0            # between events
    gaps: dict[int, float] = field(default_factory=dict)  # extra delay before event i
    hang: bool = False            # accept the request and never answer
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)  # extra (non-stream)


def completion(message: dict[str, Any], finish_reason: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake", "object": "chat.completion", "created": 1764400000,
        "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", **message},
                     "logprobs": None, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def tool_message(*calls: tuple[str, str, str]) -> dict[str, Any]:
    """Assistant message with tool calls given as (id, name, arguments)."""
    return {"content": None, "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
        for cid, name, args in calls]}


def chunk(choice: dict[str, Any]) -> dict[str, Any]:
    """Wrap one ``choices[0]`` item into a ``chat.completion.chunk`` payload."""
    item = {"index": 0, "logprobs": None, "finish_reason": None, **choice}
    return {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1764400000,
            "model": MODEL, "choices": [item]}


def text_stream(*pieces: str, finish: str = "stop") -> list[dict[str, Any]]:
    events = [chunk({"delta": {"role": "assistant", "content": ""}})]
    events += [chunk({"delta": {"content": p}}) for p in pieces]
    events.append(chunk({"delta": {}, "finish_reason": finish}))
    return events


class FakeEngine:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.disconnects: list[float] = []
        self.events_sent = 0
        self.reply: Reply | Callable[[Any], Reply] = Reply(body=completion({"content": "hi"}))
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    def reset(self) -> None:
        self.calls.clear()
        self.disconnects.clear()
        self.events_sent = 0
        self.reply = Reply(body=completion({"content": "hi"}))

    @property
    def chat_calls(self) -> list[dict[str, Any]]:
        return [c for c in self.calls if c["path"] != "/health"]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        raw = b""
        while True:
            msg = await receive()
            raw += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        path = scope["path"]
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        self.calls.append({"path": path, "method": scope["method"],
                           "headers": dict(scope["headers"]), "body": body})
        if path == "/health":
            await self._send_json(send, 200, b"")
            return
        reply = self.reply(body) if callable(self.reply) else self.reply
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            if not finished:
                self.disconnects.append(time.monotonic())
            gone.set()

        finished = False
        watcher = asyncio.get_running_loop().create_task(watch())
        try:
            await self._reply(reply, send, gone)
        finally:
            finished = True
            watcher.cancel()

    async def _send_json(self, send: Any, status: int, body: bytes) -> None:
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def _reply(self, reply: Reply, send: Any, gone: asyncio.Event) -> None:
        if reply.hang:
            await gone.wait()
            return
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.events is None:
            body = reply.body if isinstance(reply.body, bytes) else json.dumps(
                reply.body, ensure_ascii=False).encode()
            await send({"type": "http.response.start", "status": reply.status,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode()),
                                    *reply.headers]})
            if reply.body_delay_s:
                await asyncio.sleep(reply.body_delay_s)
            await send({"type": "http.response.body", "body": body})
            return
        await send({"type": "http.response.start", "status": reply.status,
                    "headers": [(b"content-type", b"text/event-stream")]})
        if reply.body_delay_s:
            await asyncio.sleep(reply.body_delay_s)
        payloads = [e if isinstance(e, bytes) else e.encode() if isinstance(e, str)
                    else json.dumps(e, ensure_ascii=False).encode() for e in reply.events]
        if reply.done:
            payloads.append(b"[DONE]")
        for i, payload in enumerate(payloads):
            pause = reply.gaps.get(i, 0.0) + (reply.gap_s if i else 0.0)
            if pause:
                await asyncio.sleep(pause)
            if gone.is_set():
                return
            await send({"type": "http.response.body", "body": b"data: " + payload + b"\n\n",
                        "more_body": True})
            self.events_sent += 1
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def start(self, uds: str | None = None) -> FakeEngine:
        config = uvicorn.Config(self, host="127.0.0.1", port=0, uds=uds, log_level="warning",
                                lifespan="off", timeout_graceful_shutdown=1,
                                timeout_keep_alive=5)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake engine did not start")
            time.sleep(0.01)
        if uds is None:
            self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(5)
