"""Admission held in Redis: per-key limits, the global pending bound and quotas shared by
every gateway process (``[admission] backend = "redis"``), exact across processes.

Implements :class:`~appliance.gateway.admission.backend.AdmissionBackend` with two Lua
scripts run by Redis atomically (redis-py, ``EVALSHA`` reloaded after a Redis restart), so
no two processes can both take the last slot or token. Redis's own clock (``TIME``) is the
only clock the limits read. Keys (``P`` = ``redis.prefix``)::

    P:adm:pending              ZSET  ticket -> lease expiry (ms): the global pending bound
    P:adm:inflight:<key>       ZSET  ticket -> lease expiry (ms): the key's concurrent limit
    P:adm:rpm:<key>            HASH  t (tokens), s (ms stamp): the rpm bucket (idle 2 min: gone)
    P:adm:tpm:<key>            HASH  the tpm bucket
    P:adm:quota:<key>:d:<YYYYMMDD>   counter of tokens this UTC day (expires a day after)
    P:adm:quota:<key>:m:<YYYYMM>     counter of tokens this UTC month

A slot (pending, in flight) is a lease: each process renews the leases of its live tickets
every ``lease_s / 3`` seconds, so a process that dies frees its slots within ``lease_s``
instead of leaking them; a released ticket is removed at once.

Fail closed: a Redis error, a refused connection or a round trip longer than
``redis.timeout_s`` refuses the request 503 ``admission_unavailable`` and counts
``gateway_admission_backend_errors_total{op}`` (``gateway_admission_backend_up`` 0); the
connection pool reconnects by itself, so requests are served again as soon as Redis
answers. A failed release is left to the lease. At most ``POOL`` (64) store calls run at
once per process; a request that cannot get its turn within ``timeout_s`` (this process
is congested, the store is fine) is refused ``503 overloaded`` instead. Password and TLS
(``rediss://``, CA file, client certificate) come from
:class:`~appliance.gateway.admission.settings.RedisSettings`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from itertools import count
from typing import Any

import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry
from redis.exceptions import RedisError

from appliance.config.keys import KeyLimits

from ..errors import GatewayError
from .backend import (
    AdmissionMetrics,
    QuotaWindows,
    Ticket,
    concurrent_refusal,
    overloaded,
    quota_refusal,
    retry_header,
    rpm_refusal,
    tpm_refusal,
    unavailable,
)
from .settings import RedisSettings

LOG = logging.getLogger("appliance.gateway")

# Shared Lua helpers: now in ms from Redis's clock; a token bucket refilled per minute.
_PRELUDE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function bucket(key, cap)
  local b = redis.call('HMGET', key, 't', 's')
  local tokens = cap
  if b[1] then
    tokens = math.min(cap, tonumber(b[1]) + math.max(0, now - tonumber(b[2])) * cap / 60000)
  end
  return tokens
end
"""

# KEYS: pending, inflight, rpm. ARGV: member, lease_ms, max_pending, concurrent, rpm (0: none)
# -> {0} admitted | {1, in_flight} concurrent | {2, wait_ms} rpm | {3, pending} overloaded
ADMIT = _PRELUDE + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local concurrent = tonumber(ARGV[4])
if concurrent > 0 then
  local n = redis.call('ZCARD', KEYS[2])
  if n >= concurrent then return {1, n} end
end
local rpm = tonumber(ARGV[5])
local tokens = 0
if rpm > 0 then
  tokens = bucket(KEYS[3], rpm)
  if tokens < 1 then return {2, math.ceil((1 - tokens) * 60000 / rpm)} end
end
local pending = redis.call('ZCARD', KEYS[1])
if pending >= tonumber(ARGV[3]) then return {3, pending} end
if rpm > 0 then
  redis.call('HSET', KEYS[3], 't', tostring(tokens - 1), 's', now)
  redis.call('PEXPIRE', KEYS[3], 120000)
end
local expiry = now + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], expiry, ARGV[1])
redis.call('ZADD', KEYS[2], expiry, ARGV[1])
return {0}
"""

# KEYS: tpm, day, month. ARGV: tokens, tpm, per_day, per_month (0: none), day_ttl_ms,
# month_ttl_ms -> {0} charged | {2, wait_ms} tpm | {4, used} day | {5, used} month
CHARGE = _PRELUDE + """
local n = tonumber(ARGV[1])
local per_day = tonumber(ARGV[3])
local per_month = tonumber(ARGV[4])
if per_day > 0 then
  local used = tonumber(redis.call('GET', KEYS[2]) or '0')
  if used + n > per_day then return {4, used} end
end
if per_month > 0 then
  local used = tonumber(redis.call('GET', KEYS[3]) or '0')
  if used + n > per_month then return {5, used} end
