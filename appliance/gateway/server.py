"""Running the gateway: uvicorn (uvloop + httptools) programmatically, or in a thread.

uvicorn's httptools protocol has no limit on the request-line + header block, so a single
2 MiB header or 50 000 headers are buffered whole (GHSA-rxc4-3w6r-4v47 / CVE-2025-48956
hit vLLM's server the same way). :class:`LimitedHttpToolsProtocol` counts the bytes
received while the header block is incomplete and the number of headers, and answers
``431`` and closes the connection when either limit is passed.
"""

from __future__ import annotations

import asyncio
import gc
import math
import socket
import threading
import time
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .app import create_app
from .errors import GatewayError
from .settings import GatewaySettings

RESPONSE_431 = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json"
                b"\r\nconnection: close\r\ncontent-length: %d\r\n\r\n")
BODY_431 = GatewayError(431, "request_header_too_large", "request header block too large").body()


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """httptools protocol with a header-block byte limit and a header-count limit."""

    max_header_bytes = 64 * 1024
    max_headers = 100

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_headers = True
        self._header_bytes = 0
        self._header_count = 0
        self._rejected = False

    def _reject(self) -> None:
        if not self._rejected:
            self._rejected = True
            self.transport.write(RESPONSE_431 % len(BODY_431) + BODY_431)
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._rejected:
            return
        was_in_headers = self._in_headers
        super().data_received(data)
        # Count only reads that began and ended inside a header block: a read that
        # finished a request body is not header bytes (slop is bounded by one read).
        if was_in_headers and self._in_headers and not self._rejected:
            self._header_bytes += len(data)
            if self._header_bytes > self.max_header_bytes:
                self._reject()

    def on_message_begin(self) -> None:
        self._in_headers = True
        self._header_bytes = 0
        self._header_count = 0
        super().on_message_begin()

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._rejected:
            return
        self._header_count += 1
        if self._header_count > self.max_headers or len(name) + len(value) > \
                self.max_header_bytes:
            self._reject()
            return
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._rejected:
            return
        self._in_headers = False
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._rejected:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self._rejected:
            super().on_message_complete()
            self._in_headers = True
            self._header_bytes = 0


def _protocol_for(settings: GatewaySettings) -> type[HttpToolsProtocol]:
    return type("GatewayHttpProtocol", (LimitedHttpToolsProtocol,), {
        "max_header_bytes": settings.max_header_bytes, "max_headers": settings.max_headers,
    })


def make_config(settings: GatewaySettings, host: str, port: int) -> uvicorn.Config:
    """uvicorn configuration used by :func:`serve` and :func:`start_in_thread`."""
    return uvicorn.Config(
        create_app(settings), host=host, port=port, loop="uvloop",
        http=_protocol_for(settings), ws="none", lifespan="on", access_log=False,
        log_level="warning", proxy_headers=False, server_header=False, date_header=True,
        timeout_keep_alive=5, backlog=2048,
        timeout_graceful_shutdown=math.ceil(settings.drain_timeout_s),
    )


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, ready: asyncio.Event | None = None,
                 freeze_gc: bool = False) -> None:
        super().__init__(config)
        self.ready = ready
        self.freeze_gc = freeze_gc

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.freeze_gc:
            # Everything alive now (imports, app, settings) lives as long as the process:
            # move it out of the collector's reach so full collections stay short (p99).
            gc.collect()
            gc.freeze()
        if self.ready is not None and self.started:
            self.ready.set()

    def bound_port(self) -> int:
        for server in self.servers:
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        raise RuntimeError("gateway is not listening")


async def serve(settings: GatewaySettings, host: str, port: int,
                ready: asyncio.Event | None = None) -> None:
    """Serve the gateway on ``host:port`` until shutdown (SIGINT/SIGTERM in the main thread).

    Run it on a uvloop event loop (``uvloop.run(serve(...))``) for the measured throughput.
    ``ready`` is set once the socket listens and the engine session is open; the garbage
    collector's start-up heap is then frozen (``gc.freeze()``, keeps p99 low). Returns after
    a graceful shutdown. Raises ``SystemExit`` / ``OSError`` if the port cannot be bound.
    """
    await _Server(make_config(settings, host, port), ready, freeze_gc=True).serve()


class GatewayHandle:
    """A gateway running in a background thread (tests, demo). ``port`` is the bound port."""

    def __init__(self, server: _Server, thread: threading.Thread, host: str) -> None:
        self._server = server
        self._thread = thread
        self.host = host
        self.port = server.bound_port()

    @property
    def state(self) -> Any:
        """The app's ``GatewayState`` (engine status, key store, reload hooks)."""
        app: Any = self._server.config.app
        return app.state.gateway

    @property
    def url(self) -> str:
        """``http://host:port``."""
        return f"http://{self.host}:{self.port}"

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the server to exit and wait for the thread (``timeout`` seconds)."""
        self._server.should_exit = True
        self._thread.join(timeout)


def start_in_thread(settings: GatewaySettings, host: str = "127.0.0.1", port: int = 0,
                    timeout: float = 10.0) -> GatewayHandle:
    """Start the gateway in a daemon thread; return once it listens (``port=0``: any free).

    Raises ``RuntimeError`` if it does not start within ``timeout`` seconds.
    """
    server = _Server(make_config(settings, host, port))
    thread = threading.Thread(target=server.run, name="appliance-gateway", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError("the gateway did not start")
        time.sleep(0.01)
    return GatewayHandle(server, thread, host)
