"""Admission control for ``POST /v1/chat/completions``: decided before the body is read.

The local backend (:class:`LocalAdmission`, ``[admission] backend = "local"``): state per
principal id on the gateway's event loop (no locks, one process). It implements
:class:`~appliance.gateway.admission.backend.AdmissionBackend` (order of the checks and the
refusals there); the Redis backend (:mod:`.redis`) implements the same interface
for several gateway processes.

Order, for an authenticated request (``GatewayApp`` in :mod:`appliance.gateway.http.app`):

1. the key's ``concurrent`` limit -> ``429 rate_limited`` (``Retry-After: 1``);
2. the key's ``rpm`` token bucket (capacity ``rpm``, refilled ``rpm/60`` per second) ->
   ``429 rate_limited`` with ``Retry-After`` = seconds until the next token;
3. the global bound ``max_pending`` on requests in flight plus queued ->
   ``503 overloaded`` (``Retry-After: 1``).

After the body passed its checks, :func:`charge_tokens` takes the request's token budget
(body bytes / 4 + ``max_tokens``) from the key's daily / monthly quotas (``429
quota_exceeded``, :mod:`.quotas`) and its ``tpm`` bucket (``429 rate_limited``). Then the
request waits for a start slot at most ``max_queue_wait_s`` (:mod:`.gate`).
A key's ``max_tokens`` cap lowers ``max_tokens_cap`` for its requests (so a larger
``max_tokens`` is a 400 naming the field, and an absent one defaults to the cap):
:func:`settings_for`.

Every refusal is O(1) and answered without touching the engine, so an over-limit client
is told to back off in milliseconds instead of being held. Metrics
(:class:`~.backend.AdmissionMetrics`): ``gateway_admission_refusals_total
{key_id,reason}``, ``gateway_admission_pending``, ``gateway_key_in_flight{key_id}``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from appliance.config.keys import KeyLimits

from ..errors import GatewayError
from .backend import (
    AdmissionMetrics,
    Ticket,
    concurrent_refusal,
    overloaded,
    rpm_refusal,
    tpm_refusal,
)
from .quotas import QuotaLedger

if TYPE_CHECKING:
    from ..settings import GatewaySettings
    from .backend import AdmissionBackend

TICKET_KEY = "appliance.gateway.ticket"


class _Bucket:
    """Token bucket: ``capacity`` tokens, refilled at ``capacity / 60`` per second."""

    __slots__ = ("capacity", "rate", "tokens", "stamp")

    def __init__(self, capacity: int) -> None:
        self.capacity = float(capacity)
        self.rate = capacity / 60.0
        self.tokens = float(capacity)
        self.stamp = time.monotonic()

    def take(self, n: float) -> float:
        """Take ``n`` tokens (at most the capacity); 0.0 if taken, else seconds to wait."""
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        need = min(n, self.capacity)
        if self.tokens >= need:
            self.tokens -= need
            return 0.0
        return (need - self.tokens) / self.rate


@dataclass(slots=True)
class _KeyState:
    limits: KeyLimits
    in_flight: int = 0
    rpm: _Bucket | None = None
    tpm: _Bucket | None = None
    gauge: Any = None  # gateway_key_in_flight{key_id} child, read at scrape time

    def current(self) -> int:
        """Requests of this key in flight (the gauge's value when scraped)."""
        return self.in_flight

    def configure(self, limits: KeyLimits) -> None:
        self.limits = limits
        self.rpm = _Bucket(limits.rpm) if limits.rpm else None
        self.tpm = _Bucket(limits.tpm) if limits.tpm else None


class LocalAdmission:
    """Global bound plus per-key limits and quotas on one event loop (module docstring)."""

    def __init__(self, max_pending: int, registry: CollectorRegistry,
                 quota_state_file: Path | None = None) -> None:
        self.max_pending = max_pending
        self.pending = 0
        self._keys: dict[str, _KeyState] = {}
        self.metrics = AdmissionMetrics(registry)
        # Gauges are read when scraped, not set per request (a lock each on the hot path).
        self.metrics.pending.set_function(self.current)
        self.quotas = QuotaLedger(quota_state_file)

    def current(self) -> int:
        """Chat requests admitted and not finished (the pending gauge's value)."""
        return self.pending

    async def start(self) -> None:
        return None

    async def reachable(self) -> GatewayError | None:
        return None  # in this process: always

    async def close(self) -> None:
        self.quotas.close()

    def _state(self, key_id: str, limits: KeyLimits) -> _KeyState:
        state = self._keys.get(key_id)
        if state is None:
            state = self._keys[key_id] = _KeyState(limits)
            state.configure(limits)
        elif state.limits != limits:  # limits changed by a keys-file reload
            state.configure(limits)
        return state

    async def admit(self, key_id: str, limits: KeyLimits) -> Ticket | GatewayError:
        """Admit one chat request of ``key_id`` or return the refusal."""
        return self.admit_now(key_id, limits)

    def admit_now(self, key_id: str, limits: KeyLimits) -> Ticket | GatewayError:
        """:meth:`admit` without the coroutine (the local decision never waits)."""
        state = self._state(key_id, limits)
        limits = state.limits
        refuse = self.metrics.refuse
        if limits.concurrent is not None and state.in_flight >= limits.concurrent:
            return refuse(key_id, "concurrent",
                          concurrent_refusal(key_id, limits, state.in_flight))
        if state.rpm is not None:
            wait = state.rpm.take(1)
            if wait:
                return refuse(key_id, "rpm", rpm_refusal(key_id, limits, wait))
        if self.pending >= self.max_pending:
            if state.rpm is not None:
                state.rpm.tokens += 1  # not the key's fault: give the token back
            return refuse(key_id, "overloaded",
                          overloaded(self.max_pending, self.metrics.retry_hint(self.pending)))
        state.in_flight += 1
        self.pending += 1
        if state.gauge is None:
            state.gauge = self.metrics.key_in_flight.labels(key_id)
            state.gauge.set_function(state.current)
        return Ticket(key_id, limits, state)

    async def release(self, ticket: Ticket) -> None:
        self.release_now(ticket)

    def release_now(self, ticket: Ticket) -> None:
        if ticket.released:
            return
        ticket.released = True
        ticket.state.in_flight -= 1
        self.pending -= 1

    async def charge(self, ticket: Ticket, tokens: int) -> GatewayError | None:
        """Quotas, then the tpm bucket; both charged or neither (module docstring)."""
        state: _KeyState = ticket.state
        limits = state.limits
        error = self.quotas.check_and_add(ticket.key_id, limits, tokens, commit=False)
        if error is not None:
            return self.metrics.refuse(ticket.key_id, f"quota_{error.reason}", error)
        bucket = state.tpm
        if bucket is not None:
            wait = bucket.take(tokens)
            if wait:
                return self.metrics.refuse(ticket.key_id, "tpm",
                                           tpm_refusal(ticket.key_id, limits, tokens, wait))
        if limits.tokens_per_day is not None or limits.tokens_per_month is not None:
            self.quotas.add(ticket.key_id, tokens)
        return None


def settings_for_limits(cache: dict[int, Any], ticket: Ticket,
                        base: GatewaySettings) -> GatewaySettings:
    """``base`` with ``max_tokens_cap`` lowered to the ticket's cap (cached per cap)."""
    cap = ticket.limits.max_tokens
    if cap is None or cap >= base.max_tokens_cap:
        return base
    cached = cache.get(cap)
    if cached is None or cached[0] is not base:
        cached = (base, base.model_copy(update={"max_tokens_cap": cap}))
        cache[cap] = cached
    result: GatewaySettings = cached[1]
    return result


def request_tokens(raw: bytes, forwarded: bytes) -> int:
    """Token budget of a checked request: body bytes / 4 + its ``max_tokens``."""
    try:
        body = json.loads(forwarded)
        limit = body.get("max_tokens") or body.get("max_completion_tokens") or 0
    except (ValueError, AttributeError):
        limit = 0
    return len(raw) // 4 + (limit if isinstance(limit, int) else 0)


_CAPS: dict[int, Any] = {}  # cap -> (base settings, settings with that cap)


def settings_for(scope: Any, base: GatewaySettings, admission: AdmissionBackend
                 ) -> GatewaySettings:
    """The settings a request's checks use (its key's ``max_tokens`` cap applied)."""
    ticket = scope.get(TICKET_KEY)
    return base if ticket is None else settings_for_limits(_CAPS, ticket, base)


def _charged(limits: KeyLimits) -> bool:
    return limits.tpm is not None or limits.tokens_per_day is not None \
        or limits.tokens_per_month is not None


async def charge_tokens(scope: Any, raw: bytes, forwarded: bytes,
                        admission: AdmissionBackend) -> None:
    """Raise the 429 refusal when the request's tokens exceed its key's quotas or tpm."""
    ticket = scope.get(TICKET_KEY)
    if ticket is None or not _charged(ticket.limits):
        return
    error = await admission.charge(ticket, request_tokens(raw, forwarded))
    if error is not None:
        raise error
