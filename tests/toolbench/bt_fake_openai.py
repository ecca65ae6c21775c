"""A fake OpenAI chat endpoint on loopback (aiohttp, own thread and loop) for the tool bench tests.

It answers every constrained request (tools with ``tool_choice`` not ``none``, or a
``response_format``) with arguments/content built to satisfy the request's own schema, except
that answer number ``i`` (counting constrained answers from 1) is made invalid when
``invalid_every`` divides ``i``: an extra property the schema forbids (``schema_mismatch``),
or non-JSON content for ``response_format``. So the invalid fraction is known exactly.

Other knobs: ``key`` (401 otherwise), ``models`` (404 for any other model), ``garbage``
(``"models"``: ``GET /models`` answers HTML; ``"chat"``: chat answers HTML from request
``garbage_after`` on), ``revoke_after`` (401 from that chat request on), ``delay_s``.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


def fill(schema: dict[str, Any]) -> Any:
    """A value valid against the (simple) schema: required properties only."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        return {k: fill(schema["properties"][k]) for k in schema.get("required", [])}
    if kind == "array":
        return [fill(schema.get("items", {})) for _ in range(schema.get("minItems", 0))]
    if kind == "integer":
        return int(schema.get("minimum", 0))
    if kind == "number":
        return float(schema.get("minimum", 0))
    if kind == "boolean":
        return True
    return "x" * max(1, schema.get("minLength", 1))


@dataclass
class FakeOpenAI:
    key: str = "k-test"
    models: list[str] = field(default_factory=lambda: ["fake-model"])
    invalid_every: int = 0
    garbage: str | None = None
    garbage_after: int = 0
    revoke_after: int | None = None
    delay_s: float = 0.0
    port: int = 0
    chat_requests: int = 0
    constrained_answers: int = 0
    invalid_answers: int = 0
    in_flight: int = 0
    max_in_flight: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _auth(self, request: web.Request) -> web.Response | None:
        if request.headers.get("Authorization") != f"Bearer {self.key}":
            return web.json_response({"error": {"message": "Incorrect API key provided",
                                                "type": "authentication_error",
                                                "code": "unauthorized"}}, status=401)
        return None

    async def list_models(self, request: web.Request) -> web.Response:
        if self.garbage == "models":
            return web.Response(text="<html>proxy error</html>", content_type="text/html")
        return self._auth(request) or web.json_response(
            {"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]})

    async def chat(self, request: web.Request) -> web.Response:
        self.chat_requests += 1
        n = self.chat_requests
        if self.revoke_after is not None and n > self.revoke_after:
            self.key = "revoked"
        denied = self._auth(request)
        if denied is not None:
            return denied
        body = await request.json()
        if body.get("model") not in self.models:
            return web.json_response({"error": {"message": f"The model `{body.get('model')}` "
                                                "does not exist.", "code": 404}}, status=404)
        if self.garbage == "chat" and n > self.garbage_after:
            return web.Response(text="<html>oops</html>", content_type="text/html")
        if self.delay_s:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            await asyncio.sleep(self.delay_s)
            self.in_flight -= 1
        tools = body.get("tools") or []
        choice = body.get("tool_choice", "auto")
        fmt = body.get("response_format")
        message: dict[str, Any] = {"role": "assistant", "content": "OK", "tool_calls": []}
        finish = "stop"
        if (tools and choice != "none") or fmt:
            self.constrained_answers += 1
            bad = bool(self.invalid_every) and self.constrained_answers % self.invalid_every == 0
            self.invalid_answers += bad
            if fmt:
                value = fill(fmt["json_schema"]["schema"])
                message["content"] = "not json {" if bad else json.dumps(value)
            else:
                fn = tools[0]["function"]
                if isinstance(choice, dict):
                    fn = next(t["function"] for t in tools
                              if t["function"]["name"] == choice["function"]["name"])
                args = fill(fn.get("parameters", {}))
                if "step" in args:  # an agent-loop chain: pass the step the tool asked for
                    last = body["messages"][-1].get("content") or ""
                    found = re.findall(r"step (\d+)", str(last))
                    args["step"] = int(found[-1]) if found else 1
                if bad:
                    args["bogus"] = True
                message["content"] = None
                message["tool_calls"] = [{"id": f"call_{n}", "type": "function",
                                          "function": {"name": fn["name"],
                                                       "arguments": json.dumps(args)}}]
                finish = "tool_calls"
        return web.json_response({
            "id": f"chatcmpl-{n}", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}})

    def __enter__(self) -> FakeOpenAI:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self._sock = sock
        self._loop = asyncio.new_event_loop()
        started = threading.Event()

        async def boot() -> None:
            app = web.Application()
            app.router.add_get("/v1/models", self.list_models)
            app.router.add_post("/v1/chat/completions", self.chat)
            self._runner = web.AppRunner(app, access_log=None)
            await self._runner.setup()
            await web.SockSite(self._runner, sock).start()
            started.set()

        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(boot())
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError("fake endpoint did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
        fut.result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._sock.close()


def closed_port() -> int:
    """A loopback port with nothing listening (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port

