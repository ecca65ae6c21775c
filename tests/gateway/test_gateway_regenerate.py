"""Bounded regeneration of refused engine answers (``[gateway] regenerate_invalid``, issue 34).

Public case (openai SDK ``parse()`` with a pydantic ``date`` field): the engine wrote
``2018-02-31``, which the grammar allowed and the gateway's validation refused with 502
``invalid_structured_output``. With regeneration on, the gateway asks the engine again within
the request's time budget and the caller's quotas, and returns the first valid answer.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pydantic
import pytest
from gw_fake_engine import FakeEngine, Reply, completion, text_stream, tool_message
from gw_helpers import AUTH, KEY, WEATHER_TOOL, chat_body, sse_json

from appliance.config.gateway import GatewayLimits
from appliance.config.keys import KeyLimits
from appliance.gateway import GatewayHandle
from appliance.gateway.chat.regenerate import HEADER, MAX_REGENERATIONS, deterministic

DATE_SCHEMA = {"type": "object", "properties": {"due": {"type": "string", "format": "date"}},
               "required": ["due"], "additionalProperties": False}
RF = {"type": "json_schema", "json_schema": {"name": "invoice", "schema": DATE_SCHEMA}}
BAD_DATE = completion({"content": '{"due": "2018-02-31"}'})  # the SDK parse() case
GOOD_DATE = completion({"content": '{"due": "2018-02-28"}'})
NAME = HEADER.decode()


def _sequence(engine: FakeEngine, *replies: Reply) -> None:
    """The engine answers ``replies`` in order, then repeats the last one."""
    queue = list(replies)

    def next_reply(body: Any) -> Reply:
        return queue.pop(0) if len(queue) > 1 else queue[0]

    engine.reply = next_reply


@pytest.fixture
def ask(make_gateway: Callable[..., GatewayHandle]) -> Iterator[Callable[..., Any]]:
    clients: list[httpx.Client] = []

    def factory(**settings: Any) -> Callable[..., httpx.Response]:
        gw = make_gateway(**settings)
        client = httpx.Client(base_url=gw.url, headers=AUTH, timeout=10)
        clients.append(client)

        def post(**extra: Any) -> httpx.Response:
            extra.setdefault("response_format", RF)
            return client.post("/v1/chat/completions", json=chat_body(**extra))

        post.client = client  # type: ignore[attr-defined]
        post.gw = gw  # type: ignore[attr-defined]
        return post

    yield factory
    for client in clients:
        client.close()


def _metric(client: httpx.Client, outcome: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("gateway_regenerations_total{") and f'outcome="{outcome}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _records(log: Path, count: int) -> list[dict[str, Any]]:
    """The audit log's request records to the chat route, once ``count`` are there."""
    deadline = time.monotonic() + 10
    while True:
        lines = log.read_text().splitlines() if log.exists() else []
        found = [r for r in map(json.loads, lines)
                 if r.get("route") == "/v1/chat/completions"]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def test_sdk_parse_date_case_invalid_then_valid_is_200_after_one_regeneration(
        ask: Callable[..., Any], engine: FakeEngine, tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    post = ask(regenerate_invalid=2, audit_log=log)
    _sequence(engine, Reply(body=BAD_DATE), Reply(body=GOOD_DATE))
    r = post()
    assert r.status_code == 200, r.text
    assert r.headers[NAME] == "1"
    assert json.loads(r.json()["choices"][0]["message"]["content"]) == {"due": "2018-02-28"}
    calls = engine.chat_calls
    assert len(calls) == 2 and calls[0]["body"] == calls[1]["body"]  # the same request again
    assert _metric(post.client, "valid") == 1 and _metric(post.client, "invalid") == 0
    record = _records(log, 1)[0]
    assert record["status"] == 200 and record["regenerations"] == 1 and record["error"] is None


def test_always_invalid_is_the_same_502_after_n_plus_one_tries(
        ask: Callable[..., Any], engine: FakeEngine, tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    post = ask(regenerate_invalid=2, audit_log=log)
    engine.reply = Reply(body=BAD_DATE)
    r = post()
    assert r.status_code == 502
    error = r.json()["error"]
    assert error["code"] == "invalid_structured_output" and "/due" in error["message"]
    assert r.headers[NAME] == "2"
    assert len(engine.chat_calls) == 3
    assert _metric(post.client, "invalid") == 2 and _metric(post.client, "valid") == 0
    record = _records(log, 1)[0]
    assert record["status"] == 502 and record["regenerations"] == 2
    assert record["error"] == "invalid_structured_output"


def test_no_regeneration_when_the_time_budget_is_spent(
        ask: Callable[..., Any], engine: FakeEngine) -> None:
    # the first answer took 0.6 s of a 1 s budget: another would not finish in time
    post = ask(regenerate_invalid=3, request_timeout_s=1.0)
    engine.reply = Reply(body=BAD_DATE, delay_s=0.6)
    started = time.monotonic()
    r = post()
    assert r.status_code == 502 and r.json()["error"]["code"] == "invalid_structured_output"
    assert time.monotonic() - started < 1.0
    assert r.headers[NAME] == "0" and len(engine.chat_calls) == 1
    assert _metric(post.client, "no_time") == 1


def test_a_regeneration_is_cut_at_the_request_deadline(
        ask: Callable[..., Any], engine: FakeEngine) -> None:
    # the first answer is quick, the regeneration hangs: it ends at the deadline, not later
    post = ask(regenerate_invalid=3, request_timeout_s=1.5)
    _sequence(engine, Reply(body=BAD_DATE), Reply(body=GOOD_DATE, delay_s=5.0))
    started = time.monotonic()
    r = post()
    took = time.monotonic() - started
    assert r.status_code == 502 and r.json()["error"]["code"] == "invalid_structured_output"
    assert 1.2 < took < 2.5, took
    assert r.headers[NAME] == "1" and len(engine.chat_calls) == 2
    assert _metric(post.client, "failed") == 1


def test_zero_is_todays_behaviour(ask: Callable[..., Any], engine: FakeEngine) -> None:
    post = ask()  # the default
    _sequence(engine, Reply(body=BAD_DATE), Reply(body=GOOD_DATE))
    r = post()
    assert r.status_code == 502 and r.json()["error"]["code"] == "invalid_structured_output"
    assert NAME not in r.headers and len(engine.chat_calls) == 1
    assert "gateway_regenerations_total" not in post.client.get("/metrics").text


def test_a_valid_first_answer_has_no_header(ask: Callable[..., Any],
                                            engine: FakeEngine) -> None:
    post = ask(regenerate_invalid=2)
    engine.reply = Reply(body=GOOD_DATE)
    r = post()
    assert r.status_code == 200 and NAME not in r.headers and len(engine.chat_calls) == 1


def test_streams_are_not_regenerated(ask: Callable[..., Any], engine: FakeEngine) -> None:
    # validated as relayed: the refusal is the last event, after bytes the client holds
    post = ask(regenerate_invalid=2)
    engine.reply = Reply(events=text_stream('{"due": ', '"2018-02-31"}'))
    r = post(stream=True)
    events, done = sse_json(r.text)
    assert done and events[-1]["error"]["code"] == "invalid_structured_output"
    assert NAME not in r.headers and len(engine.chat_calls) == 1


def test_an_invalid_tool_call_is_regenerated_and_counted_as_invalid(
        ask: Callable[..., Any], engine: FakeEngine, tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    post = ask(regenerate_invalid=1, audit_log=log)
    good = completion(tool_message(("c1", "get_weather", '{"city": "Oslo"}')), "tool_calls")
    bad = completion(tool_message(("c1", "get_weather", '{"city": 5}')), "tool_calls")
    _sequence(engine, Reply(body=bad), Reply(body=good))
    r = post(response_format=None, tools=[WEATHER_TOOL], tool_choice="required")
    assert r.status_code == 200 and r.json() == good and r.headers[NAME] == "1"
    record = _records(log, 1)[0]
    assert (record["tool_calls_valid"], record["tool_calls_invalid"]) == (1, 1)
    metrics = post.client.get("/metrics").text
    assert 'gateway_tool_calls_total{result="invalid"} 1.0' in metrics
    engine.reply = Reply(body=bad)
    r = post(response_format=None, tools=[WEATHER_TOOL], tool_choice="required")
    assert r.status_code == 502 and r.json()["error"]["reason"] == "schema_mismatch"
    assert r.headers[NAME] == "1"


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"seed": 7}])
def test_greedy_or_seeded_requests_are_not_asked_again(
        ask: Callable[..., Any], engine: FakeEngine, sampling: dict[str, Any]) -> None:
    post = ask(regenerate_invalid=2)
    _sequence(engine, Reply(body=BAD_DATE), Reply(body=GOOD_DATE))
    r = post(**sampling)
    assert r.status_code == 502 and r.headers[NAME] == "0" and len(engine.chat_calls) == 1
    assert _metric(post.client, "deterministic") == 1


