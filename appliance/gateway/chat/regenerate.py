"""Bounded regeneration of engine answers the gateway's validation refused.

The grammar (xgrammar) enforces a schema's structure, not everything the schema says:
``format: date`` is compiled to ``YYYY-MM-DD`` digits, so ``2018-02-31`` passes the grammar
and fails the gateway's re-validation (:mod:`.response_checks`: 502
``invalid_structured_output``; a tool call's arguments likewise 502 ``invalid_tool_call``).
Public case: the openai SDK's ``parse()`` with a pydantic ``date`` field answered 502. The
refusal is right; asking the engine again usually gives a valid answer, because sampling
rarely repeats the same impossible value.

With ``[gateway] regenerate_invalid = N`` (0..:data:`MAX_REGENERATIONS`, default 0: off), a
non-streaming answer refused with one of :data:`REFUSALS` is asked again, the same forwarded
body, at most ``N`` times; every answer is checked as the first was, the first valid one is
returned (200) and, if none is, the last refusal is answered as without regeneration.

Bounds (each a reason a regeneration is not started, counted as its ``outcome``):

* time: the request's budget is ``request_timeout_s`` from its receipt
  (``RequestInfo.started``). A regeneration starts only while the time left is at least what
  the previous engine call took (``no_time``), and its engine call is cut at that deadline.
* admission: a regeneration is part of the admitted request: it keeps the request's
  concurrency slot and start-gate slot (no new ``rpm`` token, no second place in
  ``max_pending``), and its token budget (forwarded body bytes / 4 + ``max_tokens``) is
  charged again to the caller's ``tpm`` and daily / monthly quotas
  (:func:`..admission.local.charge_tokens`); a refused charge stops it (``quota``).
* sampling: with ``temperature`` 0 or a ``seed`` the engine would write the same answer
  again, so nothing is asked (``deterministic``).

Streams are never regenerated: their answer is validated as it is relayed and the refusal is
the stream's last event, after bytes the client already holds (``docs/gateway.md``).

Reported: response header :data:`HEADER` (regenerations sent to the engine; present when the
first answer was refused and regeneration is on), the audit record's ``regenerations``, and
``gateway_regenerations_total{model,outcome}`` (:data:`OUTCOMES`): per regeneration sent,
``valid`` / ``invalid`` / ``failed`` (no usable engine answer: transport error, timeout,
non-200); per request that wanted one and could not start it, ``no_time`` / ``quota`` /
``deterministic``. Tool calls of discarded answers count as invalid
(``gateway_tool_calls_total``, the audit log), as the engine did return them; token counts
and engine timings (audit, GenAI metrics) are the returned answer's.
"""

from __future__ import annotations

import json
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry, Counter

from ..errors import GatewayError
from ..models.engine_client import read_limited
from ..models.table import Upstream
from ..telemetry.metrics import RequestInfo
from .request_checks import ChatRequest
from .response_checks import Checked, check_completion, count_calls

LOG = logging.getLogger("appliance.gateway")
MAX_REGENERATIONS = 3  # the policy key's bound (appliance.config.gateway)
HEADER = b"x-appliance-regenerations"
REFUSALS = frozenset({"invalid_structured_output", "invalid_tool_call"})
OUTCOMES = ("valid", "invalid", "failed", "no_time", "quota", "deterministic")
TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)


