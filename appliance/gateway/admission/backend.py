"""The one interface every admission backend implements, and what they share.

A backend decides, for a principal (a named key, a plain key, a client certificate, or an
OIDC subject or group: anything that resolves to an id and a
:class:`~appliance.config.keys.KeyLimits`), in this order:

* :meth:`AdmissionBackend.admit` (before the body is read): the principal's ``concurrent``
  limit, then its ``rpm`` token bucket -> 429 ``rate_limited``; then the global bound
  ``max_pending`` on admitted, unfinished requests -> 503 ``overloaded``. Returns a
  :class:`Ticket` or the refusal.
* :meth:`AdmissionBackend.charge` (after the body passed its checks): the request's token
  budget against the daily / monthly quotas -> 429 ``quota_exceeded`` (nothing charged),
  then against the ``tpm`` bucket -> 429 ``rate_limited``; both taken together or neither.
* :meth:`AdmissionBackend.release` (when the request ends, exactly once per ticket).

A backend whose shared store cannot be reached refuses (503 ``admission_unavailable``,
fail closed) and counts ``gateway_admission_backend_errors_total{op}``; it serves again as
soon as the store answers. Implementations:
:class:`appliance.gateway.admission.local.LocalAdmission` (one event loop) and
:class:`appliance.gateway.admission.redis.RedisAdmission` (Redis, exact across processes and
hosts); :func:`appliance.gateway.admission.registry.build_admission`
picks one from ``settings.admission.backend``.
"""

from __future__ import annotations

import calendar
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from appliance.config.keys import KeyLimits

from ..errors import GatewayError


@dataclass(slots=True, eq=False)
class Ticket:
    """An admitted request; released exactly once (``released``). ``started``: it holds a
    start-gate slot (:mod:`.gate`) since ``start_at`` (monotonic s), admitted at
    ``admitted_at``; ``state`` and ``ident`` are the backend's."""

    key_id: str
    limits: KeyLimits
    state: Any = None
    ident: str = ""
    admitted_at: float = field(default_factory=time.monotonic)
    start_at: float = 0.0
    started: bool = False
    released: bool = False


class AdmissionBackend(Protocol):
    """See the module docstring. ``metrics`` holds the shared counters and gauges."""

    metrics: AdmissionMetrics

    async def start(self) -> None:
        """Open connections / background work (gateway lifespan startup)."""

    async def close(self) -> None:
        """Persist and close (gateway lifespan shutdown)."""

    async def admit(self, key_id: str, limits: KeyLimits) -> Ticket | GatewayError:
        """Admit one request of ``key_id`` under ``limits`` or return the refusal."""

    async def charge(self, ticket: Ticket, tokens: int) -> GatewayError | None:
        """Charge ``tokens`` to quotas and tpm; the refusal, or ``None`` when charged."""

    async def release(self, ticket: Ticket) -> None:
        """End an admitted request (idempotent)."""

    async def reachable(self) -> GatewayError | None:
        """``None`` when the backend can admit now, else the refusal every request would get
        (``/health/ready`` reports it, so a load balancer routes around this gateway)."""


