"""Tool-call and structured-output validation of engine answers (non-stream and stream)."""

from __future__ import annotations

import copy
import json

import pytest
from gw_fake_engine import Reply, chunk, completion, text_stream, tool_message
from gw_helpers import AUTH, WEATHER_TOOL, chat_body, sse_json, sse_payloads

from appliance.gateway.chat.request_checks import check_chat_request
from appliance.gateway.chat.sse import StreamRelay
from appliance.gateway.schema.subset import SchemaCache
from appliance.gateway.settings import GatewaySettings

REQUIRED = {"tools": [WEATHER_TOOL], "tool_choice": "required"}
NAMED = {"tools": [WEATHER_TOOL],
         "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}


def post(client, **extra):
    return client.post("/v1/chat/completions", headers=AUTH, json=chat_body(**extra))


def test_valid_tool_call_passes_through_unchanged(client, engine):
    answer = completion(tool_message(("c1", "get_weather", '{"city": "Oslo", "unit": "c"}')),
                        "tool_calls")
    engine.reply = Reply(body=answer)
    r = post(client, **REQUIRED)
    assert r.status_code == 200
    assert r.json() == answer


@pytest.mark.parametrize("calls,reason", [
    ([("c1", "get_weather", '{"city": 5}')], "schema_mismatch"),
    ([("c1", "get_weather", '{"unit": "c"}')], "schema_mismatch"),
    ([("c1", "get_weather", '{"city": "Oslo", "extra": 1}')], "schema_mismatch"),
    ([("c1", "get_weather", '{"city": "Oslo"')], "bad_json"),
    ([("c1", "get_weather", "")], "bad_json"),
    ([("c1", "get_weather", "false")], "bad_json"),
    ([("c1", "get_weather", '{"city": "a", "city": "b"}')], "bad_json"),
    ([("c1", "get_weather", '{"city": NaN}')], "bad_json"),
    ([("c1", "delete_everything", '{"city": "Oslo"}')], "unknown_function"),
    ([("", "get_weather", '{"city": "Oslo"}')], "missing_id"),
    ([("c1", "get_weather", '{"city": "Oslo"}'), ("c1", "get_weather", '{"city": "Lima"}')],
     "duplicate_id"),
    ([], "missing_call"),
])
def test_invalid_tool_calls_are_502(client, engine, calls, reason):
    message = tool_message(*calls) if calls else {"content": "no call, sorry"}
    engine.reply = Reply(body=completion(message, "tool_calls" if calls else "stop"))
    r = post(client, **REQUIRED)
    assert r.status_code == 502, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_tool_call" and err["reason"] == reason
    assert "tool_calls" not in r.text


def test_calls_refused_when_tool_choice_none_or_no_tools(client, engine):
    engine.reply = Reply(body=completion(tool_message(("c1", "get_weather", '{"city": "x"}'))))
    r = post(client, tools=[WEATHER_TOOL], tool_choice="none")
    assert r.status_code == 502 and r.json()["error"]["reason"] == "calls_not_allowed"
    r = post(client)
    assert r.status_code == 502 and r.json()["error"]["reason"] == "calls_not_allowed"


def test_named_tool_choice_enforced(client, engine):
    other = {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {}}}}
    engine.reply = Reply(body=completion(tool_message(("c1", "get_time", "{}"))))
    r = post(client, tools=[WEATHER_TOOL, other], tool_choice=NAMED["tool_choice"])
    assert r.status_code == 502 and r.json()["error"]["reason"] == "wrong_function"


def test_tool_choice_auto_allows_plain_text(client, engine):
    engine.reply = Reply(body=completion({"content": "It is sunny."}))
    r = post(client, tools=[WEATHER_TOOL], tool_choice="auto")
    assert r.status_code == 200