end
local tpm = tonumber(ARGV[2])
if tpm > 0 then
  local tokens = bucket(KEYS[1], tpm)
  local need = math.min(n, tpm)
  if tokens < need then return {2, math.ceil((need - tokens) * 60000 / tpm)} end
  redis.call('HSET', KEYS[1], 't', tostring(tokens - need), 's', now)
  redis.call('PEXPIRE', KEYS[1], 120000)
end
if per_day > 0 then
  redis.call('INCRBY', KEYS[2], n)
  redis.call('PEXPIRE', KEYS[2], ARGV[5])
end
if per_month > 0 then
  redis.call('INCRBY', KEYS[3], n)
  redis.call('PEXPIRE', KEYS[3], ARGV[6])
end
return {0}
"""

# KEYS: pending, inflight... ARGV: expiry_ms offset, members... ; renews live leases only
RENEW = """
local t = redis.call('TIME')
local expiry = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], 'XX', expiry, ARGV[i])
  redis.call('ZADD', KEYS[i], 'XX', expiry, ARGV[i])
end
return 1
"""

# KEYS: pending, inflight. ARGV: member.
RELEASE = """
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
"""

STORE_ERRORS = (RedisError, OSError, asyncio.TimeoutError)
POOL = 64  # connections to Redis per gateway process


class _Busy(Exception):
    """This process waited too long for a turn at the store (its own congestion)."""


def connect(settings: RedisSettings) -> aioredis.Redis:
    """A client with a bounded connection pool for ``settings`` (no I/O yet)."""
    options: dict[str, Any] = {
        "socket_timeout": settings.timeout_s, "socket_connect_timeout": settings.timeout_s,
        "max_connections": POOL, "timeout": settings.timeout_s,
        "username": settings.username,
        "password": settings.password.get_secret_value() if settings.password else None,
        "connection_class": aioredis.SSLConnection if settings.tls else aioredis.Connection,
    }
    if settings.tls:
        options.update(ssl_cert_reqs="required", ssl_check_hostname=True,
                       ssl_ca_certs=str(settings.ca_file) if settings.ca_file else None,
                       ssl_certfile=str(settings.cert_file) if settings.cert_file else None,
                       ssl_keyfile=str(settings.key_file) if settings.key_file else None)
    pool = aioredis.BlockingConnectionPool.from_url(settings.url, **options)
    return aioredis.Redis(connection_pool=pool)


class RedisAdmission:
    """See the module docstring."""

    def __init__(self, max_pending: int, registry: CollectorRegistry,
                 settings: RedisSettings) -> None:
        self.max_pending = max_pending
        self.settings = settings
        self.metrics = AdmissionMetrics(registry)
        self.metrics.pending.set_function(lambda: len(self.live))
        self.client = connect(settings)
        self._admit = self.client.register_script(ADMIT)
        self._charge = self.client.register_script(CHARGE)
        self._renew = self.client.register_script(RENEW)
        self._release = self.client.register_script(RELEASE)
        self.live: dict[str, Ticket] = {}
        self._per_key: dict[str, int] = {}
        self._gauges: set[str] = set()
        self._base = f"{settings.prefix}:adm"
        self._process = f"{os.getpid()}-{secrets.token_hex(4)}"
        self._seq = count()
        self._lease_ms = int(settings.lease_s * 1000)
        self._renewer: asyncio.Task[None] | None = None
        self._up = True
        self._turns = asyncio.Semaphore(POOL)

    def _key(self, *parts: str) -> str:
        return ":".join((self._base, *parts))

    def _failed(self, op: str, exc: BaseException) -> GatewayError:
        self.metrics.backend_errors.labels(op).inc()
        if self._up:  # log the transition only
            self._up = False
            LOG.error("admission store unreachable (%s: %s): refusing requests 503",
                      type(exc).__name__, exc)
        self.metrics.backend_up.set(0)
        return unavailable(type(exc).__name__)

    def _ok(self) -> None:
        if not self._up:
            self._up = True
            LOG.warning("admission store answers again: serving")
            self.metrics.backend_up.set(1)

    async def _run(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        """One script call: at most ``POOL`` at once from this process (waiting for a turn
        longer than ``timeout_s`` is this process's congestion: :class:`_Busy`), each round
        trip at most ``timeout_s`` (longer: the store is unreachable, ``TimeoutError``)."""
        try:
            async with asyncio.timeout(self.settings.timeout_s):
                await self._turns.acquire()
        except TimeoutError:
            raise _Busy from None
        try:
            async with asyncio.timeout(self.settings.timeout_s):
                return await script(keys=keys, args=args)
        finally:
            self._turns.release()

    def _busy(self, key_id: str) -> GatewayError:
        return self.metrics.refuse(key_id, "overloaded", GatewayError.of(
            "overloaded", "the gateway is too busy to reach its admission store in "
            "time; retry shortly", headers=retry_header(1)))

    async def start(self) -> None:
        """Start renewing leases; a Redis that is down now is not fatal (requests are
        refused until it answers)."""
        try:
            async with asyncio.timeout(self.settings.timeout_s * 2):
                await self.client.ping()
        except STORE_ERRORS as exc:
            self._failed("ping", exc)
        self._renewer = asyncio.get_running_loop().create_task(self._renew_loop())

    async def reachable(self) -> GatewayError | None:
        """PING within ``timeout_s``: ``None``, or 503 ``admission_unavailable``."""
        try:
            async with asyncio.timeout(self.settings.timeout_s):
                await self.client.ping()
        except STORE_ERRORS as exc:
            return self._failed("ping", exc)
        self._ok()
        return None

    async def close(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
        for ticket in list(self.live.values()):
            await self.release(ticket)
        try:
            await self.client.aclose()
        except STORE_ERRORS:
            pass

    def _key_count(self, key_id: str) -> int:
        return self._per_key.get(key_id, 0)

    async def admit(self, key_id: str, limits: KeyLimits) -> Ticket | GatewayError:
        member = f"{self._process}:{next(self._seq)}"
        try:
            result = await self._run(self._admit, [
                self._key("pending"), self._key("inflight", key_id), self._key("rpm", key_id)],
                [member, self._lease_ms, self.max_pending, limits.concurrent or 0,
                 limits.rpm or 0])
        except _Busy:
            return self._busy(key_id)
        except STORE_ERRORS as exc:
            return self.metrics.refuse(key_id, "unavailable", self._failed("admit", exc))
        self._ok()
        kind = int(result[0])
        if kind == 1:
            return self.metrics.refuse(key_id, "concurrent",
                                       concurrent_refusal(key_id, limits, int(result[1])))
        if kind == 2:
            return self.metrics.refuse(key_id, "rpm",
                                       rpm_refusal(key_id, limits, int(result[1]) / 1000))
        if kind == 3:
            return self.metrics.refuse(key_id, "overloaded", overloaded(
                self.max_pending, self.metrics.retry_hint(len(self.live))))
        ticket = Ticket(key_id, limits, ident=member)
        self.live[member] = ticket
        self._per_key[key_id] = self._per_key.get(key_id, 0) + 1
        if key_id not in self._gauges:
            self._gauges.add(key_id)
            self.metrics.key_in_flight.labels(key_id).set_function(
                lambda: self._key_count(key_id))
        return ticket

    async def charge(self, ticket: Ticket, tokens: int) -> GatewayError | None:
        limits, key_id = ticket.limits, ticket.key_id
        windows = QuotaWindows.at()
        try:
            result = await self._run(self._charge, [
                self._key("tpm", key_id), self._key("quota", key_id, "d", windows.day),
                self._key("quota", key_id, "m", windows.month)],
                [tokens, limits.tpm or 0, limits.tokens_per_day or 0,
                 limits.tokens_per_month or 0, int((windows.day_left_s + 86400) * 1000),
                 int((windows.month_left_s + 86400) * 1000)])
        except _Busy:
            return self._busy(key_id)
        except STORE_ERRORS as exc:
            return self.metrics.refuse(key_id, "unavailable", self._failed("charge", exc))
        self._ok()
        kind = int(result[0])
        if kind == 2:
            return self.metrics.refuse(key_id, "tpm", tpm_refusal(
                key_id, limits, tokens, int(result[1]) / 1000))
        if kind == 4 and limits.tokens_per_day is not None:
            return self.metrics.refuse(key_id, "quota_day", quota_refusal(
                key_id, "day", limits.tokens_per_day, int(result[1]), tokens,
                windows.day_left_s))
        if kind == 5 and limits.tokens_per_month is not None:
            return self.metrics.refuse(key_id, "quota_month", quota_refusal(
                key_id, "month", limits.tokens_per_month, int(result[1]), tokens,
                windows.month_left_s))
        return None

    async def release(self, ticket: Ticket) -> None:
        if ticket.released:
            return
        ticket.released = True
        self.live.pop(ticket.ident, None)
        left = self._per_key.get(ticket.key_id, 1) - 1
        self._per_key[ticket.key_id] = left
        try:
            await self._run(self._release, [self._key("pending"),
                                            self._key("inflight", ticket.key_id)],
                            [ticket.ident])
        except _Busy:  # the lease frees it within lease_s
            pass
        except STORE_ERRORS as exc:  # the lease frees it within lease_s
            self._failed("release", exc)

    async def _renew_loop(self) -> None:
        period = self.settings.lease_s / 3
        while True:
            await asyncio.sleep(period)
            tickets = list(self.live.values())
            for start in range(0, len(tickets), 500):
                batch = tickets[start:start + 500]
                try:
                    await self._run(self._renew, [
                        self._key("pending"),
                        *(self._key("inflight", t.key_id) for t in batch)],
                        [self._lease_ms, *(t.ident for t in batch)])
                except _Busy:
                    continue
                except STORE_ERRORS as exc:
                    self._failed("renew", exc)
                    break