def test_a_regeneration_is_charged_to_the_callers_tpm(
        ask: Callable[..., Any], engine: FakeEngine) -> None:
    # the request's budget (body / 4 + max_tokens ~ 250) fits the 400 tpm once, not twice
    post = ask(regenerate_invalid=2, default_limits=KeyLimits(tpm=400))
    _sequence(engine, Reply(body=BAD_DATE), Reply(body=GOOD_DATE))
    r = post(max_tokens=200)
    assert r.status_code == 502 and r.json()["error"]["code"] == "invalid_structured_output"
    assert r.headers[NAME] == "0" and len(engine.chat_calls) == 1
    assert _metric(post.client, "quota") == 1


def test_a_regeneration_is_charged_to_the_callers_daily_quota_like_a_request(
        ask: Callable[..., Any], engine: FakeEngine) -> None:
    post = ask(regenerate_invalid=2,
               default_limits=KeyLimits(tokens_per_day=1_000_000))
    ledger = post.gw.state.admission.quotas
    key_id = hashlib.sha256(KEY.encode()).hexdigest()[:8]
    engine.reply = Reply(body=GOOD_DATE)
    assert post(max_tokens=1000).status_code == 200
    one = ledger.used[key_id][0]  # one request: body / 4 + max_tokens
    assert one >= 1000
    _sequence(engine, Reply(body=BAD_DATE), Reply(body=GOOD_DATE))
    r = post(max_tokens=1000)
    assert r.status_code == 200 and r.headers[NAME] == "1"
    twice = ledger.used[key_id][0] - one  # the request and its regeneration
    assert 2 * 1000 <= twice and abs(twice - 2 * one) <= one // 4, (one, twice)


