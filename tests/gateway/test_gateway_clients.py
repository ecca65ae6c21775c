"""Real OpenAI clients against the gateway and the fake engine (issue 11): agent loops that
send the assistant message back, truncation as each SDK expects it, ``n``, and the routes
``GET /v1/models/{id}`` and ``POST /v1/responses``.

Libraries: openai (sync and async), langchain-openai, litellm (``LITELLM_LOCAL_MODEL_COST_MAP``
keeps it offline). instructor is not used: 1.17 pins openai<3.4 and would downgrade the
project's openai 3.57.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import openai
import pytest
from gw_fake_engine import MODEL, Reply, chunk, completion, text_stream
from gw_helpers import AUTH, KEY, WEATHER_TOOL, chat_body, sse_json
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# litellm's and langchain's own pydantic models warn at import; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

# What vLLM 0.32 answers: every response-only field present, null ones included.
VLLM_FIELDS = {"refusal": None, "annotations": None, "audio": None, "function_call": None,
               "reasoning": None}
CALL = {"id": "call-1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
CLEAN_ASSISTANT = {"role": "assistant", "tool_calls": [CALL]}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call-1", "content": "sunny, 21 C"}


def tool_turn(body: Any) -> Reply:
    """Turn 1 answers with a call, turn 2 (after a tool result) with text."""
    if body["messages"][-1]["role"] == "tool":
        return Reply(body=completion({"content": "It is sunny in Oslo.", **VLLM_FIELDS}))
    return Reply(body=completion({"content": None, "tool_calls": [CALL], **VLLM_FIELDS},
                                 "tool_calls"))


def sync_client(gateway: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=KEY, max_retries=0, timeout=10)


def async_client(gateway: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key=KEY, max_retries=0,
                              timeout=10)


def forwarded_history(engine: Any) -> dict[str, Any]:
    """The assistant message the engine received on the last turn."""
    message: dict[str, Any] = engine.chat_calls[-1]["body"]["messages"][1]
    return message


# -- 1. agent loops: the assistant message goes back ---------------------------------------
def test_openai_sync_agent_loop_appends_choice_message(gateway, engine):
    engine.reply = tool_turn
    client = sync_client(gateway)
    messages: list[Any] = [{"role": "user", "content": "Weather in Oslo?"}]
    first = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER_TOOL])
    messages.append(first.choices[0].message)
    messages.append(TOOL_RESULT)
    second = client.chat.completions.create(model=MODEL, messages=messages,
                                            tools=[WEATHER_TOOL])
    assert second.choices[0].message.content == "It is sunny in Oslo."
    sent = engine.chat_calls[-1]["body"]
    assert {"annotations", "audio", "function_call"} <= set(
        first.choices[0].message.model_dump(exclude_unset=True))  # the SDK echoes them...
    assert forwarded_history(engine) == {**CLEAN_ASSISTANT, "content": None}  # ...we drop
    assert sent["messages"][2] == TOOL_RESULT


def test_openai_async_agent_loop_appends_choice_message(gateway, engine):
    engine.reply = tool_turn

    async def run() -> str | None:
        async with async_client(gateway) as client:
            messages: list[Any] = [{"role": "user", "content": "Weather in Oslo?"}]
            first = await client.chat.completions.create(model=MODEL, messages=messages,
                                                         tools=[WEATHER_TOOL])
            messages += [first.choices[0].message, TOOL_RESULT]
            second = await client.chat.completions.create(model=MODEL, messages=messages,
                                                          tools=[WEATHER_TOOL])
            return second.choices[0].message.content

    assert asyncio.run(run()) == "It is sunny in Oslo."
    assert forwarded_history(engine) == {**CLEAN_ASSISTANT, "content": None}


def test_openai_parse_echo_drops_parsed_fields(gateway, engine):
    """After ``parse()`` the SDK's message carries ``parsed`` and, per tool call,
    ``function.parsed_arguments``; both are dropped."""
    class Weather(BaseModel):
        city: str

    engine.reply = tool_turn
    client = sync_client(gateway)
    tool = openai.pydantic_function_tool(Weather, name="get_weather")
    messages: list[Any] = [{"role": "user", "content": "Weather in Oslo?"}]
    first = client.chat.completions.parse(model=MODEL, messages=messages, tools=[tool])
    assert first.choices[0].message.tool_calls[0].function.parsed_arguments == Weather(
        city="Oslo")
    messages += [first.choices[0].message, TOOL_RESULT]
    second = client.chat.completions.create(model=MODEL, messages=messages, tools=[tool])
    assert second.choices[0].finish_reason == "stop"
    assert forwarded_history(engine) == {**CLEAN_ASSISTANT, "content": None}


def test_litellm_completion_loop(gateway, engine):
    """litellm echoes ``provider_specific_fields``; it is dropped."""
    litellm = pytest.importorskip("litellm")
    engine.reply = tool_turn
    kw = {"model": f"openai/{MODEL}", "api_base": gateway.url + "/v1", "api_key": KEY,
          "tools": [WEATHER_TOOL], "num_retries": 0}
    messages: list[Any] = [{"role": "user", "content": "Weather in Oslo?"}]
    first = litellm.completion(messages=messages, **kw)
    messages += [first.choices[0].message, TOOL_RESULT]
    second = litellm.completion(messages=messages, **kw)
    assert second.choices[0].message.content == "It is sunny in Oslo."
    assert forwarded_history(engine) == CLEAN_ASSISTANT


def test_langchain_bind_tools_agent_loop(gateway, engine):
    lc = pytest.importorskip("langchain_openai")
    from langchain_core.messages import HumanMessage, ToolMessage

    engine.reply = tool_turn
    llm = lc.ChatOpenAI(model=MODEL, base_url=gateway.url + "/v1", api_key=KEY,
                        max_retries=0).bind_tools([WEATHER_TOOL])
    history: list[Any] = [HumanMessage("Weather in Oslo?")]
    ai = llm.invoke(history)
    assert ai.tool_calls[0]["args"] == {"city": "Oslo"}
    history += [ai, ToolMessage("sunny, 21 C", tool_call_id="call-1")]
    assert llm.invoke(history).content == "It is sunny in Oslo."
    assert forwarded_history(engine) == {**CLEAN_ASSISTANT, "content": None}


# -- the field table, one row at a time ------------------------------------------------------
def _assistant(**fields: Any) -> dict[str, Any]:
    return chat_body(messages=[{"role": "user", "content": "hi"},
                               {"role": "assistant", "content": "hello", **fields},
                               {"role": "user", "content": "again"}])


@pytest.mark.parametrize("fields", [
    {"annotations": None}, {"annotations": []}, {"audio": None}, {"function_call": None},
    {"refusal": None}, {"refusal": ""}, {"parsed": {"city": "Oslo"}}, {"parsed": None},
    {"provider_specific_fields": None}, {"provider_specific_fields": {"reasoning": None}},
    {"tool_calls": None}, {"tool_calls": []}, {"name": None}, {"reasoning": None},
    {"reasoning_content": None},
])
def test_echo_fields_are_dropped_not_forwarded(client, engine, fields):
    r = client.post("/v1/chat/completions", headers=AUTH, json=_assistant(**fields))
    assert r.status_code == 200, r.text
    assert forwarded_history(engine) == {"role": "assistant", "content": "hello"}


@pytest.mark.parametrize("fields,kept", [
    ({"refusal": "I cannot."}, {"refusal": "I cannot."}),
    ({"name": "bot"}, {"name": "bot"}),
    ({"reasoning": "think"}, {"reasoning": "think"}),
    ({"tool_calls": [{**CALL, "index": 0, "function": {**CALL["function"],
                                                       "parsed_arguments": {"city": "Oslo"}}}]},
     {"tool_calls": [CALL]}),
])
def test_generation_fields_are_forwarded(client, engine, fields, kept):
    r = client.post("/v1/chat/completions", headers=AUTH, json=_assistant(**fields))
    assert r.status_code == 200, r.text
    assert forwarded_history(engine) == {"role": "assistant", "content": "hello", **kept}


@pytest.mark.parametrize("fields,param", [
    ({"audio": {"id": "audio-1"}}, "messages[1].audio"),
    ({"function_call": {"name": "f", "arguments": "{}"}}, "messages[1].function_call"),
    ({"annotations": [{"type": "url_citation"}]}, "messages[1].annotations"),
    ({"provider_specific_fields": "x"}, "messages[1].provider_specific_fields"),
    ({"tool_calls": [{**CALL, "extra": 1}]}, "messages[1].tool_calls[0].extra"),
    ({"chat_template": "x"}, "messages[1].chat_template"),
])
def test_fields_that_would_change_generation_are_refused(client, engine, fields, param):
    r = client.post("/v1/chat/completions", headers=AUTH, json=_assistant(**fields))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "forbidden_parameter" and err["param"] == param
    assert engine.chat_calls == []


def test_response_only_fields_refused_on_user_messages(client, engine):
    body = chat_body(messages=[{"role": "user", "content": "hi", "annotations": None}])
    r = client.post("/v1/chat/completions", headers=AUTH, json=body)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "messages[0].annotations"


# -- 2. truncation as OpenAI answers it -----------------------------------------------------
class Person(BaseModel):
    age: int
    name: str


CUT_JSON = '{"age": 3, "na'
CUT_CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Os'  # vLLM's shape


def cut_reply(body: Any) -> Reply:
    """What vLLM answers when max_tokens cuts: the partial text in content, "length"."""
    forced = body.get("tool_choice") not in (None, "auto", "none")
    return Reply(body=completion({"content": CUT_CALL if forced else CUT_JSON, **VLLM_FIELDS},
                                 "length"))


def cut_call_stream() -> Reply:
    return Reply(events=[
        chunk({"delta": {"role": "assistant", "content": ""}}),
        chunk({"delta": {"tool_calls": [{"index": 0, "id": "call-1", "type": "function",
                                         "function": {"name": "get_weather",
                                                      "arguments": '{"city": "Os'}}]}}),
        chunk({"delta": {}, "finish_reason": "length"})])


def test_openai_parse_cut_structured_output_raises_length_error(gateway, engine):
    engine.reply = cut_reply
    with pytest.raises(openai.LengthFinishReasonError):
        sync_client(gateway).chat.completions.parse(
            model=MODEL, messages=[{"role": "user", "content": "a person"}],
            response_format=Person, max_tokens=5)


def test_openai_parse_cut_tool_call_raises_length_error_and_is_never_a_call(gateway, engine):
    engine.reply = cut_reply
    client = sync_client(gateway)
    tool = openai.pydantic_function_tool(Person, name="get_weather")
    with pytest.raises(openai.LengthFinishReasonError) as info:
        client.chat.completions.parse(
            model=MODEL, messages=[{"role": "user", "content": "a person"}], tools=[tool],
            tool_choice="required", max_tokens=5)
    message = info.value.completion.choices[0].message
    assert message.tool_calls is None and message.content is None
    plain = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "a person"}], tools=[WEATHER_TOOL],
        tool_choice="required", max_tokens=5)
    assert plain.choices[0].finish_reason == "length"
    assert plain.choices[0].message.tool_calls is None


def test_openai_stream_cut_structured_output_raises_length_error(gateway, engine):
    engine.reply = Reply(events=text_stream('{"age": 3, ', '"na', finish="length"))
    client = sync_client(gateway)
    with pytest.raises(openai.LengthFinishReasonError):  # raised while iterating
        with client.chat.completions.stream(
                model=MODEL, messages=[{"role": "user", "content": "a person"}],
                response_format=Person, max_tokens=5) as stream:
            for _ in stream:
                pass


def test_openai_stream_with_tools_cut_call_is_withheld(gateway, engine):
    engine.reply = cut_call_stream()
    client = sync_client(gateway)
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "weather?"}], tools=[WEATHER_TOOL],
        tool_choice="required", max_tokens=5, stream=True))
    assert not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason == "length"


def test_openai_stream_with_tools_valid_call(gateway, engine):
    engine.reply = Reply(events=[
        chunk({"delta": {"role": "assistant", "content": ""}}),
        chunk({"delta": {"tool_calls": [{"index": 0, "id": "call-1", "type": "function",
                                         "function": {"name": "get_weather",
                                                      "arguments": '{"city": '}}]}}),
        chunk({"delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]}}),
        chunk({"delta": {}, "finish_reason": "tool_calls"})])
    with sync_client(gateway).chat.completions.stream(
            model=MODEL, messages=[{"role": "user", "content": "weather?"}],
            tools=[WEATHER_TOOL], tool_choice="required") as stream:
        final = stream.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "get_weather", {"city": "Oslo"})


@pytest.mark.parametrize("method", ["json_schema", "json_mode"])
def test_langchain_structured_output_cut_raises_openai_length_error(gateway, engine, method):
    """langchain-openai parses these two methods with openai's ``parse()``, so a cut answer
    raises ``LengthFinishReasonError`` exactly as it does against OpenAI itself."""
    lc = pytest.importorskip("langchain_openai")
    engine.reply = cut_reply
    llm = lc.ChatOpenAI(model=MODEL, base_url=gateway.url + "/v1", api_key=KEY, max_retries=0)
    with pytest.raises(openai.LengthFinishReasonError):
        llm.with_structured_output(Person, method=method, include_raw=True).invoke("a person")


def test_langchain_function_calling_cut_returns_no_call(gateway, engine):
    lc = pytest.importorskip("langchain_openai")
    engine.reply = cut_reply
    llm = lc.ChatOpenAI(model=MODEL, base_url=gateway.url + "/v1", api_key=KEY, max_retries=0)
    out = llm.with_structured_output(Person, method="function_calling",
                                     include_raw=True).invoke("a person")
    assert out["parsed"] is None and out["raw"].tool_calls == []
    assert out["raw"].response_metadata["finish_reason"] == "length"


def test_litellm_cut_structured_output_is_a_length_answer(gateway, engine):
    litellm = pytest.importorskip("litellm")
    engine.reply = cut_reply
    resp = litellm.completion(model=f"openai/{MODEL}", api_base=gateway.url + "/v1",
                              api_key=KEY, num_retries=0, response_format=Person,
                              messages=[{"role": "user", "content": "a person"}], max_tokens=5)
    assert resp.choices[0].finish_reason == "length"
    assert resp.choices[0].message.content == CUT_JSON


# -- 3. n up to the policy bound, every choice checked ---------------------------------------
def two_choices(second_args: str, second_finish: str = "tool_calls") -> dict[str, Any]:
    body = completion({"content": None, "tool_calls": [CALL], **VLLM_FIELDS}, "tool_calls")
    other = {**CALL, "id": "call-2", "function": {**CALL["function"], "arguments": second_args}}
    body["choices"].append({"index": 1, "logprobs": None, "finish_reason": second_finish,
                            "message": {"role": "assistant", "content": None,
                                        "tool_calls": [other]}})
    return body


def test_openai_n2_both_choices_validated(gateway, engine):
    client = sync_client(gateway)
    kw: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "w?"}],
                          "tools": [WEATHER_TOOL], "tool_choice": "required", "n": 2}
    engine.reply = Reply(body=two_choices('{"city": "Lima"}'))
    resp = client.chat.completions.create(**kw)
    assert [json.loads(c.message.tool_calls[0].function.arguments)["city"]
            for c in resp.choices] == ["Oslo", "Lima"]
    assert engine.chat_calls[-1]["body"]["n"] == 2
    engine.reply = Reply(body=two_choices('{"city": 5}'))  # choice 1 breaks the schema
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(**kw)
    assert info.value.status_code == 502
    assert info.value.body["code"] == "invalid_tool_call"
    assert "choice 1" in info.value.body["message"]
    engine.reply = Reply(body=two_choices('{"city": "Li', "length"))  # choice 1 cut
    resp = client.chat.completions.create(**kw)
    assert resp.choices[0].message.tool_calls[0].id == "call-1"
    assert resp.choices[1].finish_reason == "length" and resp.choices[1].message.tool_calls is None


def test_n_is_bounded_by_policy_default_4(gateway, engine):
    from appliance.gateway import GatewaySettings
    from appliance.policy import GatewayPolicy

    assert GatewayPolicy().max_n == 4 == GatewaySettings.model_fields["max_n"].default
    with pytest.raises(openai.BadRequestError) as info:
        sync_client(gateway).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], n=5)
    assert info.value.body["param"] == "n" and engine.chat_calls == []


def test_engine_answering_more_choices_than_n_is_refused(client, engine):
    engine.reply = Reply(body=two_choices('{"city": "Lima"}'))
    r = client.post("/v1/chat/completions", headers=AUTH,
                    json=chat_body(tools=[WEATHER_TOOL], tool_choice="required"))
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_error"


def test_stream_n2_each_choice_validated(client, engine):
    def call_chunks(ci: int, args: str) -> list[dict[str, Any]]:
        first = chunk({"delta": {"tool_calls": [{"index": 0, "id": f"c{ci}", "type": "function",
                                                 "function": {"name": "get_weather",
                                                              "arguments": args}}]}})
        first["choices"][0]["index"] = ci
        finish = chunk({"delta": {}, "finish_reason": "tool_calls"})
        finish["choices"][0]["index"] = ci
        return [first, finish]

    body = chat_body(tools=[WEATHER_TOOL], tool_choice="required", n=2, stream=True)
    engine.reply = Reply(events=call_chunks(0, '{"city": "Oslo"}') + call_chunks(
        1, '{"city": "Lima"}'))
    events, done = sse_json(client.post("/v1/chat/completions", headers=AUTH, json=body).text)
    released = {e["choices"][0]["index"]: e["choices"][0]["delta"]["tool_calls"][0]["id"]
                for e in events if e.get("choices") and e["choices"][0]["delta"].get("tool_calls")}
    assert done and released == {0: "c0", 1: "c1"}
    engine.reply = Reply(events=call_chunks(0, '{"city": "Oslo"}') + call_chunks(1, "{}"))
    events, done = sse_json(client.post("/v1/chat/completions", headers=AUTH, json=body).text)
    assert done and events[-1]["error"]["reason"] == "schema_mismatch"
    assert "choice 1" in events[-1]["error"]["message"]


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


def test_guard_and_router_agree(engine):
    """Every (path, method) the Guard admits is a full match of Starlette's router and vice
    versa (issue 11: ``HEAD /health/live`` was 405 in one and allowed in the other)."""
    from gw_helpers import make_settings
    from starlette.routing import Match

    from appliance.gateway import create_app
    from appliance.gateway.app import Guard, route_key
    from appliance.gateway.observability import RequestInfo

    app = create_app(make_settings(engine))
    guard = next(m for m in app.user_middleware if m.cls is Guard)
    table = guard.kwargs["routes"]
    paths = [p.replace("{model}", MODEL) for p in table] + [
        "/v1/completions", "/v1/models/a/b", "/docs", "/v1/responses/x"]
    for path in paths:
        for method in ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS"):
            scope = {"type": "http", "path": path, "method": method, "root_path": "",
                     "headers": [(b"host", b"x"), (b"authorization", f"Bearer {KEY}".encode())]}
            matches = [r.matches(scope)[0] for r in app.router.routes]
            refusal = Guard(app, app.state.gateway, table).admit(
                scope, RequestInfo("r", method, path))
            routed = Match.FULL in matches
            assert (refusal is None) == routed, (path, method, refusal and refusal.code)
            if refusal is not None and Match.PARTIAL in matches:
                assert refusal.status == 405
            if routed:
                assert route_key(path) in table


def test_completions_is_a_documented_404(client, engine):
    r = client.post("/v1/completions", headers=AUTH, json={"model": MODEL, "prompt": "hi"})
    assert r.status_code == 404 and "/v1/chat/completions" in r.json()["error"]["message"]
    assert engine.calls == []


def responses_text(body: Any) -> Reply:
    if body.get("stream"):
        return Reply(events=[*text_stream("Hello", " there"), {
            "id": "x", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
            "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2,
                                     "total_tokens": 9}}])
    return Reply(body=completion({"content": "Hello there", **VLLM_FIELDS}))


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
        chunk({"delta": {"role": "assistant", "content": ""}}),
        chunk({"delta": {"tool_calls": [{"index": 0, "id": "call-1", "type": "function",
                                         "function": {"name": "get_weather",
                                                      "arguments": '{"city": '}}]}}),
        chunk({"delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]}}),
        chunk({"delta": {}, "finish_reason": "tool_calls"})])
    tool = {"type": "function", "name": "get_weather",
            "parameters": WEATHER_TOOL["function"]["parameters"]}
    with sync_client(gateway).responses.stream(model=MODEL, input="w?", tools=[tool],
                                                tool_choice="required") as stream:
        events = list(stream)
        final = stream.get_final_response()
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(done) == 1 and json.loads(done[0].arguments) == {"city": "Oslo"}
    assert [i.type for i in final.output] == ["function_call"]
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


@pytest.mark.parametrize("method", ["json_schema", "function_calling", "json_mode"])
def test_langchain_with_structured_output_three_methods(gateway, engine, method):
    lc = pytest.importorskip("langchain_openai")

    def reply(body: Any) -> Reply:
        if body.get("tools"):  # function_calling: a named, non-parallel tool call
            name = body["tools"][0]["function"]["name"]
            call = {"id": "call-1", "type": "function",
                    "function": {"name": name, "arguments": '{"age": 3, "name": "Ada"}'}}
            return Reply(body=completion({"content": None, "tool_calls": [call],
                                          **VLLM_FIELDS}, "tool_calls"))
        return Reply(body=completion({"content": '{"age": 3, "name": "Ada"}',
                                      **VLLM_FIELDS}))

    engine.reply = reply
    llm = lc.ChatOpenAI(model=MODEL, base_url=gateway.url + "/v1", api_key=KEY, max_retries=0)
    out = llm.with_structured_output(Person, method=method, include_raw=True).invoke("a person")
    assert out["parsed"] == Person(age=3, name="Ada") and out["parsing_error"] is None
    sent = engine.chat_calls[-1]["body"]
    expected = {"json_schema": "json_schema", "json_mode": "json_object"}.get(method)
    assert (sent.get("response_format") or {}).get("type") == expected


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

    from appliance.gateway.errors import GatewayError
    from appliance.gateway.request_checks import check_chat_request
    from appliance.gateway.responses import check_responses_request
    from appliance.gateway.schema_subset import SchemaCache

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