class RegenerationMetrics:
    """``gateway_regenerations_total{model,outcome}`` in one registry (module docstring)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.counter = Counter("gateway_regenerations", "Regenerations of engine answers "
                               "refused by validation, by model and outcome",
                               ["model", "outcome"], registry=registry)

    def count(self, model: str, outcome: str) -> None:
        self.counter.labels(model, outcome).inc()


_METRICS: weakref.WeakKeyDictionary[CollectorRegistry, RegenerationMetrics] = \
    weakref.WeakKeyDictionary()


def metrics_for(registry: CollectorRegistry) -> RegenerationMetrics:
    """The one :class:`RegenerationMetrics` of ``registry`` (the chat and Responses handlers
    share the app's registry)."""
    metrics = _METRICS.get(registry)
    if metrics is None:
        metrics = _METRICS[registry] = RegenerationMetrics(registry)
    return metrics


def deterministic(body: bytes) -> bool:
    """True when the forwarded request samples greedily (``temperature`` 0) or with a
    ``seed``: the engine would repeat its answer."""
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        return False
    if not isinstance(obj, dict):
        return False
    temperature = obj.get("temperature")
    return obj.get("seed") is not None or (
        isinstance(temperature, int | float) and not isinstance(temperature, bool)
        and temperature == 0)


def with_count(error: GatewayError, count: int) -> GatewayError:
    """``error`` with the :data:`HEADER` ``count`` added to its headers."""
    return GatewayError(error.status, error.code, error.message, param=error.param,
                        reason=error.reason,
                        headers=(*error.headers, (HEADER, str(count).encode())))


def record_refusal(info: RequestInfo, raw: bytes, error: GatewayError) -> None:
    """Count a refused answer's tool calls as invalid in ``info`` (added: the calls of
    every refused answer of the request count)."""
    if error.code == "invalid_tool_call":
        info.tool_calls_invalid += count_calls(raw) or 1
        info.tool_call_reason = error.reason


@dataclass(slots=True)
class Result:
    """What :meth:`Regenerator.run` found: the first valid answer (``checked``) or ``None``;
    ``error``: the last refusal; ``sent``: regenerations sent."""

    checked: Checked | None
    error: GatewayError
    sent: int


class Regenerator:
    """The policy and its counter for one gateway app (see the module docstring).

    ``tries``: ``[gateway] regenerate_invalid``; ``timeout_s``: ``request_timeout_s``;
    ``max_response_bytes`` / ``max_args``: the answer bounds the first answer had.
    """

    def __init__(self, tries: int, timeout_s: float, max_response_bytes: int, max_args: int,
                 registry: CollectorRegistry) -> None:
        if not 0 <= tries <= MAX_REGENERATIONS:
            raise ValueError(f"regenerate_invalid must be 0..{MAX_REGENERATIONS}")
        self.tries = tries
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
        self.max_args = max_args
        self.metrics = metrics_for(registry) if tries else None

    def wanted(self, error: GatewayError, req: ChatRequest) -> bool:
        """True when ``error`` on a non-streaming answer is one to regenerate."""
        return self.tries > 0 and not req.stream and error.code in REFUSALS

    async def run(self, first: GatewayError, req: ChatRequest, info: RequestInfo,
                  upstream: Upstream, headers: dict[str, str],
                  charge: Callable[[], Awaitable[None]]) -> Result:
        """Ask ``upstream`` again (at most ``tries`` times, module docstring) after the
        refusal ``first``. ``charge`` raises the caller's 429 when its tokens are spent.
        Never raises :class:`GatewayError`; a client disconnect cancels it as any await."""
        metrics = self.metrics
        if metrics is None:  # regeneration is off: wanted() was False
            return Result(None, first, 0)
        model = req.model or info.model or ""
        error, sent = first, 0
        if deterministic(req.body):
            metrics.count(model, "deterministic")
            return Result(None, error, 0)
        deadline = info.started + self.timeout_s
        took = time.perf_counter() - (info.engine_started or info.started)
        while sent < self.tries:
            left = deadline - time.perf_counter()
            if left < took or left <= 0:
                metrics.count(model, "no_time")
                break
            try:
                await charge()
            except GatewayError as refusal:
                LOG.info("request_id=%s regeneration not charged: %s", info.request_id,
                         refusal.code)
                metrics.count(model, "quota")
                break
            sent += 1
            started = time.perf_counter()
            raw = await self._ask(upstream, req.body, headers, left, info)
            took = time.perf_counter() - started
            if raw is None:
                metrics.count(model, "failed")
                break
            try:
                checked = check_completion(raw, req, self.max_args)
            except GatewayError as exc:
                if exc.code not in REFUSALS:  # not an answer at all: stop asking
                    metrics.count(model, "failed")
                    break
                record_refusal(info, raw, exc)
                metrics.count(model, "invalid")
                LOG.info("request_id=%s regeneration %d refused: %s (%s)", info.request_id,
                         sent, exc.code, exc.message)
                error = exc
                continue
            metrics.count(model, "valid")
            info.engine_started, info.first_token_at = started, time.perf_counter()
            return Result(checked, error, sent)
        return Result(None, error, sent)

    async def _ask(self, upstream: Upstream, body: bytes, headers: dict[str, str],
                   left: float, info: RequestInfo) -> bytes | None:
        """The engine's 200 body for ``body`` within ``left`` seconds, or ``None``."""
        session = upstream.session
        timeout = aiohttp.ClientTimeout(total=left, connect=session.timeout.connect,
                                        sock_read=session.timeout.sock_read)
        resp: Any = None
        released = False
        try:
            resp = await session.post(upstream.url, data=body, headers=headers,
                                      timeout=timeout)
            if resp.status != 200:
                LOG.info("request_id=%s regeneration: engine answered %d", info.request_id,
                         resp.status)
                return None
            raw: bytes = await read_limited(resp, self.max_response_bytes)
            resp.release()
            released = True
            return raw
        except (*TRANSPORT_ERRORS, GatewayError) as exc:
            LOG.info("request_id=%s regeneration: %s", info.request_id, type(exc).__name__)
            return None
        finally:
            if resp is not None and not released:
                resp.close()
