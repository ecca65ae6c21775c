"""Several gateway processes on one port (``[gateway] workers = N``): more than one core.

Every process binds the same ``host:port`` with ``SO_REUSEPORT`` (the kernel spreads new
connections over the listening processes) and runs the ordinary gateway
(:func:`~appliance.gateway.http.server.start_in_thread`). The first is the serving process's
own gateway; the others are child processes started by :func:`spawn_workers`::

    python -m appliance.gateway.http.workers      # stdin: {"settings": {...}, "host", "port"}

which print ``listening PORT`` on stdout once they accept connections, stop (draining) on
SIGTERM / SIGINT, reload on SIGHUP, and exit when their parent is gone. The settings travel
as the first line of the child's stdin (never the command line or the environment, which
other local users can read), secrets included; the pipe stays open and carries the
engine's life after that (:func:`relay_engine`: one JSON line per change, ``{"state":
"restarting"|"up"|"failed"|"draining", "reason", "back_in_s"}``), so a child refuses with
``503 engine_restarting`` and renews its engine connections exactly as the serving
process's gateway does; end of input means the parent is gone.

Per-key limits are only exact across processes with the shared admission backend
(``[admission] backend = "redis"``); the local backend would give each process its own
limits, so :func:`spawn_workers` refuses it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from appliance.config.admission import workers_problem
from appliance.engine.state import EngineStatus
from appliance.errors import PolicyError

from ..settings import GatewaySettings

READY_PREFIX = "listening "


def reuseport_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` with ``SO_REUSEPORT`` (not yet listening)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(False)
    return sock


def settings_payload(settings: GatewaySettings) -> dict[str, Any]:
    """``settings`` as JSON-able data with its secrets revealed (for a child's stdin only)."""
    data = settings.model_dump(mode="json")
    for row, model in zip(data["models"], settings.models, strict=True):  # the routing table
        if model.upstream_api_key is not None:
            row["upstream_api_key"] = model.upstream_api_key.get_secret_value()
    data["cache_salt_key"] = settings.cache_salt_key.get_secret_value()  # one per install
    redis = settings.admission.redis
    if redis is not None and redis.password is not None:
        data["admission"]["redis"]["password"] = redis.password.get_secret_value()
    return data


def spawn_workers(settings: GatewaySettings, host: str, port: int, count: int,
                  timeout: float = 30.0, supervised: bool = False
                  ) -> list[subprocess.Popen[str]]:
    """Start ``count`` gateway child processes on ``host:port`` and wait until each
    listens (``supervised``: the engine's life comes from :func:`relay_engine`). Raises
    ``PolicyError`` for the local admission backend (limits would not be
    shared) and ``RuntimeError`` if a child does not listen within ``timeout`` seconds
    (every child started is stopped again)."""
    problem = workers_problem(count + 1, settings.admission.backend)
    if problem is not None:
        raise PolicyError(problem, where="gateway.workers",
                          fix='set [admission] backend = "redis" with [admission.redis], or '
                              "workers = 1")
    payload = json.dumps({"settings": settings_payload(settings), "host": host,
                          "port": port, "supervised": supervised})
    children: list[subprocess.Popen[str]] = []
    try:
        for _ in range(count):
            child = subprocess.Popen(  # noqa: S603 - our own module, fixed argv
                [sys.executable, "-m", "appliance.gateway.http.workers"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, text=True, start_new_session=False)
            children.append(child)
            if child.stdin is None or child.stdout is None:  # pragma: no cover
                raise RuntimeError("gateway worker without pipes")
            child.stdin.write(payload + "\n")
            child.stdin.flush()
        deadline = time.monotonic() + timeout
        for child in children:
            if not _wait_ready(child, deadline):
                raise RuntimeError(f"gateway worker {child.pid} did not start listening "
                                   f"within {timeout:g} s (exit code {child.poll()})")
    except BaseException:
        stop_workers(children)
        raise
    return children


def _wait_ready(child: subprocess.Popen[str], deadline: float) -> bool:
    result: list[str] = []

    def _read() -> None:
        if child.stdout is not None:
            result.append(child.stdout.readline())

    reader = threading.Thread(target=_read, daemon=True)
    reader.start()
    reader.join(max(0.0, deadline - time.monotonic()))
    return bool(result) and result[0].startswith(READY_PREFIX)


def engine_event(status: EngineStatus) -> str:
    """One line describing ``status`` for the children (see the module docstring)."""
    back_in = max(0.0, status.back_at - time.monotonic())
    return json.dumps({"state": status.state, "reason": status.reason,
                       "back_in_s": round(back_in, 3)}) + "\n"


def broadcast(children: list[subprocess.Popen[str]], line: str) -> None:
    """Write ``line`` to every live child's stdin (a child gone is skipped)."""
    for child in children:
        if child.poll() is None and child.stdin is not None:
            try:
                child.stdin.write(line)
                child.stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass


def relay_engine(status: EngineStatus, loop: asyncio.AbstractEventLoop,
                 children: list[subprocess.Popen[str]]) -> None:
    """Tell ``children`` of every change of the supervised engine's ``status`` (listeners
    on ``loop``, the serving process's gateway loop) and of its state now."""

    def _send() -> None:
        broadcast(children, engine_event(status))

    status.subscribe(loop, _send, "down")
    status.subscribe(loop, _send, "up")
    loop.call_soon_threadsafe(_send)


def _follow_engine(status: EngineStatus, stop: threading.Event) -> None:
    """Child side: apply the parent's engine lines to ``status``; EOF sets ``stop``."""
    for line in sys.stdin:
        try:
            event = json.loads(line)
            state, reason = str(event["state"]), str(event.get("reason", ""))
            back_in = float(event.get("back_in_s", 1.0))
        except (ValueError, KeyError, TypeError):
            continue
        if state == "up" and not status.ready:
            status.mark_up()
        elif state == "restarting":
            status.mark_down(reason, back_in)
        elif state == "failed":
            status.mark_failed(reason)
        elif state == "draining":
            status.mark_draining()
    stop.set()


def stop_workers(children: list[subprocess.Popen[str]], timeout: float = 15.0) -> None:
    """SIGTERM every child, wait ``timeout`` seconds in all, then SIGKILL what is left."""
    for child in children:
        if child.stdin is not None:
            try:
                child.stdin.close()
            except OSError:
                pass
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for child in children:
        try:
            child.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(5)


def main() -> int:
    """Child process entry point (see the module docstring)."""
    from .server import start_in_thread

    request = json.loads(sys.stdin.readline())
    settings = GatewaySettings.model_validate(request["settings"])
    host, port = str(request["host"]), int(request["port"])
    parent = os.getppid()
    sock = reuseport_socket(host, port)
    handle = start_in_thread(settings, host, port, freeze_gc=True, sock=sock)
    stop = threading.Event()
    status = EngineStatus()
    status.supervised = bool(request.get("supervised", False))
    handle.state.attach_engine(status)
    threading.Thread(target=_follow_engine, args=(status, stop), daemon=True,
                     name="engine-events").start()

    def _on_stop(_signum: int, _frame: object) -> None:
        stop.set()

    def _on_hup(_signum: int, _frame: object) -> None:
        handle.state.reload_threadsafe()
        handle.reload_tls()

    signal.signal(signal.SIGTERM, _on_stop)
    signal.signal(signal.SIGINT, _on_stop)
    signal.signal(signal.SIGHUP, _on_hup)
    print(f"{READY_PREFIX}{handle.port}", flush=True)
    while not stop.wait(0.2):
        if os.getppid() != parent:  # the serving process is gone
            break
    handle.stop(timeout=settings.drain_timeout_s + 10.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