class AdmissionMetrics:
    """Counters and gauges every backend reports (one set per gateway registry)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.refusals = Counter("gateway_admission_refusals", "Requests refused by "
                                "admission control", ["key_id", "reason"], registry=registry)
        self.pending = Gauge("gateway_admission_pending", "Chat requests admitted by this "
                             "gateway process and not finished (in flight + queued)",
                             registry=registry)
        self.key_in_flight = Gauge("gateway_key_in_flight", "Chat requests in flight by key "
                                   "(this gateway process)", ["key_id"], registry=registry)
        self.backend_errors = Counter("gateway_admission_backend_errors", "Admission store "
                                      "operations that failed (store unreachable, timed "
                                      "out): the request was refused 503", ["op"],
                                      registry=registry)
        self.backend_up = Gauge("gateway_admission_backend_up", "1 while the admission "
                                "store answered its last operation, else 0",
                                registry=registry)
        self.backend_up.set(1)
        self._children: dict[tuple[str, str], Any] = {}
        # Seconds a client refused at the pending bound should wait, given this process's
        # admitted requests: the start gate (.admission_gate) sets it to its estimate from
        # the measured service rate.
        self.retry_hint: Callable[[int], float] = lambda _pending: 1.0

    def refuse(self, key_id: str, reason: str, error: GatewayError) -> GatewayError:
        """Count a refusal (``reason``: concurrent, rpm, tpm, overloaded, quota_day,
        quota_month, queue_timeout, queue_full, unavailable) and return ``error``."""
        child = self._children.get((key_id, reason))
        if child is None:
            child = self._children[(key_id, reason)] = self.refusals.labels(key_id, reason)
        child.inc()
        return error


def retry_header(seconds: float) -> tuple[tuple[bytes, bytes], ...]:
    """``Retry-After`` of at least 1 s (whole seconds, rounded up)."""
    return ((b"retry-after", str(max(1, math.ceil(seconds))).encode()),)


def limited(message: str, retry_s: float) -> GatewayError:
    """429 ``rate_limited`` with ``Retry-After``."""
    return GatewayError.of("rate_limited", message, headers=retry_header(retry_s))


def overloaded(max_pending: int, retry_s: float = 1.0) -> GatewayError:
    """503 ``overloaded`` for the global pending bound (``Retry-After``: ``retry_s``, the
    start gate's estimate from the measured service rate, 1 s before it measured)."""
    return GatewayError.of("overloaded", f"the appliance is at its bound of {max_pending} "
                           "requests in flight; retry shortly", headers=retry_header(retry_s))


def unavailable(what: str) -> GatewayError:
    """503 ``admission_unavailable``: the shared store did not answer (fail closed)."""
    return GatewayError.of("admission_unavailable", f"the admission store is unreachable "
                           f"({what}); requests are refused until it answers again",
                           headers=retry_header(1))


def rpm_refusal(key_id: str, limits: KeyLimits, wait: float) -> GatewayError:
    return limited(f"key {key_id!r} is over its limit of {limits.rpm} requests per minute; "
                   f"retry after {math.ceil(wait)} s", wait)


def concurrent_refusal(key_id: str, limits: KeyLimits, in_flight: int) -> GatewayError:
    return limited(f"key {key_id!r} already has {in_flight} requests in flight (limit "
                   f"{limits.concurrent}); retry when one finishes", 1.0)


def tpm_refusal(key_id: str, limits: KeyLimits, tokens: int, wait: float) -> GatewayError:
    return limited(f"key {key_id!r} is over its limit of {limits.tpm} tokens per minute "
                   f"(this request: about {tokens}); retry after {math.ceil(wait)} s", wait)


@dataclass(frozen=True, slots=True)
class QuotaWindows:
    """The UTC calendar windows quotas are counted in, at one instant: ``day``
    (``YYYYMMDD``), ``month`` (``YYYYMM``) and the seconds until each ends."""

    day: str
    month: str
    day_left_s: float
    month_left_s: float

    @classmethod
    def at(cls, now: float | None = None) -> QuotaWindows:
        moment = time.time() if now is None else now
        tm = time.gmtime(moment)
        day_start = calendar.timegm((tm.tm_year, tm.tm_mon, tm.tm_mday, 0, 0, 0))
        year, month = (tm.tm_year + 1, 1) if tm.tm_mon == 12 else (tm.tm_year, tm.tm_mon + 1)
        month_end = calendar.timegm((year, month, 1, 0, 0, 0))
        return cls(f"{tm.tm_year:04d}{tm.tm_mon:02d}{tm.tm_mday:02d}",
                   f"{tm.tm_year:04d}{tm.tm_mon:02d}", day_start + 86400 - moment,
                   month_end - moment)


def quota_refusal(key_id: str, period: str, quota: int, used: int, tokens: int,
                  retry_s: float) -> GatewayError:
    """429 ``quota_exceeded`` naming the period (``day``/``month``), the quota and the use;
    ``Retry-After`` = seconds until the UTC window turns; ``reason`` = the period."""
    return GatewayError.of("quota_exceeded", f"key {key_id!r} has used {used} of its "
                           f"{quota} tokens this {period} (UTC); this request needs about "
                           f"{tokens}; the quota renews in {math.ceil(retry_s)} s",
                           reason=period, headers=retry_header(retry_s))
