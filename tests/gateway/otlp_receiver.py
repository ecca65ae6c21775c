"""A tiny OTLP/HTTP trace receiver for tests and benchmarks: ``POST /v1/traces`` with an
``ExportTraceServiceRequest`` (protobuf, decoded with ``opentelemetry-proto``), on
127.0.0.1; the spans it got are in ``spans`` (``(span, resource attributes)``), and the
``Metric`` messages of ``POST /v1/metrics`` in ``metrics``."""

from __future__ import annotations

import http.server
import threading
import time
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def value_of(value: AnyValue) -> Any:
    """The Python value of an OTLP ``AnyValue`` (string, int, double, bool)."""
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def attributes(span: Any) -> dict[str, Any]:
    """A span's attributes as a dict."""
    return {kv.key: value_of(kv.value) for kv in span.attributes}


class OtlpReceiver:
    """Start with :meth:`start`; ``url`` is the collector base URL; :meth:`stop`."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.metrics: list[Any] = []  # metric data points' Metric messages (/v1/metrics)
        self.requests = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.path.endswith("/v1/metrics"):
                    self._metrics(body)
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with receiver.lock:
                    receiver.requests += 1
                    for resource_spans in request.resource_spans:
                        for scope_spans in resource_spans.scope_spans:
                            receiver.spans.extend(scope_spans.spans)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def _metrics(self, body: bytes) -> None:
                metrics = ExportMetricsServiceRequest()
                metrics.ParseFromString(body)
                with receiver.lock:
                    for resource_metrics in metrics.resource_metrics:
                        for scope_metrics in resource_metrics.scope_metrics:
                            receiver.metrics.extend(scope_metrics.metrics)
                reply = ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> OtlpReceiver:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait_for(self, n: int, timeout: float = 10.0) -> list[Any]:
        """The spans once at least ``n`` arrived (``AssertionError`` after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                if len(self.spans) >= n:
                    return list(self.spans)
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(self.spans)} spans arrived, expected {n}")
            time.sleep(0.02)
