"""Routes added for real clients (issue 11): ``GET /v1/models/{id}``, ``HEAD``, the
documented ``/v1/completions`` 404, ``POST /v1/responses`` with the openai SDK; a property
test over both request checks (the route table itself: test_gateway_structure.py).
"""

from __future__ import annotations

import asyncio
import json

import openai
import pytest
from gw_clients import (
    CALL,
    TOOL_RESULT,
    Person,
    async_client,
    cut_reply,
    responses_text,
    sync_client,
    tool_turn,
)
from gw_fake_engine import MODEL, Reply, chunk, completion
from gw_helpers import AUTH, WEATHER_TOOL, chat_body
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# litellm's and langchain's own pydantic models warn at import; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


# -- 4. routes: /v1/models/{id}, HEAD, /v1/completions, /v1/responses ------------------------
def test_models_retrieve(gateway, engine):
    client = sync_client(gateway)
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError) as info:
        client.models.retrieve("gpt-4o")
    assert info.value.body["code"] == "model_not_found"


def test_head_is_get_without_body(client):
    r = client.head("/health/live")
    assert r.status_code == 200 and r.content == b""
    assert client.head("/v1/models").status_code == 401  # same key rule as GET
    assert client.head("/v1/models", headers=AUTH).status_code == 200
    r = client.get("/v1/responses", headers=AUTH)
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    r = client.post("/health/live")
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"


def test_completions_is_a_documented_404(client, engine):
    r = client.post("/v1/completions", headers=AUTH, json={"model": MODEL, "prompt": "hi"})
    assert r.status_code == 404 and "/v1/chat/completions" in r.json()["error"]["message"]
    assert engine.calls == []


def test_responses_text(gateway, engine):
    engine.reply = responses_text
    client = sync_client(gateway)
    resp = client.responses.create(model=MODEL, input="Say hello", instructions="Be brief.",
                                   max_output_tokens=20, temperature=0)
    assert resp.output_text == "Hello there" and resp.status == "completed"
    assert resp.usage.input_tokens == 10 and resp.usage.output_tokens == 5
    sent = engine.chat_calls[-1]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["body"]["messages"] == [{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "Say hello"}]
    assert sent["body"]["max_tokens"] == 20 and sent["body"]["temperature"] == 0


def test_responses_stream_text(gateway, engine):
    engine.reply = responses_text
    client = sync_client(gateway)
    with client.responses.stream(model=MODEL, input="Say hello") as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert final.output_text == "Hello there" and final.usage.total_tokens == 9
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed" and kinds.count("response.output_text.delta") == 2


def test_responses_function_tool_loop(gateway, engine):
    """``responses.create`` with a tool, then the output items and the tool result sent back
    as input (the Responses agent loop)."""
    engine.reply = tool_turn
    client = sync_client(gateway)
    tool = {"type": "function", "name": "get_weather", "description": "weather",
            "parameters": WEATHER_TOOL["function"]["parameters"], "strict": True}
    first = client.responses.create(model=MODEL, input="Weather in Oslo?", tools=[tool],
                                    tool_choice="required")
    call = next(item for item in first.output if item.type == "function_call")
    assert (call.name, json.loads(call.arguments), call.call_id) == (
        "get_weather", {"city": "Oslo"}, "call-1")
    sent = engine.chat_calls[-1]["body"]
    assert sent["tools"] == [{"type": "function", "function": {
        k: v for k, v in tool.items() if k != "type"}}]
    assert sent["tool_choice"] == "required"
    second = client.responses.create(
        model=MODEL, tools=[tool],
        input=[{"role": "user", "content": "Weather in Oslo?"}, *first.output,
               {"type": "function_call_output", "call_id": call.call_id,
                "output": "sunny, 21 C"}])
    assert second.output_text == "It is sunny in Oslo."
    assert engine.chat_calls[-1]["body"]["messages"][1:] == [
        {"role": "assistant", "content": None, "tool_calls": [CALL]}, TOOL_RESULT]


