"""Bounded waiting: the start gate between admission and the engine.

At most ``max_running`` admitted requests are in the engine at once (per gateway process;
set it to the engine's batch size, ``max_num_seqs``, so a request that passes the gate
starts at once). The others wait in FIFO order, each at most ``max_queue_wait_s``: one
that cannot start by then is answered ``503 overloaded`` and never held longer. Streaming
and non-streaming requests wait alike (the gate is passed before the engine is called).

The service rate is measured, not configured: ``rate = max_running / mean_hold`` where
``mean_hold`` is the moving mean (EWMA, weight 1/16) of how long a request held its slot.
It gives

* ``Retry-After`` of every 503 the gate answers, and of the backend's ``max_pending``
  refusals: the time the queue ahead needs at that rate, ``ceil((waiting + 1) / rate)``
  seconds, 1..3600 (1 before anything was measured);
* with ``adaptive``, the pending bound follows the rate: a request that would be at place
  ``p`` in the queue is refused at once (``queue_full``) when ``p / rate`` exceeds
  ``max_queue_wait_s`` (it could not start in time anyway) -- once 8 requests have been
  measured; until then only the deadline applies.

The bound is kept as measured at the start, not at the grant: a freed slot skips waiters
whose deadline has passed (they are answered 503), and a waiter granted in time whose task
resumes past its deadline (the event loop was busy: measured with 1,000 concurrent clients,
7 of 208 starts landed 0-1 s late) is answered 503 and passes the slot on. So no request
starts more than ``max_queue_wait_s`` after its admission.

Metrics: ``gateway_queue_wait_seconds`` (histogram: time from admission to start, of
requests that started; never above ``max_queue_wait_s`` when ``max_running`` is set),
``gateway_queue_waiting`` (gauge), ``gateway_service_rate`` (gauge, requests per second),
refusals ``{reason="queue_timeout"|"queue_full"}`` in ``gateway_admission_refusals_total``.
Single event loop, no locks.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque

from prometheus_client import CollectorRegistry, Gauge, Histogram

from ..errors import GatewayError
from .backend import AdmissionMetrics, Ticket, retry_header

WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                120.0)
MIN_MEASURED = 8
MAX_RETRY_S = 3600.0


class StartGate:
    """See the module docstring. ``max_running=None``: every request starts at once
    (only the queue-time metric is kept)."""

    def __init__(self, max_running: int | None, max_wait_s: float, adaptive: bool,
                 metrics: AdmissionMetrics, registry: CollectorRegistry) -> None:
        self.max_running = max_running
        self.max_wait_s = max_wait_s
        self.adaptive = adaptive
        self.metrics = metrics
        self.running = 0
        self.waiters: deque[tuple[asyncio.Future[bool], Ticket]] = deque()
        self.mean_hold = 0.0
        self.measured = 0
        self.wait_hist = Histogram("gateway_queue_wait_seconds", "Time from admission to "
                                   "the start of the engine call (requests that started)",
                                   buckets=WAIT_BUCKETS, registry=registry)
        waiting = Gauge("gateway_queue_waiting", "Requests waiting for a start slot",
                        registry=registry)
        waiting.set_function(lambda: len(self.waiters))
        rate = Gauge("gateway_service_rate", "Measured service rate, requests per second "
                     "(0 until measured)", registry=registry)
        rate.set_function(self.rate)
        metrics.retry_hint = self._pending_retry

    def rate(self) -> float:
        """Requests per second the engine finishes when the gate is full (0.0: unknown)."""
        if self.max_running is None or self.measured == 0 or self.mean_hold <= 0:
            return 0.0
        return self.max_running / self.mean_hold

    def retry_after(self, ahead: int) -> float:
        rate = self.rate()
        if rate <= 0:
            return 1.0
        return min(MAX_RETRY_S, max(1.0, math.ceil((ahead + 1) / rate)))

    def _pending_retry(self, pending: int) -> float:
        """Retry-After for a refusal at the pending bound: the requests admitted and not
        yet started (waiting, or still reading their body) at the measured rate."""
        running = self.running if self.max_running is not None else 0
        return self.retry_after(max(len(self.waiters), pending - running))

    def _refusal(self, ticket: Ticket, reason: str, text: str) -> GatewayError:
        retry = self.retry_after(len(self.waiters))
        return self.metrics.refuse(ticket.key_id, reason, GatewayError.of(
            "overloaded", f"{text}; retry after {math.ceil(retry)} s",
            headers=retry_header(retry)))

    async def enter(self, ticket: Ticket) -> None:
        """Wait for a start slot (at most ``max_queue_wait_s`` since the ticket's
        ``admitted_at``); raises 503 ``overloaded`` otherwise. On return the ticket holds a
        slot (``ticket.started``) until :meth:`leave`."""
        admitted_at = ticket.admitted_at
        if self.max_running is None or (self.running < self.max_running and not self.waiters):
            self._start(ticket, admitted_at)
            return
        left = self.max_wait_s - (time.monotonic() - admitted_at)
        if self.adaptive and self.measured >= MIN_MEASURED:
            rate = self.rate()
            if rate > 0 and (len(self.waiters) + 1) / rate > left:
                raise self._refusal(ticket, "queue_full", (
                    f"the appliance is busy: {len(self.waiters)} requests are queued and at "
                    f"the measured {rate:.2f} requests/s this one could not start within "
                    f"max_queue_wait_s = {self.max_wait_s:g} s"))
        if left <= 0:
            raise self._late(ticket)
        # True: the slot is handed over; False: the deadline passed before a slot was free.
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        entry = (future, ticket)
        self.waiters.append(entry)
        try:
            async with asyncio.timeout(left):
                granted = await future
        except TimeoutError:
            if not future.done() or future.cancelled():
                self._forget(entry)
                raise self._late(ticket) from None
            granted = future.result()  # resolved in the same instant the deadline passed
        except asyncio.CancelledError:  # client gone while waiting
            if future.done() and not future.cancelled() and future.result():
                self._hand_on()  # granted just before: pass the slot on
            else:
                self._forget(entry)
            raise
        if not granted:
            raise self._late(ticket)
        now = time.monotonic()
        if now - admitted_at > self.max_wait_s:
            self._hand_on()  # granted in time, resumed too late to start within the bound
            raise self._late(ticket)
        self._started(ticket, admitted_at, now)

    def _late(self, ticket: Ticket) -> GatewayError:
        return self._refusal(ticket, "queue_timeout", (
            f"the appliance is busy: this request could not start within "
            f"max_queue_wait_s = {self.max_wait_s:g} s"))

    def _forget(self, entry: tuple[asyncio.Future[bool], Ticket]) -> None:
        try:
            self.waiters.remove(entry)
        except ValueError:
            pass
        if not entry[0].done():
            entry[0].cancel()

    def _start(self, ticket: Ticket, admitted_at: float) -> None:
        if self.max_running is not None:
            self.running += 1
        self._started(ticket, admitted_at)

    def _started(self, ticket: Ticket, admitted_at: float, now: float | None = None) -> None:
        ticket.started = True
        ticket.start_at = now = time.monotonic() if now is None else now
        self.wait_hist.observe(now - admitted_at)

    def leave(self, ticket: Ticket, measure: bool = True) -> None:
        """Free the ticket's slot (idempotent) and hand it to the next waiter."""
        if not ticket.started:
            return
        ticket.started = False
        if self.max_running is None:
            return
        if measure:
            held = time.monotonic() - ticket.start_at
            self.mean_hold = held if self.measured == 0 else \
                self.mean_hold + (held - self.mean_hold) / 16.0
            self.measured += 1
        self._hand_on()

    def _hand_on(self) -> None:
        """Give a held slot to the first waiter still within its deadline (those past it
        are told so and answered 503 by :meth:`enter`), else free it."""
        now = time.monotonic()
        while self.waiters:
            future, waiting = self.waiters.popleft()
            if future.done():
                continue
            if now - waiting.admitted_at > self.max_wait_s:
                future.set_result(False)
                continue
            future.set_result(True)  # the slot moves to the waiter: running unchanged
            return
        self.running -= 1
