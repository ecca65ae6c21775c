"""appliance.engine.sdnotify against a fake systemd notify socket (an AF_UNIX datagram socket)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from appliance.engine import sdnotify


@pytest.fixture
def manager(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = tmp_path / "notify"
    sock.bind(str(path))
    sock.settimeout(5)
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    for name in ("WATCHDOG_USEC", "WATCHDOG_PID"):
        monkeypatch.delenv(name, raising=False)
    yield sock
    sock.close()


def _messages(sock: socket.socket, count: int) -> list[str]:
    return [sock.recv(4096).decode() for _ in range(count)]


class _Health(BaseHTTPRequestHandler):
    code = 200

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        self.send_response(self.code if self.path.startswith("/health/") else 404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def health() -> Iterator[tuple[ThreadingHTTPServer, type[_Health]]]:
    handler = type("Handler", (_Health,), {"code": 200})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, handler
    server.shutdown()
    server.server_close()


def test_outside_systemd_every_call_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert sdnotify.notify(READY=1) is False
    assert sdnotify.status("x") is False
    assert sdnotify.ready("127.0.0.1", 1, attempts=1) is False
    assert sdnotify.stopping() is False


def test_notify_sends_key_value_lines(manager: socket.socket) -> None:
    assert sdnotify.notify(READY=1, STATUS="serving")
    assert _messages(manager, 1) == ["READY=1\nSTATUS=serving\n"]


def test_status_is_one_bounded_line(manager: socket.socket) -> None:
    assert sdnotify.status("engine: ready\nlog tail\n" + "x" * 500)
    assert _messages(manager, 1) == ["STATUS=engine: ready\n"]
    assert sdnotify.status("y" * 500)
    assert _messages(manager, 1) == ["STATUS=" + "y" * sdnotify.MAX_STATUS_CHARS + "\n"]


def test_abstract_socket_address(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"appliance-test-{time.monotonic_ns()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert sdnotify.stopping("draining")
        assert sock.recv(100) == b"STOPPING=1\nSTATUS=draining\n"


def test_dead_or_bad_socket_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "gone"))
    assert sdnotify.notify(READY=1) is False
    monkeypatch.setenv("NOTIFY_SOCKET", "relative/path")
    assert sdnotify.notify(READY=1) is False


def test_ready_only_after_the_gateway_answers_ready(
        manager: socket.socket, health: tuple[ThreadingHTTPServer, type[_Health]]) -> None:
    server, handler = health
    port = server.server_address[1]
    handler.code = 503
    assert sdnotify.ready("0.0.0.0", port, attempts=3, interval_s=0.01) is False  # noqa: S104
    assert _messages(manager, 1) == [f"STATUS=gateway on 0.0.0.0:{port} did not report ready\n"]
    handler.code = 200
    assert sdnotify.ready("127.0.0.1", port, attempts=3, interval_s=0.01)
    assert _messages(manager, 1) == [f"READY=1\nSTATUS=serving on 127.0.0.1:{port}\n"]


def test_health_url_shapes() -> None:
    assert sdnotify.health_url("0.0.0.0", 80) == "http://127.0.0.1:80/health/ready"  # noqa: S104
    assert sdnotify.health_url("::", 80, "live") == "http://[::1]:80/health/live"
    assert sdnotify.health_url("10.1.2.3", 8443) == "http://10.1.2.3:8443/health/ready"


@pytest.mark.parametrize(("usec", "pid", "expected"), [
    ("30000000", None, 15.0), ("30000000", "self", 15.0), ("30000000", "1", None),
    ("0", None, None), ("abc", None, None), (None, None, None),
])
def test_watchdog_interval(monkeypatch: pytest.MonkeyPatch, usec: str | None, pid: str | None,
                           expected: float | None) -> None:
    import os

    for name, value in (("WATCHDOG_USEC", usec), ("WATCHDOG_PID", pid)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, str(os.getpid()) if value == "self" else value)
    assert sdnotify.watchdog_interval_s() == expected


def test_watchdog_pings_while_healthy_then_stops(manager: socket.socket,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "40000")  # ping every 20 ms
    healthy = threading.Event()
    healthy.set()
    dog = sdnotify.Watchdog(healthy.is_set).start()
    try:
        assert _messages(manager, 3) == ["WATCHDOG=1\n"] * 3
        healthy.clear()
        rest = []
        while (message := manager.recv(4096).decode()) == "WATCHDOG=1\n":
            rest.append(message)
        assert message.startswith("STATUS=health check failed")
        manager.settimeout(0.2)
        with pytest.raises(TimeoutError):
            manager.recv(4096)  # no keep-alive after a failed check
    finally:
        dog.stop()


def test_watchdog_treats_a_crashing_check_as_failed(manager: socket.socket,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "40000")

    def broken() -> bool:
        raise RuntimeError("boom")

    dog = sdnotify.Watchdog(broken).start()
    try:
        assert _messages(manager, 1)[0].startswith("STATUS=health check failed")
    finally:
        dog.stop()


def test_watchdog_without_systemd_starts_no_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    dog = sdnotify.Watchdog(lambda: True).start()
    assert dog.interval_s is None
    assert not any(t.name == "appliance-watchdog" for t in threading.enumerate())
    dog.stop()
