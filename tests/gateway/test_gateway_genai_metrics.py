"""GenAI metrics (issue 33, :mod:`appliance.gateway.telemetry.genai_metrics`): a streamed and a
non-streamed request move the token usage, time to first token and time per output token
series by the right amounts; tool-call outcomes by kind; the opt-in, bounded key label; the
same instruments over OTLP."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from gw_fake_engine import FakeEngine, Reply, chunk, completion, text_stream, tool_message
from gw_helpers import AUTH, KEY, OTHER_KEY, WEATHER_TOOL, chat_body, sse_json
from otlp_receiver import OtlpReceiver
from prometheus_client.parser import text_string_to_metric_families

from appliance.config.telemetry import TelemetryPolicy
from appliance.gateway import GatewayHandle
from appliance.gateway.settings import hash_api_key

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(gw: GatewayHandle, key: str = KEY) -> Series:
    text = httpx.get(gw.url + "/metrics", headers={"Authorization": f"Bearer {key}"},
                     timeout=10).text
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(series: Series, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in series.items() if n == name and wanted <= ls)


def delta(before: Series, after: Series, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


MODEL_LABELS = {"gen_ai_request_model": "appliance-model", "gen_ai_operation_name": "chat"}
TTFT = "gen_ai_server_time_to_first_token_seconds"
TPOT = "gen_ai_server_time_per_output_token_seconds"
TOKENS = "gen_ai_client_token_usage"


def test_non_streamed_request_moves_tokens_ttft_and_tpot(
        gateway: GatewayHandle, engine: FakeEngine) -> None:
    engine.reply = Reply(body=completion({"content": "hello"}), delay_s=0.3)
    before = scrape(gateway)
    r = httpx.post(gateway.url + "/v1/chat/completions", json=chat_body(), headers=AUTH,
                   timeout=10)
    assert r.status_code == 200
    after = scrape(gateway)
    assert delta(before, after, TOKENS + "_sum", gen_ai_token_type="input",
                 **MODEL_LABELS) == 10
    assert delta(before, after, TOKENS + "_sum", gen_ai_token_type="output") == 5
    assert delta(before, after, TOKENS + "_count", gen_ai_token_type="output") == 1
    assert delta(before, after, TTFT + "_count", stream="false") == 1
    assert delta(before, after, TTFT + "_count", stream="true") == 0
    ttft = delta(before, after, TTFT + "_sum", stream="false")
    assert 0.3 <= ttft < 3.0  # the engine answered after 0.3 s
    assert delta(before, after, TPOT + "_count", stream="false") == 1
    tpot = delta(before, after, TPOT + "_sum", stream="false")
    assert 0.3 / 5 <= tpot < 3.0 / 5  # the engine's time over 5 output tokens
    assert delta(before, after, "gen_ai_server_request_duration_seconds_count",
                 error_type="_OTHER", **MODEL_LABELS) == 1


def test_streamed_request_moves_tokens_ttft_and_tpot(
        gateway: GatewayHandle, engine: FakeEngine) -> None:
    # like vLLM: the role chunk comes with the first token (0.2 s), then a token every
    # 0.1 s; the finish and usage chunks and [DONE] right after the last token (0.5 s)
    usage = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1,
             "model": "appliance-model", "choices": [],
             "usage": {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11}}
    engine.reply = Reply(events=[*text_stream("a", "b", "c", "d"), usage],
                         body_delay_s=0.2, gaps={2: 0.1, 3: 0.1, 4: 0.1})
    before = scrape(gateway)
    r = httpx.post(gateway.url + "/v1/chat/completions", json=chat_body(stream=True),
                   headers=AUTH, timeout=10)
    events, done = sse_json(r.text)
    assert done and all(e["choices"] for e in events)  # usage not relayed: not asked for
    assert engine.chat_calls[-1]["body"]["stream_options"] == {"include_usage": True}
    after = scrape(gateway)
    assert delta(before, after, TOKENS + "_sum", gen_ai_token_type="input") == 7
    assert delta(before, after, TOKENS + "_sum", gen_ai_token_type="output") == 4
    assert delta(before, after, TTFT + "_count", stream="true") == 1
    assert delta(before, after, TTFT + "_count", stream="false") == 0
    assert 0.2 <= delta(before, after, TTFT + "_sum", stream="true") < 2.0
    assert delta(before, after, TPOT + "_count", stream="true") == 1
    tpot = delta(before, after, TPOT + "_sum", stream="true")
    assert 0.09 <= tpot < 0.5  # (0.5 - 0.2) s over the 3 tokens after the first


def test_failed_requests_count_duration_with_error_type_but_no_tokens(
        gateway: GatewayHandle, engine: FakeEngine) -> None:
    engine.reply = Reply(status=500, body={"error": {"message": "boom"}})
    before = scrape(gateway)
    r = httpx.post(gateway.url + "/v1/chat/completions", json=chat_body(), headers=AUTH,
                   timeout=10)
    assert r.status_code >= 500
    after = scrape(gateway)
    code = r.json()["error"]["code"]
    assert delta(before, after, "gen_ai_server_request_duration_seconds_count",
                 error_type=code) == 1
    assert delta(before, after, TOKENS + "_count") == 0
    assert delta(before, after, TTFT + "_count") == 0


TOOLS = {"tools": [WEATHER_TOOL]}


@pytest.mark.parametrize(("reply", "outcome"), [
    (completion(tool_message(("c1", "get_weather", '{"city": "Oslo"}')), "tool_calls"),
     "valid"),
    (completion(tool_message(("c1", "get_stock", '{"city": "Oslo"}')), "tool_calls"),
     "unknown_tool"),
    (completion(tool_message(("c1", "get_weather", '{"town": 1}')), "tool_calls"),
     "invalid_arguments"),
    (completion(tool_message(("c1", "get_weather", '{"city": "Os')), "length"), "withheld"),
])
def test_tool_call_outcomes(gateway: GatewayHandle, engine: FakeEngine,
                            reply: dict[str, Any], outcome: str) -> None:
    engine.reply = Reply(body=reply)
    before = scrape(gateway)
    httpx.post(gateway.url + "/v1/chat/completions", json=chat_body(**TOOLS), headers=AUTH,
               timeout=10)
    after = scrape(gateway)
    name = "gateway_tool_call_outcomes_total"
    assert delta(before, after, name, outcome=outcome,
                 gen_ai_request_model="appliance-model") == 1
    assert delta(before, after, name) == 1


def test_streamed_tool_call_outcome(gateway: GatewayHandle, engine: FakeEngine) -> None:
    call = {"index": 0, "id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": 3}'}}
    engine.reply = Reply(events=[chunk({"delta": {"role": "assistant", "tool_calls": [call]}}),
                                 chunk({"delta": {}, "finish_reason": "tool_calls"})])
    before = scrape(gateway)
    httpx.post(gateway.url + "/v1/chat/completions", json=chat_body(stream=True, **TOOLS),
               headers=AUTH, timeout=10)
    after = scrape(gateway)
    assert delta(before, after, "gateway_tool_call_outcomes_total",
                 outcome="invalid_arguments") == 1


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    rec = OtlpReceiver().start()
    yield rec
    rec.stop()


def test_key_label_is_opt_in_and_bounded(make_gateway: Callable[..., GatewayHandle],
                                         engine: FakeEngine, receiver: OtlpReceiver) -> None:
    engine.reply = Reply(body=completion({"content": "hi"}))
    plain = make_gateway()
    httpx.post(plain.url + "/v1/chat/completions", json=chat_body(), headers=AUTH, timeout=10)
    assert not any("key_id" in dict(ls) for (n, ls) in scrape(plain) if n.startswith(TOKENS))
    policy = TelemetryPolicy(otlp_endpoint=receiver.url, metrics_by_key=True,
                             metrics_max_keys=1, metrics_interval_s=1, export_timeout_s=1)
    first = hash_api_key(KEY)[:8]
    # KEY is a monitoring key (``metrics_keys``): it sees every key's series, `_other` too
    gw = make_gateway(telemetry=policy, metrics_keys=(first,))
    for key in (KEY, OTHER_KEY, OTHER_KEY):
        assert httpx.post(gw.url + "/v1/chat/completions", json=chat_body(), timeout=10,
                          headers={"Authorization": f"Bearer {key}"}).status_code == 200
    series = scrape(gw)
    assert value(series, TOKENS + "_count", gen_ai_token_type="output", key_id=first) == 1
    assert value(series, TOKENS + "_count", gen_ai_token_type="output", key_id="_other") == 2
    # a key outside metrics_keys sees only its own key_id series (docs/gateway.md#tenants)
    theirs = scrape(gw, OTHER_KEY)
    assert value(theirs, TOKENS + "_count", key_id=first) == 0
    assert value(theirs, TOKENS + "_count", key_id="_other") == 0
    # the same instruments over OTLP, with the conventions' names and attributes
    otlp = gw.state.metrics.genai.otlp
    assert otlp is not None and otlp.force_flush()
    names = {m.name for m in receiver.metrics}
    assert {"gen_ai.client.token.usage", "gen_ai.server.request.duration",
            "gen_ai.server.time_to_first_token",
            "gen_ai.server.time_per_output_token"} <= names
    usage = [m for m in receiver.metrics if m.name == "gen_ai.client.token.usage"][-1]
    points = {json.dumps({kv.key: kv.value.string_value for kv in p.attributes},
                         sort_keys=True): p for p in usage.histogram.data_points}
    outputs = [p for k, p in points.items() if '"gen_ai.token.type": "output"' in k]
    assert sum(p.count for p in outputs) == 3 and sum(p.sum for p in outputs) == 15


def test_stream_options_null_still_gets_the_usage_chunk(gateway: GatewayHandle,
                                                        engine: FakeEngine) -> None:
    """Found by schemathesis: ``"stream_options": null`` was a 500 once the gateway asked
    the engine for usage."""
    engine.reply = Reply(events=text_stream("a"))
    r = httpx.post(gateway.url + "/v1/chat/completions", headers=AUTH, timeout=10,
                   json=chat_body(stream=True, stream_options=None))
    assert r.status_code == 200 and sse_json(r.text)[1]
    assert engine.chat_calls[-1]["body"]["stream_options"] == {"include_usage": True}
