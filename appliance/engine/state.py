"""What the gateway knows about the engine's life: up, restarting, failed, draining.

:class:`EngineStatus` is shared between the supervisor thread (``appliance.engine.supervisor``,
which calls :meth:`mark_down` / :meth:`mark_up` / :meth:`mark_failed`) and the gateway's
event loop (which reads :attr:`ready` and awaits :meth:`wait_down`). Attribute writes are
single assignments (atomic under the GIL); listeners run on the gateway loop through
``call_soon_threadsafe``.

While the engine is down:

* ``GET /health/ready`` answers ``503 engine_restarting`` at once (no probe);
* new chat requests get ``503 engine_restarting`` with ``Retry-After`` (seconds: the
  remaining backoff plus the last start time);
* an in-flight request whose engine connection failed (reset, 5xx, stream error event)
  ends with the same 503 (plain) or one terminal SSE error event (stream), never 502:
  :func:`appliance.gateway.models.engine_refusal.translate` waits up to ``DEATH_GRACE_S`` for the
  supervisor to confirm the death.

Without a supervisor (tests, embedded use) the status is always up. The gateway's answers
while the engine is down (``503 engine_restarting``) are built in
:mod:`appliance.gateway.models.engine_refusal`; this module imports nothing of the gateway.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable

DEATH_GRACE_S = 1.5  # supervisor detection: process poll 0.1 s, /health probe 0.5 s
Listener = Callable[[], None]


class EngineStatus:
    """Engine life state. ``state`` is ``up``, ``restarting``, ``failed`` or ``draining``."""

    def __init__(self) -> None:
        self.state = "up"
        self.reason = ""
        self.restarts = 0
        self.deaths = 0
        self.back_at = 0.0  # monotonic time the engine is expected back
        self.supervised = False  # set by the supervisor; unsupervised: always up, no grace
        self._lock = threading.Lock()
        self._listeners: list[tuple[asyncio.AbstractEventLoop, Listener, str]] = []

    @property
    def ready(self) -> bool:
        return self.state == "up"

    # -- supervisor side (any thread) ---------------------------------------------------
    def mark_down(self, reason: str, expected_back_s: float) -> None:
        """The engine died or was declared dead; it is being restarted."""
        self.reason = reason
        self.deaths += 1
        self.back_at = time.monotonic() + max(expected_back_s, 1.0)
        self.state = "restarting"
        self._notify("down")

    def mark_up(self, restarted: bool = True) -> None:
        """The engine answers ``/health`` again."""
        if restarted:
            self.restarts += 1
        self.state = "up"
        self._notify("up")

    def mark_failed(self, reason: str) -> None:
        """Crash loop: no more restarts, the appliance is exiting."""
        self.reason = reason
        self.state = "failed"
        self._notify("down")

    def mark_draining(self) -> None:
        """SIGTERM: finish in-flight requests, admit no new ones."""
        self.state = "draining"
        self._notify("down")

    def subscribe(self, loop: asyncio.AbstractEventLoop, fn: Listener, event: str) -> None:
        """Run ``fn`` on ``loop`` on each ``"down"`` or ``"up"`` event."""
        with self._lock:
            self._listeners.append((loop, fn, event))

    def _notify(self, event: str) -> None:
        with self._lock:
            targets = [(loop, fn) for loop, fn, ev in self._listeners if ev == event]
        for loop, fn in targets:
            if not loop.is_closed():
                loop.call_soon_threadsafe(fn)

    # -- gateway side (event loop) ------------------------------------------------------
    def retry_after_s(self) -> int:
        """Whole seconds a client should wait (at least 1)."""
        return max(1, math.ceil(self.back_at - time.monotonic()))

    async def wait_down(self, timeout: float = DEATH_GRACE_S) -> bool:
        """True once the engine is not up, waiting at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while self.ready:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True
