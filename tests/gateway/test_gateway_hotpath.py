"""The gateway's per-request hot path stays exact and leak-free: the hot-path JSON
(appliance.gateway.fastjson, orjson) keeps every check and value, and a request leaves no
reference cycle for the collector."""

from __future__ import annotations

import json

import pytest
from gw_fake_engine import chunk, completion, tool_message
from gw_helpers import WEATHER_TOOL, chat_body

from appliance.gateway import fastjson
from appliance.gateway.chat.request_checks import check_chat_request
from appliance.gateway.chat.response_checks import check_completion
from appliance.gateway.chat.sse import DONE, StreamRelay
from appliance.gateway.errors import GatewayError
from appliance.gateway.schema.subset import SchemaCache
from appliance.gateway.settings import GatewaySettings

SETTINGS = GatewaySettings(upstream_url="http://127.0.0.1:9", served_model_name="appliance-model",
                           api_keys=["k" * 16], tools_enabled=True)
NAMED = {"tools": [WEATHER_TOOL],
         "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
BIG = 2**70  # orjson neither parses nor serialises integers past 64 bits exactly


def _req(**extra):
    body = json.dumps(chat_body(**extra)).encode()
    return check_chat_request(body, SETTINGS, SchemaCache())


def _sse(*events) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + DONE


def _call_events(args: str, created: int = 1764400000):
    head = chunk({"delta": {"tool_calls": [{"index": 0, "id": "call-1", "type": "function",
                                            "function": {"name": "get_weather",
                                                         "arguments": ""}}]}})
    events = [chunk({"delta": {"role": "assistant", "content": ""}}), head]
    events += [chunk({"delta": {"tool_calls": [{"index": 0, "function": {"arguments": part}}]}})
               for part in (args[:5], args[5:])]
    events.append(chunk({"delta": {}, "finish_reason": "tool_calls"}))
    for e in events:
        e["created"] = created
    return events


def _payloads(out: bytes):
    return [p[6:] for p in out.split(b"\n\n") if p.startswith(b"data: ")]


def test_dumps_falls_back_to_the_stdlib_exactly():
    assert fastjson.dumps({"a": "é", "n": BIG}) == '{"a":"é","n":1180591620717411303424}'.encode()
    with pytest.raises(UnicodeEncodeError):
        fastjson.dumps({"a": "\ud800"})


def test_canonical_key_equal_for_equal_values_distinct_otherwise():
    assert fastjson.canonical({"b": 1, "a": [1, 2]}) == fastjson.canonical({"a": [1, 2], "b": 1})
    assert fastjson.canonical({"a": 1}) != fastjson.canonical({"a": 1.0})
    assert fastjson.canonical({"m": BIG}) != fastjson.canonical({"m": BIG + 1})


def test_forwarded_body_keeps_big_integers_and_refuses_lone_surrogates():
    schema = {"type": "object", "properties": {"n": {"type": "integer", "maximum": BIG}}}
    tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
    req = _req(tools=[tool])
    assert json.loads(req.body)["tools"][0]["function"]["parameters"]["properties"]["n"][
        "maximum"] == BIG
    with pytest.raises(GatewayError) as err:
        check_chat_request(b'{"messages": [{"role": "user", "content": "\\ud800"}]}', SETTINGS,
                           SchemaCache())
    assert err.value.code == "invalid_json"


def test_engine_event_with_nan_is_refused_not_relayed():
    relay = StreamRelay(_req(stream=True), SETTINGS)
    bad = b'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m",' \
          b'"choices":[{"index":0,"delta":{"content":"hi"},"logprobs":NaN,' \
          b'"finish_reason":null}]}\n\n'
    out = relay.feed(bad + DONE)
    assert relay.done and relay.error is not None and relay.error.code == "upstream_error"
    assert b"hi" not in out and out.endswith(DONE)


def test_released_call_keeps_a_big_created_exact():
    relay = StreamRelay(_req(stream=True, **NAMED), SETTINGS)
    out = relay.feed(_sse(*_call_events('{"city": "Oslo"}', created=BIG)))
    assert relay.clean and relay.valid_calls == 1
    events = [json.loads(p) for p in _payloads(out) if p != b"[DONE]"]
    released = [e for e in events if e["choices"][0]["delta"].get("tool_calls")]
    assert len(released) == 1 and released[0]["created"] == BIG
    assert all(e["created"] == BIG for e in events)


def test_one_read_with_many_events_is_one_output_ending_in_done():
    """Every event of one upstream read comes back as one block (one ASGI send)."""
    relay = StreamRelay(_req(stream=True, **NAMED), SETTINGS)
    out = relay.feed(_sse(*_call_events('{"city": "Oslo"}')))
    assert relay.clean and out.endswith(DONE)
    events = [json.loads(p) for p in _payloads(out) if p != b"[DONE]"]
    assert [bool(e["choices"][0]["delta"].get("tool_calls")) for e in events] == [
        False, True, False]


@pytest.mark.parametrize("args", ['{"city": 3}', '{"city": "Oslo"', '{"city": "a", "city": "b"}'])
def test_invalid_call_in_one_coalesced_read_is_refused(args):
    relay = StreamRelay(_req(stream=True, **NAMED), SETTINGS)
    out = relay.feed(_sse(*_call_events(args)))
    assert relay.error is not None and relay.error.code == "invalid_tool_call"
    assert relay.valid_calls == 0 and b"call-1" not in out and out.endswith(DONE)


def test_cut_choice_is_reserialised_exactly():
    req = _req(**NAMED)
    body = completion(tool_message(("call-1", "get_weather", '{"city": "Os')), "length")
    body["usage"] = {"prompt_tokens": BIG, "completion_tokens": 1, "total_tokens": BIG + 1}
    checked = check_completion(json.dumps(body).encode(), req, 1 << 16)
    out = json.loads(checked.body)
    assert checked.withheld == 1 and out["usage"]["prompt_tokens"] == BIG
    assert out["choices"][0]["message"]["content"] is None
    assert "tool_calls" not in out["choices"][0]["message"]


def test_engine_answer_with_nan_is_refused():
    raw = json.dumps(completion({"content": "x"})).encode().replace(b'"x"', b"NaN")
    with pytest.raises(GatewayError) as err:
        check_completion(raw, _req(), 1 << 16)
    assert err.value.code == "upstream_error"


def _request_garbage(client, engine, stream: bool) -> list[str]:
    """Type names of request-scoped objects only the cycle collector would free, after
    20 requests with the collector off."""
    import gc
    import time

    from gw_fake_engine import Reply
    from gw_helpers import AUTH

    if stream:
        engine.reply = Reply(events=_call_events('{"city": "Oslo"}'))
    else:
        engine.reply = Reply(body=completion(tool_message(("c1", "get_weather",
                                                           '{"city": "Oslo"}')), "tool_calls"))
    client.post("/v1/chat/completions", headers=AUTH, json=chat_body(stream=stream, **NAMED))
    gc.collect()
    gc.disable()
    try:
        for _ in range(20):
            r = client.post("/v1/chat/completions", headers=AUTH,
                            json=chat_body(stream=stream, **NAMED))
            assert r.status_code == 200 and (not stream or r.text.endswith("[DONE]\n\n"))
        time.sleep(0.2)  # the gateway thread finishes its bookkeeping
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        names = [type(o).__qualname__ for o in gc.garbage]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    scoped = {"RequestResponseCycle", "_DisconnectWatch", "RequestInfo", "Ticket"}
    return [n for n in names if n in scoped]


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_leaves_no_reference_cycle(client, engine, stream):
    """The disconnect watcher's cancelled task once kept each request's scope, uvicorn
    cycle and ticket in a reference cycle (~60 us of collector time per request)."""
    assert _request_garbage(client, engine, stream) == []


def test_event_too_deep_for_the_stdlib_is_refused_not_a_crash():
    """orjson parses ~1000 levels the stdlib cannot re-parse: an event that must be
    re-serialised is then refused as upstream_error, never an exception."""
    relay = StreamRelay(_req(stream=True, **NAMED), SETTINGS)
    deep = "[" * 1000 + "]" * 1000
    event = (b'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m",'
             b'"choices":[{"index":0,"delta":{"content":"hi","tool_calls":[],"x":'
             + deep.encode() + b'},"logprobs":null,"finish_reason":null}]}\n\n')
    out = relay.feed(event + DONE)
    assert relay.done and relay.error is not None and relay.error.code == "upstream_error"
    assert out.endswith(DONE)


def test_cut_answer_too_deep_for_the_stdlib_is_refused_not_a_crash():
    body = completion(tool_message(("call-1", "get_weather", '{"city": "Os')), "length")
    raw = json.dumps(body).encode().replace(b'"logprobs": null',
                                            b'"logprobs": ' + b"[" * 1000 + b"]" * 1000)
    with pytest.raises(GatewayError) as err:
        check_completion(raw, _req(**NAMED), 1 << 16)
    assert err.value.code == "upstream_error"
