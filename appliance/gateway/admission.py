"""Admission control for ``POST /v1/chat/completions``: decided before the body is read.

Order, for an authenticated request (``GatewayApp.admit`` in :mod:`appliance.gateway.app`):

1. the key's ``concurrent`` limit -> ``429 rate_limited`` (``Retry-After: 1``);
2. the key's ``rpm`` token bucket (capacity ``rpm``, refilled ``rpm/60`` per second) ->
   ``429 rate_limited`` with ``Retry-After`` = seconds until the next token;
3. the global bound ``max_pending`` on requests in flight plus queued in the engine ->
   ``503 overloaded`` (``Retry-After: 1``).

After the body passed its checks, :func:`charge_tokens` takes the request's token budget
(body bytes / 4 + ``max_tokens``) from the key's ``tpm`` bucket -> ``429 rate_limited``.
A key's ``max_tokens`` cap lowers ``max_tokens_cap`` for its requests (so a larger
``max_tokens`` is a 400 naming the field, and an absent one defaults to the cap):
:func:`settings_for`.

Every refusal is O(1) and answered without touching the engine, so an over-limit client
is told to back off in milliseconds instead of being held. State is per key id and lives
on the gateway's event loop (no locks). Metrics: ``gateway_admission_refusals_total
{key_id,reason}``, ``gateway_admission_pending``, ``gateway_key_in_flight{key_id}``.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from appliance.config.keys import KeyLimits

from .errors import GatewayError
from .keystore import KeyEntry

if TYPE_CHECKING:
    from .settings import GatewaySettings

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


@dataclass(slots=True)
class Ticket:
    """An admitted request; released exactly once by the middleware."""

    key_id: str
    state: _KeyState
    released: bool = field(default=False)


def _limited(message: str, retry_s: float) -> GatewayError:
    retry = str(max(1, math.ceil(retry_s))).encode()
    return GatewayError.of("rate_limited", message, headers=((b"retry-after", retry),))


class Admission:
    """Global bound plus per-key limits (see the module docstring)."""

    def __init__(self, max_pending: int, registry: CollectorRegistry) -> None:
        self.max_pending = max_pending
        self.pending = 0
        self._keys: dict[str, _KeyState] = {}
        self._settings: dict[tuple[str, int], Any] = {}
        self._refusal_children: dict[tuple[str, str], Any] = {}
        self.refusals = Counter("gateway_admission_refusals", "Requests refused by "
                                "admission control", ["key_id", "reason"], registry=registry)
        self.pending_gauge = Gauge("gateway_admission_pending", "Chat requests admitted and "
                                   "not finished (in flight + queued)", registry=registry)
        # Gauges are read when scraped, not set per request (a lock each on the hot path).
        self.pending_gauge.set_function(self.current)
        self.key_in_flight = Gauge("gateway_key_in_flight", "Chat requests in flight by key",
                                   ["key_id"], registry=registry)

    def current(self) -> int:
        """Chat requests admitted and not finished (the pending gauge's value)."""
        return self.pending

    def _state(self, entry: KeyEntry) -> _KeyState:
        state = self._keys.get(entry.id)
        if state is None:
            state = self._keys[entry.id] = _KeyState(entry.limits)
            state.configure(entry.limits)
        elif state.limits != entry.limits:  # limits changed by a keys-file reload
            state.configure(entry.limits)
        return state

    def _refuse(self, key_id: str, reason: str, error: GatewayError) -> GatewayError:
        child = self._refusal_children.get((key_id, reason))
        if child is None:
            child = self._refusal_children[(key_id, reason)] = self.refusals.labels(
                key_id, reason)
        child.inc()
        return error

    def admit(self, entry: KeyEntry) -> Ticket | GatewayError:
        """Admit one chat request of ``entry`` or return the refusal."""
        state = self._state(entry)
        limits = state.limits
        if limits.concurrent is not None and state.in_flight >= limits.concurrent:
            return self._refuse(entry.id, "concurrent", _limited(
                f"key {entry.id!r} already has {state.in_flight} requests in flight (limit "
                f"{limits.concurrent}); retry when one finishes", 1.0))
        if state.rpm is not None:
            wait = state.rpm.take(1)
            if wait:
                return self._refuse(entry.id, "rpm", _limited(
                    f"key {entry.id!r} is over its limit of {limits.rpm} requests per "
                    f"minute; retry after {math.ceil(wait)} s", wait))
        if self.pending >= self.max_pending:
            if state.rpm is not None:
                state.rpm.tokens += 1  # not the key's fault: give the token back
            return self._refuse(entry.id, "overloaded", GatewayError.of(
                "overloaded", f"the appliance is at its bound of {self.max_pending} "
                "requests in flight; retry shortly", headers=((b"retry-after", b"1"),)))
        state.in_flight += 1
        self.pending += 1
        if state.gauge is None:
            state.gauge = self.key_in_flight.labels(entry.id)
            state.gauge.set_function(state.current)
        return Ticket(entry.id, state)

    def release(self, ticket: Ticket) -> None:
        if ticket.released:
            return
        ticket.released = True
        ticket.state.in_flight -= 1
        self.pending -= 1

    def settings_for(self, ticket: Ticket, base: GatewaySettings) -> GatewaySettings:
        """``base`` with ``max_tokens_cap`` lowered to the key's cap (cached per cap)."""
        cap = ticket.state.limits.max_tokens
        if cap is None or cap >= base.max_tokens_cap:
            return base
        cached = self._settings.get((ticket.key_id, cap))
        if cached is None or cached[0] is not base:
            cached = (base, base.model_copy(update={"max_tokens_cap": cap}))
            self._settings[(ticket.key_id, cap)] = cached
        result: GatewaySettings = cached[1]
        return result

    def charge(self, ticket: Ticket, tokens: int) -> GatewayError | None:
        """Take ``tokens`` from the key's tpm bucket; the 429 refusal if it is empty."""
        bucket = ticket.state.tpm
        if bucket is None:
            return None
        wait = bucket.take(tokens)
        if not wait:
            return None
        return self._refuse(ticket.key_id, "tpm", _limited(
            f"key {ticket.key_id!r} is over its limit of {ticket.state.limits.tpm} tokens "
            f"per minute (this request: about {tokens}); retry after {math.ceil(wait)} s",
            wait))


def request_tokens(raw: bytes, forwarded: bytes) -> int:
    """Token budget of a checked request: body bytes / 4 + its ``max_tokens``."""
    try:
        body = json.loads(forwarded)
        limit = body.get("max_tokens") or body.get("max_completion_tokens") or 0
    except (ValueError, AttributeError):
        limit = 0
    return len(raw) // 4 + (limit if isinstance(limit, int) else 0)


def settings_for(scope: Any, base: GatewaySettings, admission: Admission) -> GatewaySettings:
    """The settings a request's checks use (its key's ``max_tokens`` cap applied)."""
    ticket = scope.get(TICKET_KEY)
    return base if ticket is None else admission.settings_for(ticket, base)


def charge_tokens(scope: Any, raw: bytes, forwarded: bytes, admission: Admission) -> None:
    """Raise the 429 refusal when the request's tokens exceed its key's tpm budget."""
    ticket = scope.get(TICKET_KEY)
    if ticket is None or ticket.state.tpm is None:
        return
    error = admission.charge(ticket, request_tokens(raw, forwarded))
    if error is not None:
        raise error
