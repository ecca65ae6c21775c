"""GenAI metrics of chat requests, named after the OpenTelemetry GenAI semantic conventions.

On ``GET /metrics`` (prometheus-client, the app's registry) and, where ``[telemetry]
otlp_endpoint`` is set, over OTLP/HTTP to ``<endpoint>/v1/metrics`` with the same
instruments and the conventions' dotted names and attributes (OpenTelemetry SDK meter,
exported every ``metrics_interval_s`` in the SDK's thread; a collector that is down never
delays a request).

=================================================  =========  ===================================
Prometheus series (OTLP instrument)                unit       labels (OTLP attributes)
=================================================  =========  ===================================
``gen_ai_client_token_usage``                      token      ``gen_ai_token_type`` (``input`` /
(``gen_ai.client.token.usage``)                               ``output``), model, operation
``gen_ai_server_request_duration_seconds``         s          model, operation, ``error_type``
(``gen_ai.server.request.duration``)                          (the refusal code, ``_OTHER``: none)
``gen_ai_server_time_to_first_token_seconds``      s          model, operation, ``stream``
(``gen_ai.server.time_to_first_token``)
``gen_ai_server_time_per_output_token_seconds``    s          model, operation, ``stream``
(``gen_ai.server.time_per_output_token``)
``gateway_tool_call_outcomes_total``               call       model, ``outcome``
(``appliance.tool_call.outcomes``)
=================================================  =========  ===================================

model is ``gen_ai_request_model`` (the served name), operation ``gen_ai_operation_name``
(``chat``: ``/v1/chat/completions`` and ``/v1/responses``, both answered by the chat
handler). With ``[telemetry] metrics_by_key = true`` the token usage, duration and tool-call
series also carry ``key_id`` (the same principal id as ``gateway_key_requests``: a named
key, a plain key's digest prefix, ``oidc:<group>[:<subject>]``), bounded: the first
``metrics_max_keys`` ids get their own label value, later ones share ``_other``.

What is measured (seconds from the gateway's receipt of the request):

* token usage: the engine's ``usage`` (streams: the gateway asks the engine for the usage
  chunk, and forwards it only when the client asked for it); successful answers only;
* time to first token: streamed, when the first event after the engine produced a token is
  relayed; not streamed, when the engine's whole answer has arrived (the moment the client
  can see its first token); successful answers only;
* time per output token: streamed, (last event - first event) / (output tokens - 1), with
  at least two output tokens; not streamed, the engine call's time / output tokens (prefill
  included: an upper bound, kept apart by ``stream="false"``);
* tool-call outcomes: ``valid``; ``invalid_arguments`` (not JSON, not an object, against the
  schema, too large); ``unknown_tool`` (a function not offered, another than the named
  ``tool_choice``, or any call where none may be made); ``malformed`` (missing or repeated
  id, broken deltas, parallel calls when disabled, no call where one was required);
  ``withheld`` (cut by ``max_tokens``: never returned as a call).

Buckets are the conventions' advisory boundaries.
"""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
                 16777216, 67108864)
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                    40.96, 81.92)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
OUTCOMES = ("valid", "invalid_arguments", "unknown_tool", "malformed", "withheld")
REASON_OUTCOME = {
    "bad_json": "invalid_arguments", "schema_mismatch": "invalid_arguments",
    "too_large": "invalid_arguments", "unknown_function": "unknown_tool",
    "wrong_function": "unknown_tool", "calls_not_allowed": "unknown_tool",
}
OTHER = "_other"
NO_ERROR = "_OTHER"  # error_type of a successful request (the conventions' fallback value)