def test_responses_invalid_tool_call_is_refused(gateway, engine):
    engine.reply = Reply(body=completion({"content": None, "tool_calls": [
        {**CALL, "function": {"name": "get_weather", "arguments": '{"city": 5}'}}]},
        "tool_calls"))
    tool = {"type": "function", "name": "get_weather",
            "parameters": WEATHER_TOOL["function"]["parameters"]}
    with pytest.raises(openai.APIStatusError) as info:
        sync_client(gateway).responses.create(model=MODEL, input="w?", tools=[tool],
                                              tool_choice="required")
    assert info.value.status_code == 502 and info.value.body["code"] == "invalid_tool_call"


def test_responses_stream_with_tool(gateway, engine):
    engine.reply = Reply(events=[
        chunk({"delta": {"role": "assistant", "content": "Checking."}}),
        chunk({"delta": {"tool_calls": [{"index": 0, "id": "call-1", "type": "function",
                                         "function": {"name": "get_weather",
                                                      "arguments": '{"city": '}}]}}),
        chunk({"delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]}}),
        chunk({"delta": {}, "finish_reason": "tool_calls"})])
    tool = {"type": "function", "name": "get_weather",
            "parameters": WEATHER_TOOL["function"]["parameters"]}
    with sync_client(gateway).responses.stream(model=MODEL, input="w?", tools=[tool],
                                                tool_choice="auto") as stream:
        events = list(stream)
        final = stream.get_final_response()
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(done) == 1 and json.loads(done[0].arguments) == {"city": "Oslo"}
    assert [i.type for i in final.output] == ["message", "function_call"]
    assert final.output[0].content[0].text == "Checking."
    # an invalid streamed call: an error event and response.failed, never the call
    engine.reply = Reply(events=[
        chunk({"delta": {"tool_calls": [{"index": 0, "id": "call-1", "type": "function",
                                         "function": {"name": "get_weather",
                                                      "arguments": '{"city": 5}'}}]}}),
        chunk({"delta": {}, "finish_reason": "tool_calls"})])
    stream = sync_client(gateway).responses.create(model=MODEL, input="w?", tools=[tool],
                                                   tool_choice="required", stream=True)
    kinds = [e.type for e in stream]
    assert kinds[-2:] == ["error", "response.failed"]
    assert "response.function_call_arguments.done" not in kinds


def test_responses_structured_output_parse(gateway, engine):
    engine.reply = Reply(body=completion({"content": '{"age": 3, "name": "Ada"}'}))
    client = sync_client(gateway)
    resp = client.responses.parse(model=MODEL, input="a person", text_format=Person)
    assert resp.output_parsed == Person(age=3, name="Ada")
    rf = engine.chat_calls[-1]["body"]["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["name"] == "Person"
    engine.reply = Reply(body=completion({"content": '{"age": "old", "name": "Ada"}'}))
    with pytest.raises(openai.APIStatusError) as info:
        client.responses.parse(model=MODEL, input="a person", text_format=Person)
    assert info.value.body["code"] == "invalid_structured_output"


def test_responses_cut_by_max_tokens_is_incomplete(gateway, engine):
    engine.reply = cut_reply
    tool = {"type": "function", "name": "get_weather",
            "parameters": WEATHER_TOOL["function"]["parameters"]}
    resp = sync_client(gateway).responses.create(model=MODEL, input="w?", tools=[tool],
                                                 tool_choice="required", max_output_tokens=5)
    assert resp.status == "incomplete"
    assert resp.incomplete_details.reason == "max_output_tokens"
    assert resp.output == []  # the cut call is withheld


@pytest.mark.parametrize("extra,param", [
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"store": True}, "store"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input[0].content[0].type"),
    ({"input": [{"type": "reasoning", "summary": []}]}, "input[0].type"),
    ({"guided_json": {}}, "guided_json"),
    ({"text": {"format": {"type": "json_schema", "name": "p", "schema": {
        "type": "array", "uniqueItems": True}}}}, "/text/format/schema"),
])
def test_responses_refusals(client, engine, extra, param):
    body = {"model": MODEL, "input": "hi", **extra}
    r = client.post("/v1/responses", headers=AUTH, json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"].startswith(param), r.json()
    assert engine.chat_calls == []


KEYS = ["type", "role", "content", "name", "call_id", "arguments", "output", "text", "format",
        "schema", "parameters", "function", "id", "status", "annotations", "tool_calls",
        "strict", "json_schema", "tool_call_id", "parsed", "audio", "refusal"]
JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=4)
                    | st.sampled_from(["function", "message", "user", "assistant", "input_text",
                                       "function_call", "function_call_output", "json_schema",
                                       "get_weather", "required", "text", "tool", "object"]),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.sampled_from(KEYS), inner, max_size=5),
                    max_leaves=16)
