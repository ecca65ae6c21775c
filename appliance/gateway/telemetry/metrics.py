"""Per-request bookkeeping: Prometheus metrics and the JSON-lines audit log.

Metrics live in a registry of their own per app (served on ``GET /metrics``, which needs an
API key): ``gateway_requests_total{route,status}``,
``gateway_request_duration_seconds{route}`` (histogram), ``gateway_tool_calls_total{result}``
and ``gateway_requests_in_flight``; the GenAI series (token usage, duration, time to first
token, time per output token, tool-call outcomes) are :mod:`.genai_metrics`'.

The audit log (when configured) gets one JSON object per request and line, chained and
checkpointed by :class:`appliance.audit.AuditChain` (``seq`` and ``prev`` first)::

    {"seq": 41, "prev": "<sha256 of line 40>", "ts": 1764412345.123, "request_id": "...",
     "key_id": "1a2b3c4d", "method": "POST", "route": "/v1/chat/completions",
     "status": 200, "latency_ms": 51.2, "model": "appliance-model", "stream": false,
     "tools": ["get_weather"], "tool_calls_valid": 1, "tool_calls_invalid": 0,
     "request_bytes": 312, "response_bytes": 655, "input_tokens": 21, "output_tokens": 17,
     "error": null, "upstream_exception": null, "source_address": "10.1.2.3",
     "regenerations": 0}

(``"messages"`` too, only with ``[audit] include_prompts = true``). ``key_id`` is the first
8 hex digits of the key's SHA-256 (never the key), the key id a verified client certificate
maps to (``[gateway.tls] client_ids``), a named key's id or ``oidc:<group>:<subject>``.
Health probes are not logged. Non-request records carry ``"event"`` instead of
``"request_id"`` (:meth:`AuditLog.write_event`: TLS handshake failures and reloads, see
:mod:`appliance.gateway.auth.tls`; checkpoints). ``docs/audit.md`` documents every member.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from appliance.audit import AuditChain, DatagramSink
from appliance.config.audit import AuditPolicy
from appliance.errors import PolicyError

from .genai_metrics import GenAiMetrics

LOG = logging.getLogger("appliance.gateway")
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass(slots=True)
class RequestInfo:
    """Mutable facts about one request, filled in by the middleware and the handlers."""

    request_id: str
    method: str
    route: str
    key_id: str | None = None
    status: int = 0
    model: str | None = None
    stream: bool = False
    tool_calls_valid: int = 0
    tool_calls_invalid: int = 0
    error: str | None = None
    upstream_exception: str | None = None
    tools: tuple[str, ...] = ()  # function names the request offered
    request_bytes: int = 0
    response_bytes: int = 0
    input_tokens: int | None = None  # the engine's usage, when it reported it
    output_tokens: int | None = None
    messages: Any = None  # the request's messages: only with [audit] include_prompts
    trace: Any = None  # its tracing.RequestTrace when [telemetry] is on
    source: str | None = None  # source address (.source_address), for the audit log
    # GenAI timings (.genai_metrics): time.perf_counter() values
    started: float = 0.0  # request received
    engine_started: float | None = None  # engine request sent
    first_token_at: float | None = None  # first token relayed (stream) / answer read
    last_token_at: float | None = None  # last event relayed (stream)
    tool_calls_withheld: int = 0  # of tool_calls_invalid: cut by max_tokens
    tool_call_reason: str | None = None  # invalid_tool_call's reason
    regenerations: int = 0  # refused answers asked again (.chat.regenerate)


class Metrics:
    """Prometheus collectors in a private registry (one per app, so tests can run many)."""

    def __init__(self, by_key: bool = False, max_keys: int = 100) -> None:
        self.registry = CollectorRegistry()
        self.genai = GenAiMetrics(self.registry, by_key, max_keys)
        self.requests = Counter("gateway_requests", "Requests answered, by route and status",
                                ["route", "status"], registry=self.registry)
        self.latency = Histogram("gateway_request_duration_seconds",
                                 "Time from request start to last byte", ["route"],
                                 buckets=BUCKETS, registry=self.registry)
        self.tool_calls = Counter("gateway_tool_calls", "Tool calls returned by the engine",
                                  ["result"], registry=self.registry)
        self.key_requests = Counter("gateway_key_requests", "Requests answered, by API key id "
                                    "(never the key) and status", ["key_id", "status"],
                                    registry=self.registry)
        self.model_requests = Counter("gateway_model_requests", "Requests for a served "
                                      "model (chat, responses), by model and status",
                                      ["model", "status"], registry=self.registry)
        self.in_flight = Gauge("gateway_requests_in_flight", "Requests being served",
                               registry=self.registry)
        self.serving = 0  # requests being served; the gauge reads it when scraped
        self.in_flight.set_function(self._serving)
        self._children: dict[tuple[str, str | None, int], tuple[Any, Any, Any]] = {}
        self._models: dict[tuple[str, int], Any] = {}
        self._valid = self.tool_calls.labels("valid")
        self._invalid = self.tool_calls.labels("invalid")

    def _serving(self) -> int:
        return self.serving

    def watch_engine(self, status: Callable[[], Any]) -> None:
        """Export the engine's life: ``appliance_engine_restarts_total`` and
        ``appliance_engine_up`` (1/0), read from ``status()`` (an ``EngineStatus``)."""
        self.registry.register(_EngineCollector(status))

    def watch_models(self, statuses: Callable[[], dict[str, Any]]) -> None:
        """Export each served model's engine (``statuses()``: served name ->
        ``EngineStatus``): ``appliance_model_engine_up{model}`` and
        ``appliance_model_engine_restarts_total{model}``."""
        self.registry.register(_ModelsCollector(statuses))

    def observe(self, info: RequestInfo, seconds: float) -> None:
        """Count one finished request."""
        # labelled children are cached: .labels() costs ~10 us a call (429 hot path)
        key = (info.route, info.key_id, info.status)
        children = self._children.get(key)
        if children is None:
            status = str(info.status)
            children = self._children[key] = (
                self.requests.labels(info.route, status),
                self.key_requests.labels(info.key_id or "none", status),
                self.latency.labels(info.route))
        children[0].inc()
        children[1].inc()
        children[2].observe(seconds)
        if info.model is not None:
            model = self._models.get((info.model, info.status))
            if model is None:
                model = self._models[(info.model, info.status)] = self.model_requests.labels(
                    info.model, str(info.status))
            model.inc()
            self.genai.observe(info, seconds)
        if info.tool_calls_valid:
            self._valid.inc(info.tool_calls_valid)
        if info.tool_calls_invalid:
            self._invalid.inc(info.tool_calls_invalid)

    def render(self) -> bytes:
        """Prometheus text exposition format."""
        return generate_latest(self.registry)


class _EngineCollector(Collector):
    def __init__(self, status: Callable[[], Any]) -> None:
        self.status = status

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        current = self.status()
        yield CounterMetricFamily("appliance_engine_restarts", "Engine restarts by the "
                                  "supervisor", value=current.restarts)
        yield GaugeMetricFamily("appliance_engine_up", "1 while the engine serves",
                                value=1.0 if current.ready else 0.0)


def audit_chain(path: Path, policy: AuditPolicy | None) -> AuditChain:
    """The chain writer for ``path`` under ``[audit]`` ``policy`` (``None``: defaults, no
    signing key). Raises ``SigningError`` for an unusable key, ``ValueError`` for an unset
    ``${CREDENTIALS_DIRECTORY}``."""
    if policy is None:
        return AuditChain(path)
    from appliance.signing import load_private_key

    try:
        key_path = policy.signing_key_path()
    except ValueError as exc:
        raise PolicyError(str(exc), where="audit.signing_key",
                          fix="start under systemd with LoadCredential= or use a path") \
            from None
    key = load_private_key(key_path, policy.passphrase()) if key_path is not None else None
    sinks = []
    if policy.journald:
        sinks.append(DatagramSink("journald", policy.journald_socket))
    if policy.syslog:
        sinks.append(DatagramSink("syslog", policy.syslog_socket, policy.syslog_facility))
    return AuditChain(path, key, policy.checkpoint_every, policy.checkpoint_interval_s,
                      tuple(sinks))


class AuditLog:
    """The gateway's audit log: request and event records into an :class:`AuditChain`
    (append-only, mode 0600, hash-chained, signed checkpoints, collector copies)."""

    def __init__(self, path: Path, policy: AuditPolicy | None = None) -> None:
        self.path = path
        self.chain = audit_chain(path, policy)
        self.include_prompts = policy is not None and policy.include_prompts

    def reopen(self) -> None:
        """Checkpoint, then open the path again (SIGHUP after logrotate moved the file);
        the chain continues in the new file. On failure keep writing to the old file."""
        self.chain.reopen()

    def write(self, info: RequestInfo, latency_ms: float) -> None:
        """Append one record; an I/O error is logged once and does not fail the request."""
        record: dict[str, Any] = {
            "ts": round(time.time(), 3), "request_id": info.request_id, "key_id": info.key_id,
            "method": info.method, "route": info.route, "status": info.status,
            "latency_ms": round(latency_ms, 2), "model": info.model, "stream": info.stream,
            "tools": list(info.tools), "tool_calls_valid": info.tool_calls_valid,
            "tool_calls_invalid": info.tool_calls_invalid,
            "request_bytes": info.request_bytes, "response_bytes": info.response_bytes,
            "input_tokens": info.input_tokens, "output_tokens": info.output_tokens,
            "error": info.error, "upstream_exception": info.upstream_exception,
            "source_address": info.source, "regenerations": info.regenerations,
        }
        if self.include_prompts and info.messages is not None:
            record["messages"] = info.messages
        self.chain.append(record)

    def write_event(self, record: dict[str, object]) -> None:
        """Append one non-request record (e.g. ``{"ts", "event": "tls_handshake_failed",
        ...}`` from :mod:`appliance.gateway.auth.tls`); I/O errors as in :meth:`write`."""
        self.chain.append(dict(record))

    def close(self) -> None:
        """Write a last checkpoint and close the file."""
        self.chain.close()


class _ModelsCollector(Collector):
    def __init__(self, statuses: Callable[[], dict[str, Any]]) -> None:
        self.statuses = statuses

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        restarts = CounterMetricFamily("appliance_model_engine_restarts", "Engine restarts "
                                       "by the supervisor, per served model", labels=["model"])
        up = GaugeMetricFamily("appliance_model_engine_up", "1 while the model's engine "
                               "serves", labels=["model"])
        failed = GaugeMetricFamily("appliance_model_engine_failed", "1 once the model's "
                                   "engine was given up (crash loop)", labels=["model"])
        for name, status in self.statuses().items():
            restarts.add_metric([name], status.restarts)
            up.add_metric([name], 1.0 if status.ready else 0.0)
            failed.add_metric([name], 1.0 if status.state == "failed" else 0.0)
        yield restarts
        yield up
        yield failed