class GenAiMetrics:
    """The series of the module docstring in ``registry``; ``by_key``: add ``key_id``
    (at most ``max_keys`` values, then ``_other``)."""

    def __init__(self, registry: CollectorRegistry, by_key: bool = False,
                 max_keys: int = 100) -> None:
        self.by_key = by_key
        self.max_keys = max_keys
        self._keys: set[str] = set()
        self._lock = threading.Lock()
        base = ["gen_ai_operation_name", "gen_ai_request_model"]
        keyed = [*base, "key_id"] if by_key else base
        self.tokens = Histogram("gen_ai_client_token_usage", "Tokens used per request "
                                "(gen_ai.client.token.usage), by token type",
                                [*keyed, "gen_ai_token_type"], buckets=TOKEN_BUCKETS,
                                registry=registry)
        self.duration = Histogram("gen_ai_server_request_duration_seconds", "Chat request "
                                  "duration (gen_ai.server.request.duration)",
                                  [*keyed, "error_type"], buckets=DURATION_BUCKETS,
                                  registry=registry)
        self.ttft = Histogram("gen_ai_server_time_to_first_token_seconds", "Time to first "
                              "token (gen_ai.server.time_to_first_token)", [*base, "stream"],
                              buckets=TTFT_BUCKETS, registry=registry)
        self.tpot = Histogram("gen_ai_server_time_per_output_token_seconds", "Time per "
                              "output token (gen_ai.server.time_per_output_token)",
                              [*base, "stream"], buckets=TPOT_BUCKETS, registry=registry)
        self.tool_calls = Counter("gateway_tool_call_outcomes", "Tool calls the engine "
                                  "returned, by outcome", [*keyed[1:], "outcome"],
                                  registry=registry)
        self.otlp: Any = None  # an _Otlp when [telemetry] exports (attach_otlp)
        # labelled children, cached: .labels() costs ~10 us a call (metrics hot path)
        self._children: dict[tuple[Any, ...], Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def attach_otlp(self, policy: Any) -> None:
        """Also export over OTLP/HTTP (``policy``: the ``[telemetry]`` table, enabled)."""
        self.otlp = _Otlp(policy)

    def _key(self, key_id: str | None) -> str:
        key = key_id or "none"
        if key in self._keys:
            return key
        with self._lock:
            if len(self._keys) >= self.max_keys:
                return OTHER
            self._keys.add(key)
        return key

    def observe(self, info: Any, seconds: float) -> None:
        """Record one finished chat request (``info``: its ``RequestInfo``, with ``model``
        set); ``seconds``: receipt to last byte."""
        model: str = info.model
        labels = ["chat", model]
        if self.by_key:
            labels.append(self._key(info.key_id))
        ok = info.status == 200 and info.error is None
        error = NO_ERROR if ok else (info.error or str(info.status))
        self._child(self.duration, *labels, error).observe(seconds)
        stream = "true" if info.stream else "false"
        out = info.output_tokens
        points: dict[str, float] = {}
        if ok:
            if info.input_tokens is not None:
                self._child(self.tokens, *labels, "input").observe(info.input_tokens)
            if out is not None:
                self._child(self.tokens, *labels, "output").observe(out)
            if info.first_token_at is not None:
                points["ttft"] = info.first_token_at - info.started
                self._child(self.ttft, "chat", model, stream).observe(points["ttft"])
            tpot = _per_token(info)
            if tpot is not None:
                points["tpot"] = tpot
                self._child(self.tpot, "chat", model, stream).observe(tpot)
        outcomes = _outcomes(info)
        for outcome, count in outcomes.items():
            self._child(self.tool_calls, *labels[1:], outcome).inc(count)
        if self.otlp is not None:
            self.otlp.record(info, labels, error, seconds, points, outcomes, ok)


def _per_token(info: Any) -> float | None:
    """Time per output token (module docstring), or ``None`` when not measurable."""
    out = info.output_tokens
    if info.first_token_at is None or out is None:
        return None
    if info.stream:
        if out < 2 or info.last_token_at is None:
            return None
        return float((info.last_token_at - info.first_token_at) / (out - 1))
    if out < 1 or info.engine_started is None:
        return None
    return float((info.first_token_at - info.engine_started) / out)


def _outcomes(info: Any) -> dict[str, int]:
    """Tool calls by outcome (``tool_calls_invalid`` includes the withheld ones)."""
    found: dict[str, int] = {}
    if info.tool_calls_valid:
        found["valid"] = info.tool_calls_valid
    withheld = info.tool_calls_withheld
    if withheld:
        found["withheld"] = withheld
    refused = info.tool_calls_invalid - withheld
    if refused > 0:
        found[REASON_OUTCOME.get(info.tool_call_reason or "", "malformed")] = refused
    return found


class _Otlp:
    """The same instruments on an OpenTelemetry meter exported over OTLP/HTTP."""

    def __init__(self, policy: Any) -> None:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource

        from appliance import __version__

        exporter = OTLPMetricExporter(endpoint=policy.metrics_url, headers=policy.headers,
                                      timeout=policy.export_timeout_s)
        reader = PeriodicExportingMetricReader(
            exporter, export_interval_millis=policy.metrics_interval_s * 1000,
            export_timeout_millis=policy.export_timeout_s * 1000)
        self.provider = MeterProvider(
            metric_readers=[reader], resource=Resource.create(
                {"service.name": policy.service_name, "service.version": __version__}))
        meter = self.provider.get_meter("appliance.gateway", __version__)
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Tokens used",
            explicit_bucket_boundaries_advisory=list(map(float, TOKEN_BUCKETS)))
        self.duration = meter.create_histogram(
            "gen_ai.server.request.duration", unit="s", description="Request duration",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS))
        self.ttft = meter.create_histogram(
            "gen_ai.server.time_to_first_token", unit="s", description="Time to first token",
            explicit_bucket_boundaries_advisory=list(TTFT_BUCKETS))
        self.tpot = meter.create_histogram(
            "gen_ai.server.time_per_output_token", unit="s",
            description="Time per output token",
            explicit_bucket_boundaries_advisory=list(TPOT_BUCKETS))
        self.tool_calls = meter.create_counter(
            "appliance.tool_call.outcomes", unit="{call}", description="Tool calls by outcome")

    def record(self, info: Any, labels: list[str], error: str, seconds: float,
               points: dict[str, float], outcomes: dict[str, int], ok: bool) -> None:
        attrs: dict[str, str] = {"gen_ai.operation.name": labels[0],
                                 "gen_ai.provider.name": "vllm",
                                 "gen_ai.request.model": labels[1]}
        if len(labels) > 2:
            attrs["appliance.key_id"] = labels[2]
        self.duration.record(seconds, {**attrs, **({} if ok else {"error.type": error})})
        if ok:
            for kind, count in (("input", info.input_tokens), ("output", info.output_tokens)):
                if count is not None:
                    self.tokens.record(count, {**attrs, "gen_ai.token.type": kind})
        timing: dict[str, str | bool] = {**attrs, "appliance.stream": bool(info.stream)}
        timing.pop("appliance.key_id", None)
        if "ttft" in points:
            self.ttft.record(points["ttft"], timing)
        if "tpot" in points:
            self.tpot.record(points["tpot"], timing)
        for outcome, count in outcomes.items():
            self.tool_calls.add(count, {**attrs, "appliance.tool_call.outcome": outcome})

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Export now (tests)."""
        return bool(self.provider.force_flush(int(timeout_s * 1000)))

    def shutdown(self) -> None:
        """Stop the exporter (one last export, bounded by the exporter's timeout)."""
        thread = threading.Thread(target=self.provider.shutdown, daemon=True,
                                  name="appliance-otel-metrics-shutdown")
        thread.start()
        thread.join(2.0)