RESPONSES_FIELDS = ["input", "instructions", "tools", "tool_choice", "text",
                    "max_output_tokens", "metadata", "parallel_tool_calls", "stream", "store"]
CHAT_FIELDS = ["messages", "tools", "tool_choice", "response_format", "n", "stream",
               "stream_options", "parallel_tool_calls"]


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.booleans(), st.data())
def test_any_json_is_answered_or_refused_never_a_crash(chat, data):
    """Property: for any JSON in the accepted fields (messages / input items included), both
    request checks accept or raise a GatewayError that is not a 500 (another exception
    would be a 500 ``internal_error``)."""
    from gw_fake_engine import FakeEngine
    from gw_helpers import make_settings

    from appliance.gateway.chat.request_checks import check_chat_request
    from appliance.gateway.errors import GatewayError
    from appliance.gateway.responses import check_responses_request
    from appliance.gateway.schema.subset import SchemaCache

    fields = CHAT_FIELDS if chat else RESPONSES_FIELDS
    body = data.draw(st.dictionaries(st.sampled_from(fields), JSON, max_size=5))
    items = data.draw(st.lists(st.dictionaries(st.sampled_from(KEYS), JSON, max_size=5),
                               min_size=1, max_size=3))
    body["messages" if chat else "input"] = items
    check = check_chat_request if chat else check_responses_request
    try:
        check(json.dumps(body).encode(), make_settings(FakeEngine()),
              SchemaCache(max_depth=8, max_nodes=256))
    except GatewayError as exc:
        assert 400 <= exc.status < 600 and exc.status != 500


@pytest.mark.parametrize("path,body,param", [
    ("/v1/chat/completions", chat_body(tools=[WEATHER_TOOL], tool_choice={
        "type": "function", "function": {"name": ["get_weather"]}}), "tool_choice"),
    ("/v1/chat/completions", chat_body(messages=[{"role": ["user"], "content": "x"}]),
     "messages[0].role"),
    ("/v1/responses", {"model": MODEL, "input": "w?", "tools": [
        {"type": "function", "name": "get_weather"}], "tool_choice": {
        "type": "function", "name": {"a": 1}}}, "tool_choice"),
    ("/v1/responses", {"model": MODEL, "input": [{"role": ["user"], "content": "x"}]},
     "input[0].role"),
    ("/v1/responses", {"model": MODEL, "input": [{"role": "user", "content": [{"type": []}]}]},
     "input[0].content[0].type"),
])
def test_unhashable_values_are_400_not_500(client, engine, path, body, param):
    """Found while mapping /v1/responses and by the property test above (issue 11): an
    unhashable ``tool_choice`` name or ``role`` crashed the checks (500 internal_error)."""
    r = client.post(path, headers=AUTH, json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_responses_async_tool_loop_and_stream(gateway, engine):
    tool = {"type": "function", "name": "get_weather",
            "parameters": WEATHER_TOOL["function"]["parameters"]}

    async def run() -> tuple[str, str]:
        async with async_client(gateway) as client:
            engine.reply = tool_turn
            first = await client.responses.create(model=MODEL, input="Weather in Oslo?",
                                                  tools=[tool], tool_choice="required")
            call = first.output[0]
            second = await client.responses.create(model=MODEL, tools=[tool], input=[
                {"role": "user", "content": "Weather in Oslo?"}, *first.output,
                {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
            engine.reply = responses_text
            async with client.responses.stream(model=MODEL, input="hi") as stream:
                async for _ in stream:
                    pass
                final = await stream.get_final_response()
            return second.output_text, final.output_text

    assert asyncio.run(run()) == ("It is sunny in Oslo.", "Hello there")