def test_parallel_tool_calls_flag(client, engine):
    """Public bug parallel-tool-calls-flag (sglang PR#37157, dynamo PR#7914)."""
    calls = [("c1", "get_weather", '{"city": "Oslo"}'), ("c2", "get_weather", '{"city": "Lima"}'),
             ("c3", "get_weather", '{"city": "Pune"}')]
    engine.reply = Reply(body=completion(tool_message(*calls), "tool_calls"))
    r = post(client, parallel_tool_calls=False, **REQUIRED)
    assert r.status_code == 502
    assert r.json()["error"]["code"] == "invalid_tool_call"
    assert r.json()["error"]["reason"] == "parallel_disabled"
    assert engine.chat_calls[-1]["body"]["parallel_tool_calls"] is False  # flag forwarded
    engine.reply = Reply(body=completion(tool_message(*calls[:1]), "tool_calls"))
    assert post(client, parallel_tool_calls=False, **REQUIRED).status_code == 200
    engine.reply = Reply(body=completion(tool_message(*calls), "tool_calls"))
    r = post(client, parallel_tool_calls=True, **REQUIRED)
    assert r.status_code == 200
    got = r.json()["choices"][0]["message"]["tool_calls"]
    assert [json.loads(c["function"]["arguments"])["city"] for c in got] == ["Oslo", "Lima",
                                                                             "Pune"]
    assert len({c["id"] for c in got}) == 3
    assert engine.chat_calls[-1]["body"]["parallel_tool_calls"] is True
    # streamed: three calls, indexes 0..2, all released; with the flag off -> error event
    deltas = [chunk({"delta": {"tool_calls": [{"index": i, "id": cid, "type": "function",
                                               "function": {"name": n, "arguments": a}}]}})
              for i, (cid, n, a) in enumerate(calls)]
    engine.reply = Reply(events=[*deltas, chunk({"delta": {}, "finish_reason": "tool_calls"})])
    events, done = sse_json(post(client, stream=True, parallel_tool_calls=True, **REQUIRED).text)
    released = [tc for e in events for tc in e["choices"][0]["delta"].get("tool_calls") or []]
    assert done and [tc["index"] for tc in released] == [0, 1, 2]
    events, done = sse_json(post(client, stream=True, parallel_tool_calls=False, **REQUIRED).text)
    assert done and events[-1]["error"]["reason"] == "parallel_disabled"
    assert not any(e.get("choices") and e["choices"][0]["delta"].get("tool_calls")
                   for e in events)


def test_truncated_constrained_json(client, engine):
    """Public bug truncated-constrained-json (vllm-project/vllm#8350, instructor#276).

    Since issue 11 the answer is OpenAI's (200, ``finish_reason: "length"``) instead of the
    case's original 422, so SDKs raise their own length errors; what the case guards still
    holds: a cut call is never returned in ``tool_calls`` and ``length`` is never rewritten.
    """
    person = {"type": "function", "function": {"name": "save_person", "parameters": {
        "type": "object", "properties": {"age": {"type": "integer"},
                                         "description": {"type": "string", "minLength": 40}},
        "required": ["age", "description"]}}}
    cut = '{"age": 3, "description": "a'
    named = {"type": "function", "function": {"name": "save_person"}}
    # (a) engine returns the cut call in tool_calls; (b) vLLM's real shape: no tool_calls,
    # the partial call left in content
    for message in (tool_message(("c1", "save_person", cut)),
                    {"content": "<tool_call>" + cut}):
        engine.reply = Reply(body=completion(message, "length"))
        r = post(client, max_tokens=6, tools=[person], tool_choice=named)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "length"
        assert choice["message"]["content"] is None and "tool_calls" not in choice["message"]
        assert "save_person" not in r.text and '"age"' not in r.text
    schema = {"type": "object", "properties": {"age": {"type": "integer"},
                                               "description": {"type": "string"}},
              "required": ["age", "description"]}
    rf = {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}
    engine.reply = Reply(events=text_stream('{"age": 3, ', '"descr', finish="length"))
    r = post(client, max_tokens=5, stream=True, response_format=rf)
    events, done = sse_json(r.text)
    assert done and not any("error" in e for e in events)
    finishes = [e["choices"][0]["finish_reason"] for e in events if e.get("choices")]
    assert finishes[-1] == "length"  # kept, never rewritten to "stop"
    # non-stream structured output cut by length: the partial text, marked "length"
    engine.reply = Reply(body=completion({"content": '{"age": 3, "descr'}, "length"))
    r = post(client, max_tokens=5, response_format=rf)
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length"
    assert r.json()["choices"][0]["message"]["content"] == '{"age": 3, "descr'
    # plain text cut by length is a normal answer
    engine.reply = Reply(body=completion({"content": "Once upon a"}, "length"))
    assert post(client, max_tokens=3).status_code == 200


def test_cut_tool_call_in_stream_is_withheld(client, engine):
    deltas = [chunk({"delta": {"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                               "function": {"name": "get_weather",
                                                            "arguments": ""}}]}}),
              chunk({"delta": {"tool_calls": [{"index": 0,
                                               "function": {"arguments": '{"city": "Os'}}]}}),
              chunk({"delta": {}, "finish_reason": "length"})]
    engine.reply = Reply(events=deltas)
    events, done = sse_json(post(client, stream=True, **REQUIRED).text)
    assert done and not any("error" in e for e in events)
    assert not any(e["choices"][0]["delta"].get("tool_calls") for e in events)
    assert events[-1]["choices"][0]["finish_reason"] == "length"


