"""systemd service notifications (``sd_notify(3)``), written over the socket by hand.

``Type=notify`` units give the service ``$NOTIFY_SOCKET`` (a filesystem path, or ``@name``
for the abstract namespace); each message is one ``AF_UNIX`` datagram of ``KEY=VALUE``
lines. Outside systemd (no ``$NOTIFY_SOCKET``) every call is a no-op returning ``False``;
a failed send is ignored (``False``), since the service must never go down because its
manager cannot be told something.

- :func:`status` sends ``STATUS=`` (shown by ``systemctl status``); :func:`say` prints a
  step of ``serve`` to stderr (``appliance: ...``) and sends it as the status;
- :func:`ready` sends ``READY=1`` once the gateway's ``/health/ready`` answers 200 — the
  gateway only answers it when the engine behind it is healthy, so the unit turns active
  when both serve;
- :func:`stopping` sends ``STOPPING=1`` when the drain begins;
- :class:`Watchdog` sends ``WATCHDOG=1`` every ``$WATCHDOG_USEC / 2`` while its health check
  passes (``WatchdogSec=``); a check that fails or raises stops the keep-alives, so systemd
  restarts the unit.

Source: ``sd_notify(3)``, ``systemd.service(5)`` (systemd 252). vLLM does not speak
sd_notify and its children cannot report (``NotifyAccess=main``), so the launcher does.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Callable

MAX_STATUS_CHARS = 200  # one line in `systemctl status`; longer text is cut


def _address() -> str | None:
    path = os.environ.get("NOTIFY_SOCKET", "")
    if not path or path[0] not in "/@":
        return None
    return "\0" + path[1:] if path[0] == "@" else path


def notify(**fields: str | int) -> bool:
    """Send ``KEY=VALUE`` lines (e.g. ``notify(READY=1, STATUS="serving")``).

    Returns ``True`` when the datagram was sent, ``False`` outside systemd or on error."""
    address = _address()
    if address is None:
        return False
    message = "".join(f"{key}={value}\n" for key, value in fields.items()).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(message)
    except OSError:
        return False
    return True


def status(text: str) -> bool:
    """``STATUS=`` with the first line of ``text`` (at most 200 characters)."""
    line = text.splitlines()[0] if text else ""
    return notify(STATUS=line[:MAX_STATUS_CHARS])


def say(message: str) -> None:
    """One step of ``serve``: ``appliance: MESSAGE`` on stderr and as ``STATUS=`` (so
    ``systemctl status`` shows the step under ``Type=notify``)."""
    print(f"appliance: {message}", file=sys.stderr, flush=True)
    status(message)


def probe(url: str, timeout_s: float = 5.0) -> bool:
    """``True`` when ``GET url`` answers 200 within ``timeout_s`` seconds."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - own URL
            return int(response.status) == 200
    except (OSError, ValueError):
        return False


def health_url(host: str, port: int, which: str = "ready") -> str:
    """The gateway's ``/health/<which>`` URL (``ready`` or ``live``); a wildcard bind is
    probed on loopback."""
    if host in ("", "0.0.0.0"):  # noqa: S104 - a bind address, probed on loopback
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/health/{which}"


def ready(host: str, port: int, attempts: int = 50, interval_s: float = 0.2) -> bool:
    """Send ``READY=1`` once the gateway at ``host:port`` reports ready.

    Probes up to ``attempts`` times, ``interval_s`` apart; returns ``False`` without
    sending if it never answered 200 (the unit then stays ``activating`` and
    ``TimeoutStartSec=`` fails it — never reported ready while not serving)."""
    if _address() is None:
        return False
    url = health_url(host, port)
    for _ in range(attempts):
        if probe(url):
            return notify(READY=1, STATUS=f"serving on {host}:{port}")
        time.sleep(interval_s)
    status(f"gateway on {host}:{port} did not report ready")
    return False


def stopping(reason: str = "draining") -> bool:
    """``STOPPING=1`` and ``STATUS=reason``: the service has begun to shut down."""
    return notify(STOPPING=1, STATUS=reason)


def watchdog_interval_s() -> float | None:
    """Half of ``$WATCHDOG_USEC`` in seconds, or ``None`` when no watchdog applies to us
    (unset, malformed, or ``$WATCHDOG_PID`` names another process)."""
    pid = os.environ.get("WATCHDOG_PID")
    if pid and pid != str(os.getpid()):
        return None
    try:
        usec = int(os.environ.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    return usec / 2e6 if usec > 0 else None


class Watchdog:
    """Daemon thread sending ``WATCHDOG=1`` while ``healthy()`` returns ``True``.

    Does nothing when :func:`watchdog_interval_s` is ``None``. Once ``healthy()`` fails or
    raises, the keep-alives stop for good and ``STATUS=`` says why."""

    def __init__(self, healthy: Callable[[], bool]) -> None:
        self._healthy = healthy
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.interval_s = watchdog_interval_s()

    def start(self) -> Watchdog:
        if self.interval_s is not None and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="appliance-watchdog",
                                            daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        interval = self.interval_s or 1.0
        while not self._stop.is_set():
            try:
                ok = self._healthy()
            except Exception:  # noqa: BLE001 - a crashing check is a failed check
                ok = False
            if not ok:
                status("health check failed: watchdog keep-alives stopped")
                return
            notify(WATCHDOG=1)
            self._stop.wait(interval)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
