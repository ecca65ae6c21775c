"""OpenTelemetry traces of chat requests (``[telemetry]``, :mod:`appliance.config.telemetry`),
exported over OTLP/HTTP (protobuf) by the OpenTelemetry SDK (``opentelemetry-sdk`` and
``opentelemetry-exporter-otlp-proto-http``, pinned in ``pyproject.toml``).

Spans of one ``POST /v1/chat/completions`` (or ``/v1/responses``), all in one trace (a
client's W3C ``traceparent`` header, if any, is its parent):

=========================  ======  =============================================================
span                       kind    covers; attributes
=========================  ======  =============================================================
``POST <route>``           SERVER  the whole request; ``http.request.method``, ``http.route``,
                                   ``http.response.status_code``, ``appliance.request_id``,
                                   ``appliance.key_id``, ``gen_ai.operation.name`` (``chat``),
                                   ``gen_ai.request.model``, ``gen_ai.usage.*``, ``error.type``
``gateway.admission``      INTERNAL authentication, engine state, key limits, global bound
``gateway.checks``         INTERNAL body read and request checks (schemas, limits, tpm charge)
``chat <model>``           CLIENT  the engine call until its answer is checked; the GenAI
                                   semantic conventions: ``gen_ai.operation.name``,
                                   ``gen_ai.provider.name`` (``vllm``), ``gen_ai.request.model``,
                                   ``gen_ai.request.max_tokens`` / ``temperature`` / ``top_p``
                                   (when sent), ``gen_ai.response.model``,
                                   ``gen_ai.usage.input_tokens`` / ``output_tokens`` (when the
                                   engine reports usage), ``server.address``; its context is
                                   sent to the engine as ``traceparent`` (vLLM joins the trace)
``gateway.relay``          INTERNAL answer validation and relay to the client (stream: the
                                   event loop over the engine's stream)
=========================  ======  =============================================================

A refusal sets ``error.type`` to its stable code and the span status to ERROR. Prompt and
answer text are never attributes. Export is asynchronous (``BatchSpanProcessor``: bounded
queue, export in a worker thread with ``export_timeout_s``): a collector that is down never
slows or fails a request. :meth:`Tracing.shutdown` waits at most its timeout. When tracing is
off nothing here runs (``GatewayState.tracing`` is ``None``). The exporter's own failure
messages (collector down) are let through once a minute.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from appliance import __version__
from appliance.config.telemetry import TelemetryPolicy

from .spans import end, usage

LOG = logging.getLogger("appliance.gateway")
EXPORTER_LOGGERS = ("opentelemetry.exporter.otlp.proto.http.trace_exporter",
                    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
                    "opentelemetry.exporter.otlp.common.http")
EXPORT_LOG_INTERVAL_S = 60.0
PROPAGATOR = TraceContextTextMapPropagator()
REQUEST_PARAMS = (("max_tokens", "gen_ai.request.max_tokens"),
                  ("max_completion_tokens", "gen_ai.request.max_tokens"),
                  ("temperature", "gen_ai.request.temperature"),
                  ("top_p", "gen_ai.request.top_p"))


class _EveryMinute(logging.Filter):
    """Lets one exporter message through per :data:`EXPORT_LOG_INTERVAL_S`: a collector
    that is down makes the exporter log every batch (each second), which must not flood the
    journal; the dropped count is added to the next message let through."""

    def __init__(self) -> None:
        super().__init__()
        self.last = -EXPORT_LOG_INTERVAL_S
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        if now - self.last < EXPORT_LOG_INTERVAL_S:
            self.dropped += 1
            return False
        if self.dropped:
            record.msg = f"{record.msg} ({self.dropped} similar messages suppressed)"
        self.last, self.dropped = now, 0
        return True


def _quiet_exporter() -> None:
    for name in EXPORTER_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _EveryMinute) for f in logger.filters):
            logger.addFilter(_EveryMinute())


class Tracing:
    """The app's tracer provider, OTLP exporter and batch processor (one per app)."""

    def __init__(self, policy: TelemetryPolicy, served_model: str) -> None:
        _quiet_exporter()
        self.policy = policy
        self.model = served_model
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": policy.service_name,
                                      "service.version": __version__}),
            sampler=ParentBased(TraceIdRatioBased(policy.sample_ratio)))
        exporter = OTLPSpanExporter(endpoint=policy.traces_url, headers=policy.headers,
                                    timeout=policy.export_timeout_s)
        self.processor = BatchSpanProcessor(
            exporter, max_queue_size=policy.max_queue_size,
            schedule_delay_millis=policy.schedule_delay_s * 1000,
            max_export_batch_size=min(policy.max_export_batch_size, policy.max_queue_size),
            export_timeout_millis=policy.export_timeout_s * 1000)
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("appliance.gateway", __version__)

    def start(self, scope: Any, method: str, route: str, request_id: str) -> RequestTrace:
        """The root span of one request (parent: the client's ``traceparent``, if any)."""
        carrier: dict[str, str] = {}
        for name, value in scope["headers"]:
            if name in (b"traceparent", b"tracestate"):
                carrier[name.decode()] = value.decode("latin-1")
        parent = PROPAGATOR.extract(carrier) if carrier else None
        root = self.tracer.start_span(
            f"{method} {route}", context=parent, kind=SpanKind.SERVER, attributes={
                "http.request.method": method, "http.route": route,
                "appliance.request_id": request_id, "gen_ai.operation.name": "chat",
                "gen_ai.request.model": self.model})
        return RequestTrace(self, root)

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Export what is queued now (tests, benchmarks); False on timeout."""
        return bool(self.provider.force_flush(int(timeout_s * 1000)))

    def shutdown(self, timeout_s: float = 2.0) -> None:
        """Flush and stop the exporter, waiting at most ``timeout_s`` (a collector that is
        down cannot hold the gateway's shutdown)."""
        thread = threading.Thread(target=self.provider.shutdown, daemon=True,
                                  name="appliance-otel-shutdown")
        thread.start()
        thread.join(timeout_s)


class RequestTrace:
    """The spans of one request (see the module docstring)."""

    __slots__ = ("tracing", "root", "context")

    def __init__(self, tracing: Tracing, root: Span) -> None:
        self.tracing = tracing
        self.root = root
        self.context: Context = set_span_in_context(root)

    def span(self, name: str) -> Span:
        """A child span of the request (INTERNAL)."""
        return self.tracing.tracer.start_span(name, context=self.context)

    def engine(self, body: bytes, headers: dict[str, str], server: str,
               model: str | None = None) -> Span:
        """The CLIENT span of the engine call for the forwarded ``body`` to ``model``'s
        engine (default: the default model); adds its ``traceparent`` to ``headers`` (the
        engine request's)."""
        model = model or self.tracing.model
        self.root.set_attribute("gen_ai.request.model", model)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "vllm",
            "gen_ai.request.model": model, "server.address": server}
        try:
            sent = json.loads(body)
        except ValueError:
            sent = None
        if isinstance(sent, dict):
            for field, attribute in REQUEST_PARAMS:
                value = sent.get(field)
                if isinstance(value, int | float) and not isinstance(value, bool):
                    attributes[attribute] = value
        span = self.tracing.tracer.start_span(f"chat {model}",
                                              context=self.context, kind=SpanKind.CLIENT,
                                              attributes=attributes)
        PROPAGATOR.inject(headers, context=set_span_in_context(span))
        return span

    def finish(self, info: Any) -> None:
        """End the root span with the request's outcome (``info``: ``RequestInfo``)."""
        root = self.root
        root.set_attributes({"http.response.status_code": info.status,
                             "appliance.key_id": info.key_id or "", **usage(info)})
        end(root, info.error or (str(info.status) if info.status >= 500 else None))