def test_structured_output_is_validated(client, engine):
    schema = {"type": "object", "properties": {"age": {"type": "integer"}},
              "required": ["age"], "additionalProperties": False}
    rf = {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}
    engine.reply = Reply(body=completion({"content": '{"age": "old"}'}))
    r = post(client, response_format=rf)
    assert r.status_code == 502 and r.json()["error"]["code"] == "invalid_structured_output"
    engine.reply = Reply(body=completion({"content": '{"age": 30}'}))
    assert post(client, response_format=rf).status_code == 200
    engine.reply = Reply(events=text_stream('{"age": ', '"x"}'))
    events, done = sse_json(post(client, stream=True, response_format=rf).text)
    assert done and events[-1]["error"]["code"] == "invalid_structured_output"
    engine.reply = Reply(body=completion({"content": "[1, 2]"}))
    r = post(client, response_format={"type": "json_object"})
    assert r.status_code == 502


# The chaos campaign (tests/e2e/test_e2e_chaos.py, issue 7) on the real CPU engine: a
# json_object answer at frequency_penalty -1.99 repeated a key ('{"name": ..., "age": "33",
# "age": "33", ...}'); the grammar cannot forbid that and the gateway answered 502.
CHAOS_REPEATED_KEY = '{\n  "name": "SofiaBergman", "age": "33", "age": "33", "age": "33 "\n}'


def test_chaos_json_object_with_a_repeated_key_is_relayed_unchanged(client, engine):
    engine.reply = Reply(body=completion({"content": CHAOS_REPEATED_KEY}))
    r = post(client, response_format={"type": "json_object"})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == CHAOS_REPEATED_KEY
    engine.reply = Reply(events=text_stream(CHAOS_REPEATED_KEY[:20], CHAOS_REPEATED_KEY[20:]))
    events, done = sse_json(post(client, stream=True, response_format={"type": "json_object"}
                                 ).text)
    assert done and not any("error" in e for e in events)
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events
                   if e.get("choices")) == CHAOS_REPEATED_KEY


@pytest.mark.parametrize("content", ['{"a": NaN}', '{"a": 1} x', '{"a": {"b": 1, "b": 2}',
                                     '[{"a": 1, "a": 2}]'])
def test_json_object_answers_stay_strict_apart_from_repeated_keys(client, engine, content):
    engine.reply = Reply(body=completion({"content": content}))
    r = post(client, response_format={"type": "json_object"})
    assert r.status_code == 502 and r.json()["error"]["code"] == "invalid_structured_output"


def test_json_schema_answer_with_a_repeated_key_is_refused(client, engine):
    # first-wins readers see 30 (valid), last-wins readers "old" (invalid): no verdict holds
    schema = {"type": "object", "properties": {"age": {"type": "integer"}},
              "required": ["age"]}
    rf = {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}
    for content in ('{"age": 30, "age": "old"}', '{"age": 30, "age": 31}'):
        engine.reply = Reply(body=completion({"content": content}))
        r = post(client, response_format=rf)
        assert r.status_code == 502, content
        assert "duplicate key 'age'" in r.json()["error"]["message"]


# -- streaming reassembly --------------------------------------------------------------------

TRANSCRIPTS = {
    "T1_args_never_sent": [
        {"delta": {"role": "assistant"}},
        {"delta": {"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                   "function": {"name": "get_weather", "arguments": ""}}]}},
        {"delta": {}, "finish_reason": "tool_calls"}],
    "T2_unicode_duplicated": [
        {"delta": {"tool_calls": [{"index": 0, "id": "call_b", "type": "function", "function": {
            "name": "get_weather", "arguments": "{\"city\": \"S\\u00e3o Paulo\"}"}}]}},
        {"delta": {"tool_calls": [{"index": 0, "function": {
            "arguments": "{\"city\": \"S\u00e3o Paulo\"}"}}]}},
        {"delta": {}, "finish_reason": "tool_calls"}],
    "T3_valid_fragmented": [
        {"delta": {"tool_calls": [{"index": 0, "id": "call_c", "type": "function",
                                   "function": {"name": "get_weather", "arguments": "{\"ci"}}]}},
        {"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "ty\": \"\u6771"}}]}},
        {"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\u4eac \\\"mi"}}]}},
        {"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "nato\\\"\"}"}}]}},
        {"delta": {}, "finish_reason": "tool_calls"}],
    "T4_finish_chunk_without_id": [
        {"delta": {"tool_calls": [{"index": 0, "id": "call_d", "type": "function",
                                   "function": {"name": "get_weather",
                                                "arguments": "{\"city\": "}}]}},
        {"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"Oslo\"}"}}]},
         "finish_reason": "tool_calls"}],
}
EXPECTED = {"T3_valid_fragmented": ("call_c", {"city": "\u6771\u4eac \"minato\""}),
            "T4_finish_chunk_without_id": ("call_d", {"city": "Oslo"})}