def test_an_engine_failure_on_a_regeneration_keeps_the_validation_refusal(
        ask: Callable[..., Any], engine: FakeEngine) -> None:
    post = ask(regenerate_invalid=2)
    _sequence(engine, Reply(body=BAD_DATE), Reply(status=500, body={"error": "boom"}))
    r = post()
    assert r.status_code == 502 and r.json()["error"]["code"] == "invalid_structured_output"
    assert r.headers[NAME] == "1" and len(engine.chat_calls) == 2
    assert _metric(post.client, "failed") == 1


def test_responses_api_answers_are_regenerated_too(
        ask: Callable[..., Any], engine: FakeEngine) -> None:
    post = ask(regenerate_invalid=1)
    _sequence(engine, Reply(body=BAD_DATE), Reply(body=GOOD_DATE))
    body = {"model": chat_body()["model"], "input": "When is the invoice due?",
            "text": {"format": {"type": "json_schema", "name": "invoice",
                                "schema": DATE_SCHEMA}}}
    r = post.client.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    assert r.headers[NAME] == "1" and "2018-02-28" in r.text


def test_the_policy_bound() -> None:
    assert GatewayLimits().regenerate_invalid == 0
    assert GatewayLimits(regenerate_invalid=MAX_REGENERATIONS).regenerate_invalid == 3
    for bad in (-1, MAX_REGENERATIONS + 1):
        with pytest.raises(pydantic.ValidationError):
            GatewayLimits(regenerate_invalid=bad)


def test_deterministic_reads_the_forwarded_sampling() -> None:
    assert deterministic(b'{"temperature": 0}') and deterministic(b'{"temperature": 0.0}')
    assert deterministic(b'{"seed": 0, "temperature": 1}')
    assert not deterministic(b'{"temperature": 0.7}') and not deterministic(b"{}")
    assert not deterministic(b'{"temperature": false}') and not deterministic(b"[")
