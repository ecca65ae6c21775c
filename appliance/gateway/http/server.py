"""Running the gateway: uvicorn (uvloop + httptools) on its own event loop in a thread.

uvicorn's httptools protocol has no limit on the request-line + header block, so a single
2 MiB header or 50 000 headers are buffered whole (GHSA-rxc4-3w6r-4v47 / CVE-2025-48956
hit vLLM's server the same way). :class:`LimitedHttpToolsProtocol` counts the bytes
received while the header block is incomplete and the number of headers, and answers
``431`` and closes the connection when either limit is passed.

One run path: :func:`start_in_thread` (uvicorn on its own event loop in a thread), used
by ``appliance serve``, the demo, the tests and, through :func:`serve_until_signal`, the
benchmarks. With ``settings.tls`` the listener speaks TLS (:mod:`appliance.gateway.auth.tls`:
context, :meth:`GatewayHandle.reload_tls` on SIGHUP, client-certificate key ids in the
ASGI scope); without it a non-loopback host is refused
(``plaintext_not_allowed``) unless ``settings.allow_plaintext``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import math
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from appliance.config.tls import require_tls_for_host

from ..auth.tls import TLS_KEY_ID, TlsEndpoint
from ..errors import GatewayError
from ..settings import GatewaySettings
from ..state import GatewayState
from .app import create_app

RESPONSE_431 = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json"
                b"\r\nconnection: close\r\ncontent-length: %d\r\n\r\n")
BODY_431 = GatewayError.of("request_header_too_large", "request header block too large").body()


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """httptools protocol with a header-block byte limit and a header-count limit."""

    max_header_bytes = 64 * 1024
    max_headers = 100

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_headers = True
        self._header_bytes = 0
        self._header_count = 0
        self._block_done = False  # a header block completed during the current read
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
        self._block_done = False
        super().data_received(data)
        # Count only reads that began and ended inside one header block: a read that
        # completed a header block (a whole request with its body included, found by
        # schemathesis) is not header bytes (slop is bounded by one read).
        if was_in_headers and self._in_headers and not self._block_done \
                and not self._rejected:
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
        self._block_done = True
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._rejected:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self._rejected:
            super().on_message_complete()
            self._in_headers = True
            self._header_bytes = 0


class ClientCertProtocol(LimitedHttpToolsProtocol):
    """With client certificates: closes a connection :meth:`TlsEndpoint.admit` refuses and
    adds the certificate's key id (once per connection) to each request's scope under
    ``TLS_KEY_ID``; ``tls`` is set on a per-server subclass."""

    tls: TlsEndpoint
    _tls_key_id: str | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        keep, self._tls_key_id = self.tls.admit(transport)
        if not keep:
            self._rejected = True  # data_received drops anything already decrypted
            transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._tls_key_id is not None:
            self.scope[TLS_KEY_ID] = self._tls_key_id  # type: ignore[literal-required]


def _protocol_for(settings: GatewaySettings,
                  tls: TlsEndpoint | None = None) -> type[HttpToolsProtocol]:
    base = ClientCertProtocol if tls is not None and tls.client_certs \
        else LimitedHttpToolsProtocol
    return type("GatewayHttpProtocol", (base,), {
        "max_header_bytes": settings.max_header_bytes, "max_headers": settings.max_headers,
        "tls": tls,
    })


class GatewayConfig(uvicorn.Config):
    """uvicorn configuration plus the app's state and the listener's TLS state (``None``:
    plaintext)."""

    gateway: GatewayState
    tls: TlsEndpoint | None = None


def make_config(settings: GatewaySettings, host: str, port: int) -> GatewayConfig:
    """uvicorn configuration used by :func:`start_in_thread`.

    Raises ``PolicyError`` (``plaintext_not_allowed``) for plaintext on a non-loopback host
    and ``TlsError`` for unusable TLS files, before any socket is bound.
    """
    require_tls_for_host(host, settings.tls, settings.allow_plaintext)
    tls = TlsEndpoint(settings.tls) if settings.tls is not None else None
    app = create_app(settings)
    factory: Callable[[uvicorn.Config, Callable[[], Any]], Any] | None = None
    if tls is not None:
        tls.attach(app.state.metrics.registry, app.state.audit)
        listening = tls.listening

        def factory(_config: uvicorn.Config, _default: Callable[[], Any]) -> Any:
            return listening

    config = GatewayConfig(
        app, host=host, port=port, loop="uvloop",
        http=_protocol_for(settings, tls), ws="none", lifespan="on", access_log=False,
        log_level="warning", proxy_headers=False, server_header=False, date_header=True,
        timeout_keep_alive=5, backlog=2048,
        timeout_graceful_shutdown=math.ceil(settings.drain_timeout_s),
        ssl_context_factory=factory,
    )
    config.gateway = app.state
    config.tls = tls
    return config


class _Server(uvicorn.Server):
    def __init__(self, config: GatewayConfig, freeze_gc: bool = False) -> None:
        super().__init__(config)
        self.freeze_gc = freeze_gc
        self.tls = config.tls
        self.gateway = config.gateway
        self.loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().startup(sockets=sockets)
        if self.freeze_gc and self.started:
            # Everything alive now (imports, app, settings) lives as long as the process:
            # move it out of the collector's reach so full collections stay short (p99).
            gc.collect()
            gc.freeze()

    def bound_port(self) -> int:
        for server in self.servers:
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        raise RuntimeError("gateway is not listening")


class GatewayHandle:
    """A running gateway (:func:`start_in_thread`). ``port`` is the bound port."""

    def __init__(self, server: _Server, thread: threading.Thread, host: str) -> None:
        self._server = server
        self._thread = thread
        self.host = host
        self.port = server.bound_port()

    @property
    def state(self) -> GatewayState:
        """The app's :class:`GatewayState` (engine status, key store, reload hooks)."""
        return self._server.gateway

    @property
    def url(self) -> str:
        """``http://host:port`` (``https://`` with TLS)."""
        scheme = "https" if self._server.tls is not None else "http"
        return f"{scheme}://{self.host}:{self.port}"

    def reload_tls(self, timeout: float = 10.0) -> bool:
        """Reload the TLS certificate and key (what SIGHUP does); ``False`` if refused or
        without TLS. Safe from any thread: the reload runs on the server's event loop (one
        writer for the audit log), waiting at most ``timeout`` seconds."""
        tls, loop = self._server.tls, self._server.loop
        if tls is None or loop is None or loop.is_closed():
            return False
        done: concurrent.futures.Future[bool] = concurrent.futures.Future()

        def _reload() -> None:
            try:
                done.set_result(tls.reload())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                done.set_exception(exc)

        loop.call_soon_threadsafe(_reload)
        return done.result(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the server to exit and wait for the thread (``timeout`` seconds)."""
        self._server.should_exit = True
        self._thread.join(timeout)


def start_in_thread(settings: GatewaySettings, host: str = "127.0.0.1", port: int = 0,
                    timeout: float = 10.0, *, freeze_gc: bool = False,
                    sock: socket.socket | None = None) -> GatewayHandle:
    """Start the gateway and return once it listens (``port=0``: any free port).

    The gateway's one run path: uvicorn (uvloop + httptools, :func:`make_config`) on an
    event loop of its own in a daemon thread, so the caller's main thread stays free for
    signals and supervision. ``appliance serve`` (and so ``appliance demo``) start it here
    with ``freeze_gc=True``, as does :func:`serve_until_signal` (used by ``bench/gateway.py``,
    which measures this path); tests start it with the default. ``freeze_gc``: once
    listening, collect and ``gc.freeze()`` the start-up heap (keeps full collections, and
    so p99, short; bench/README.md). ``sock``: listen on this bound socket instead of
    ``host:port`` (several gateway processes on one port, :mod:`.workers`). Raises what
    :func:`make_config` raises, and ``RuntimeError`` if the server does not listen within
    ``timeout`` seconds (port in use, lifespan failure).
    """
    server = _Server(make_config(settings, host, port), freeze_gc)
    sockets = None if sock is None else [sock]
    thread = threading.Thread(target=server.run, kwargs={"sockets": sockets},
                              name="appliance-gateway", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError("the gateway did not start")
        time.sleep(0.01)
    return GatewayHandle(server, thread, host)


def serve_until_signal(settings: GatewaySettings, host: str, port: int,
                       poll_s: float = 0.2) -> None:
    """Serve on ``host:port`` until SIGTERM / SIGINT, then drain and stop (main thread).

    The gateway runs as in ``appliance serve`` (:func:`start_in_thread` with
    ``freeze_gc=True``) while this thread waits as ``Appliance.wait`` does, waking every
    ``poll_s`` seconds; SIGHUP re-reads the keys file, reopens the audit log and reloads
    the TLS certificate and key (open connections are kept). Used by ``bench/gateway.py``
    and ``bench/admission.py``. Raises ``RuntimeError`` outside the main thread and what
    :func:`start_in_thread` raises.
    """
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("serve_until_signal needs the main thread (signal handlers)")
    handle = start_in_thread(settings, host, port, freeze_gc=True)
    stop = threading.Event()

    def _on_stop(_signum: int, _frame: object) -> None:
        stop.set()

    def _on_hup(_signum: int, _frame: object) -> None:
        handle.state.reload_threadsafe()
        handle.reload_tls()

    handlers = {signal.SIGTERM: _on_stop, signal.SIGINT: _on_stop, signal.SIGHUP: _on_hup}
    previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    try:
        while not stop.wait(poll_s):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        handle.stop(timeout=settings.drain_timeout_s + 10.0)