def _released(events):
    return [tc for e in events if e.get("choices")
            for tc in e["choices"][0]["delta"].get("tool_calls") or []]


@pytest.mark.parametrize("name", sorted(TRANSCRIPTS))
def test_stream_tool_delta_reassembly(client, engine, name):
    """Public bug stream-tool-delta-reassembly (sglang PR#32167, vLLM PR#31438/#13826)."""
    engine.reply = Reply(events=[chunk(c) for c in TRANSCRIPTS[name]])
    r = post(client, stream=True, **NAMED)
    assert r.status_code == 200
    events, done = sse_json(r.text)
    assert done
    released = _released(events)
    if name in EXPECTED:
        call_id, args = EXPECTED[name]
        assert len(released) == 1  # one id, one name, complete arguments per index
        (call,) = released
        assert call["index"] == 0 and call["id"] == call_id and call["type"] == "function"
        assert call["function"]["name"] == "get_weather"
        assert json.loads(call["function"]["arguments"]) == args
        assert "\\u" not in call["function"]["arguments"]
        assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"
        assert not any("error" in e for e in events)
    else:
        assert released == []  # never an empty or duplicated call presented as valid
        errors = [e for e in events if "error" in e]
        assert len(errors) == 1 and errors[0] is events[-1]
        assert errors[0]["error"]["code"] == "invalid_tool_call"


def _relay_output(events, split):
    settings = GatewaySettings(upstream_url="http://127.0.0.1:9",
                               served_model_name="appliance-model",
                               api_keys=["k" * 16], tools_enabled=True)
    req = check_chat_request(json.dumps(chat_body(stream=True, **NAMED)).encode(), settings,
                             SchemaCache())
    relay = StreamRelay(req, settings)
    data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    data += b"data: [DONE]\n\n"
    out = b"".join(relay.feed(data[i:i + split]) for i in range(0, len(data), split))
    return out + relay.close()


@pytest.mark.parametrize("name", sorted(TRANSCRIPTS))
def test_relay_output_does_not_depend_on_read_boundaries(name):
    events = [chunk(c) for c in TRANSCRIPTS[name]]
    whole = _relay_output(events, 1 << 20)
    for split in (1, 2, 3, 7, 64):
        assert _relay_output(events, split) == whole


def test_relay_refuses_a_boolean_index():
    """JSON ``true`` is not an index (Python's ``bool`` is an ``int``): a tool-call delta
    at ``"index": true`` is a malformed call, never released as call 1."""
    events = copy.deepcopy([chunk(c) for c in TRANSCRIPTS["T3_valid_fragmented"]])
    for event in events[:-1]:  # the whole call at index true: id, name, arguments
        event["choices"][0]["delta"]["tool_calls"][0]["index"] = True
    out = _relay_output(events, 1 << 20).decode()
    payloads = [json.loads(p) for p in sse_payloads(out) if p != "[DONE]"]
    assert payloads[-1]["error"]["code"] == "invalid_tool_call"
    assert _released(payloads) == []


def test_stream_without_done_or_finish_is_an_error(client, engine):
    engine.reply = Reply(events=[chunk(TRANSCRIPTS["T3_valid_fragmented"][0])], done=False)
    events, done = sse_json(post(client, stream=True, **NAMED).text)
    assert done and events[-1]["error"]["code"] == "upstream_error"
    assert _released(events) == []
    engine.reply = Reply(events=[chunk(TRANSCRIPTS["T3_valid_fragmented"][0])])
    events, done = sse_json(post(client, stream=True, **NAMED).text)
    assert done and events[-1]["error"]["code"] == "upstream_error"


def test_stream_empty_delta_after_finish_is_tolerated_but_content_is_not(client, engine):
    events = text_stream("ok")
    engine.reply = Reply(events=[*events, chunk({"delta": {}})])
    got, done = sse_json(post(client, stream=True).text)
    assert done and not any("error" in e for e in got)
    engine.reply = Reply(events=[*events, chunk({"delta": {"content": "late"}})])
    got, done = sse_json(post(client, stream=True).text)
    assert done and got[-1]["error"]["code"] == "upstream_error"
