"""OpenTelemetry traces (issue 23): with a local OTLP receiver a chat request yields the
admission, checks, engine-call and relay spans in one trace, with the GenAI semantic
convention attributes, and the engine gets the trace context; with the receiver down (or
hanging) requests still succeed; tracing is off by default (the SDK is not even imported)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from gw_fake_engine import MODEL, FakeEngine, Reply, text_stream
from gw_helpers import AUTH, chat_body
from otlp_receiver import OtlpReceiver, attributes

from appliance.config.telemetry import TelemetryPolicy
from appliance.gateway import GatewayHandle

ROOT = "POST /v1/chat/completions"
ENGINE = f"chat {MODEL}"
SPAN_KIND_SERVER, SPAN_KIND_CLIENT = 2, 3  # opentelemetry.proto.trace.v1 Span.SpanKind


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    rec = OtlpReceiver().start()
    yield rec
    rec.stop()


def _telemetry(url: str) -> TelemetryPolicy:
    return TelemetryPolicy(otlp_endpoint=url, schedule_delay_s=0.05, export_timeout_s=0.5)


def _post(gw: GatewayHandle, **extra: Any) -> httpx.Response:
    return httpx.post(gw.url + "/v1/chat/completions", json=chat_body(**extra), headers=AUTH,
                      timeout=10)


def _by_name(spans: list[Any]) -> dict[str, Any]:
    return {span.name: span for span in spans}


def test_a_chat_request_yields_its_spans_with_genai_attributes(
        make_gateway: Callable[..., GatewayHandle], engine: FakeEngine,
        receiver: OtlpReceiver) -> None:
    gw = make_gateway(telemetry=_telemetry(receiver.url))
    assert _post(gw, max_tokens=16, temperature=0.5).status_code == 200
    spans = _by_name(receiver.wait_for(5))
    assert set(spans) == {ROOT, "gateway.admission", "gateway.checks", ENGINE,
                          "gateway.relay"}
    root, call = spans[ROOT], spans[ENGINE]
    assert {s.trace_id for s in spans.values()} == {root.trace_id}
    assert all(s.parent_span_id == root.span_id for n, s in spans.items() if n != ROOT)
    assert root.kind == SPAN_KIND_SERVER and call.kind == SPAN_KIND_CLIENT
    attrs = attributes(call)
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.provider.name"] == "vllm"
    assert attrs["gen_ai.request.model"] == MODEL
    assert attrs["gen_ai.response.model"] == MODEL
    assert attrs["gen_ai.request.max_tokens"] == 16
    assert attrs["gen_ai.request.temperature"] == 0.5
    assert attrs["gen_ai.usage.input_tokens"] == 10  # the fake engine's usage
    assert attrs["gen_ai.usage.output_tokens"] == 5
    root_attrs = attributes(root)
    assert root_attrs["http.response.status_code"] == 200
    assert root_attrs["http.route"] == "/v1/chat/completions"
    assert root_attrs["gen_ai.usage.output_tokens"] == 5
    assert "hi" not in str(root_attrs) + str(attrs)  # no prompt text
    # the engine request carries the engine span's context (vLLM joins the trace)
    traceparent = engine.chat_calls[-1]["headers"][b"traceparent"].decode()
    assert traceparent.startswith(f"00-{call.trace_id.hex()}-{call.span_id.hex()}-")
    assert int(traceparent[-2:], 16) & 1  # sampled


def test_a_stream_and_a_refusal_are_traced(make_gateway: Callable[..., GatewayHandle],
                                           engine: FakeEngine,
                                           receiver: OtlpReceiver) -> None:
    gw = make_gateway(telemetry=_telemetry(receiver.url))
    engine.reply = Reply(events=text_stream("a", "b"))
    assert _post(gw, stream=True).status_code == 200
    refused = _post(gw, max_tokens=10**9)
    assert refused.status_code == 400
    spans = receiver.wait_for(5 + 3)
    roots = [s for s in spans if s.name == ROOT]
    assert len(roots) == 2
    failed = next(r for r in roots if attributes(r)["http.response.status_code"] == 400)
    assert attributes(failed)["error.type"] == "invalid_parameter"
    checks = next(s for s in spans if s.name == "gateway.checks"
                  and s.trace_id == failed.trace_id)
    assert attributes(checks)["error.type"] == "invalid_parameter"
    assert checks.status.code == 2  # STATUS_CODE_ERROR
    assert not [s for s in spans if s.name == ENGINE and s.trace_id == failed.trace_id]


def test_a_client_traceparent_is_the_parent(make_gateway: Callable[..., GatewayHandle],
                                            receiver: OtlpReceiver) -> None:
    gw = make_gateway(telemetry=_telemetry(receiver.url))
    trace_id, parent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    r = httpx.post(gw.url + "/v1/chat/completions", json=chat_body(), timeout=10,
                   headers={**AUTH, "traceparent": f"00-{trace_id}-{parent}-01"})
    assert r.status_code == 200
    root = _by_name(receiver.wait_for(5))[ROOT]
    assert root.trace_id.hex() == trace_id and root.parent_span_id.hex() == parent


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_requests_succeed_with_the_collector_down_or_hanging(
        make_gateway: Callable[..., GatewayHandle]) -> None:
    hanging = socket.socket()
    hanging.bind(("127.0.0.1", 0))
    hanging.listen(16)  # accepts connections, never answers
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(hanging.accept()[0]),
                     daemon=True).start()
    try:
        for url in (f"http://127.0.0.1:{_dead_port()}",
                    f"http://127.0.0.1:{hanging.getsockname()[1]}"):
            gw = make_gateway(telemetry=_telemetry(url))
            assert all(_post(gw).status_code == 200 for _ in range(20))
            gw.stop()  # the shutdown flush is bounded too (Tracing.shutdown)
    finally:
        hanging.close()
        for conn in accepted:
            conn.close()


def test_tracing_is_off_by_default_and_the_sdk_is_not_imported() -> None:
    code = ("import sys; from appliance.gateway import start_in_thread; "
            "print('opentelemetry.sdk' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
    assert TelemetryPolicy().enabled is False


def test_a_dead_collector_is_logged_once_a_minute_not_per_batch(
        make_gateway: Callable[..., GatewayHandle], caplog: pytest.LogCaptureFixture) -> None:
    import logging
    import time

    gw = make_gateway(telemetry=_telemetry(f"http://127.0.0.1:{_dead_port()}"))
    name = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
    for rate_limit in logging.getLogger(name).filters:  # earlier tests used this minute
        rate_limit.last = -1e9  # type: ignore[attr-defined]
    with caplog.at_level(logging.WARNING, logger=name):
        for _ in range(6):  # six export batches, 0.05 s apart, each failing
            assert _post(gw).status_code == 200
            time.sleep(0.3)
        gw.state.tracing.force_flush(2.0)
    failures = [r for r in caplog.records if r.name == name]
    assert len(failures) == 1, [r.getMessage() for r in failures]
