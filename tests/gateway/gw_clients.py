"""Shared pieces of the real-client gateway tests (test_gateway_clients.py,
test_gateway_routes.py): what vLLM answers, scripted replies, SDK clients."""

from __future__ import annotations

import os
from typing import Any

import openai
from gw_fake_engine import MODEL, Reply, chunk, completion, text_stream
from gw_helpers import KEY
from pydantic import BaseModel

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm stays offline

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


def responses_text(body: Any) -> Reply:
    if body.get("stream"):
        return Reply(events=[*text_stream("Hello", " there"), {
            "id": "x", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
            "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2,
                                     "total_tokens": 9}}])
    return Reply(body=completion({"content": "Hello there", **VLLM_FIELDS}))
