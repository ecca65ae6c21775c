"""Real OpenAI clients against the gateway and the fake engine (issue 11): agent loops that
send the assistant message back, truncation as each SDK expects it, ``n``.

Libraries: openai (sync and async), langchain-openai, litellm (``LITELLM_LOCAL_MODEL_COST_MAP``
keeps it offline). instructor is not used: every release pins openai<3.4 and would
downgrade the project's openai 3.57.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest
from gw_clients import (
    CALL,
    CLEAN_ASSISTANT,
    CUT_JSON,
    TOOL_RESULT,
    VLLM_FIELDS,
    Person,
    async_client,
    cut_call_stream,
    cut_reply,
    forwarded_history,
    sync_client,
    tool_turn,
)
from gw_fake_engine import MODEL, Reply, chunk, completion, text_stream
from gw_helpers import AUTH, KEY, WEATHER_TOOL, chat_body, sse_json
from pydantic import BaseModel

# litellm's and langchain's own pydantic models warn at import; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")



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


NULLABLE = ("max_tokens", "max_completion_tokens", "n", "temperature", "top_p",
            "frequency_penalty", "presence_penalty", "seed", "top_logprobs", "logprobs",
            "parallel_tool_calls", "stream", "user", "stop", "logit_bias", "top_k", "min_p",
            "repetition_penalty")


def test_openai_sdk_explicit_none_sampling_fields_are_absent(gateway, engine):
    """openai's SDK sends ``null`` for an argument passed as ``None`` (wrappers that forward
    their optional arguments do); OpenAI's schema makes these nullable and treats them as
    absent. They used to be 400 (``seed: null`` -> ``invalid_parameter``)."""
    client = sync_client(gateway)
    first = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], seed=None,
        temperature=None, top_p=None, max_tokens=None, n=None, stop=None, user=None,
        presence_penalty=None, frequency_penalty=None, logprobs=None, top_logprobs=None)
    assert first.choices[0].message.content
    sent = engine.chat_calls[-1]["body"]
    assert not {"seed", "temperature", "top_p", "n", "stop", "user", "logprobs",
                "top_logprobs"} & set(sent)
    assert None not in sent.values() and isinstance(sent["max_tokens"], int)


@pytest.mark.parametrize("key", NULLABLE)
def test_null_simple_field_is_dropped_not_forwarded(client, engine, key):
    r = client.post("/v1/chat/completions", headers=AUTH, json=chat_body(**{key: None}))
    assert r.status_code == 200, r.text
    sent = engine.chat_calls[-1]["body"]
    assert None not in sent.values()
    assert key not in sent or key == "max_tokens" and sent[key] > 0


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
    from appliance.config.policy import GatewayPolicy
    from appliance.gateway import GatewaySettings

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
