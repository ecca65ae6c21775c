"""Issue 26: tool calls mean what OpenAI says they mean, and both routes answer a field alike.

- A function declared without ``parameters`` takes none (OpenAI's function definition:
  omitting ``parameters`` defines an empty parameter list): the grammar, the engine and the
  call check get a schema that admits only ``{}``; a schema the user wrote stays as written.
- ``metadata``, ``store``, ``service_tier`` and ``reasoning_effort`` get the same answer on
  ``/v1/chat/completions`` and ``/v1/responses``; a refusal by design states its reason.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from gw_fake_engine import Reply, completion, tool_message
from gw_helpers import AUTH, chat_body

from appliance.gateway.chat.request_checks import NO_PARAMETERS, check_chat_request
from appliance.gateway.errors import GatewayError
from appliance.gateway.openai_fields import REFUSED, SHARED
from appliance.gateway.responses import check_responses_request
from appliance.gateway.schema.subset import SchemaCache
from appliance.gateway.settings import GatewaySettings

SETTINGS = GatewaySettings(upstream_url="http://127.0.0.1:9",
                           served_model_name="appliance-model", api_keys=["k" * 16],
                           tools_enabled=True)
NOW = {"type": "function", "function": {"name": "get_time_now"}}


def _chat(body: dict[str, Any]) -> Any:
    body = {"messages": [{"role": "user", "content": "hi"}], **body}
    return check_chat_request(json.dumps(body).encode(), SETTINGS, SchemaCache())


def _responses(body: dict[str, Any]) -> Any:
    return check_responses_request(json.dumps({"input": "hi", **body}).encode(), SETTINGS,
                                   SchemaCache())


# -- a tool without parameters takes none ------------------------------------------------------

@pytest.mark.parametrize("tool", [NOW, {"type": "function", "function": {
    "name": "get_time_now", "parameters": None}}])
def test_missing_parameters_admit_only_the_empty_object(tool: dict[str, Any]) -> None:
    req = _chat({"tools": [tool], "tool_choice": "required"})
    sent = json.loads(req.body)["tools"][0]["function"]
    assert sent["parameters"] == NO_PARAMETERS  # the engine's grammar gets it too
    check = req.tools["get_time_now"]
    assert check.is_valid({})
    assert not check.is_valid({"date": "2026-12-03", "time_not_converted": True})


def test_a_schema_the_user_wrote_stays_as_written() -> None:
    params = {"type": "object", "properties": {}}
    tool = {"type": "function", "function": {"name": "f", "parameters": params}}
    req = _chat({"tools": [tool]})
    assert json.loads(req.body)["tools"][0]["function"]["parameters"] == params
    assert req.tools["f"].is_valid({"anything": 1})


def test_responses_tool_without_parameters_takes_none() -> None:
    req = _responses({"tools": [{"type": "function", "name": "get_time_now"}],
                      "tool_choice": "required"})
    assert json.loads(req.body)["tools"][0]["function"]["parameters"] == NO_PARAMETERS
    assert not req.tools["get_time_now"].is_valid({"x": 1})


def test_an_invented_argument_for_a_parameterless_tool_is_never_relayed(client, engine) -> None:
    engine.reply = Reply(body=completion(tool_message(
        ("c1", "get_time_now", '{"date": "today"}')), "tool_calls"))
    r = client.post("/v1/chat/completions", headers=AUTH,
                    json=chat_body(tools=[NOW], tool_choice="required"))
    assert r.status_code == 502 and r.json()["error"]["reason"] == "schema_mismatch"
    engine.reply = Reply(body=completion(tool_message(("c1", "get_time_now", "{}")),
                                         "tool_calls"))
    r = client.post("/v1/chat/completions", headers=AUTH,
                    json=chat_body(tools=[NOW], tool_choice="required"))
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == "{}"


# -- one answer per field on both routes -------------------------------------------------------

TAKEN = [("metadata", {"team": "search"}), ("metadata", None), ("store", False),
         ("store", None), ("service_tier", "auto"), ("service_tier", "default"),
         ("reasoning_effort", None)]
REFUSED_VALUES = [("store", True, "nothing is stored"), ("service_tier", "flex", "one tier"),
                  ("service_tier", "priority", "one tier"),
                  ("reasoning_effort", "low", "no reasoning mode")]
MALFORMED = [("metadata", {f"k{i}": "v" for i in range(17)}), ("metadata", {"k": 1}),
             ("store", "no"), ("service_tier", 3)]


@pytest.mark.parametrize(("field", "value"), TAKEN)
def test_harmless_values_are_taken_on_both_routes_and_never_forwarded(field: str,
                                                                     value: Any) -> None:
    for req in (_chat({field: value}), _responses({field: value})):
        assert field not in json.loads(req.body)


@pytest.mark.parametrize(("field", "value", "why"), REFUSED_VALUES)
def test_refusals_by_design_say_so_alike_on_both_routes(field: str, value: Any,
                                                       why: str) -> None:
    errors = []
    for check in (_chat, _responses):
        with pytest.raises(GatewayError) as err:
            check({field: value})
        errors.append(err.value)
    for error in errors:
        assert error.code == "forbidden_parameter" and error.param == field
        assert error.message.startswith(f"{field} is not supported by this appliance: ")
        assert why in error.message
    assert errors[0].message == errors[1].message


@pytest.mark.parametrize(("field", "value"), MALFORMED)
def test_malformed_values_are_invalid_alike_on_both_routes(field: str, value: Any) -> None:
    codes = set()
    for check in (_chat, _responses):
        with pytest.raises(GatewayError) as err:
            check({field: value})
        codes.add((err.value.code, err.value.param, err.value.message))
    assert len(codes) == 1 and next(iter(codes))[0] == "invalid_parameter"


def test_responses_metadata_is_still_echoed(gateway, engine) -> None:
    engine.reply = Reply(body=completion({"content": "hi"}))
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        r = client.post("/v1/responses", headers=AUTH,
                        json={"input": "hi", "metadata": {"team": "search"}, "store": False,
                              "service_tier": "auto"})
    assert r.status_code == 200, r.text
    assert r.json()["metadata"] == {"team": "search"}
    assert "metadata" not in engine.chat_calls[-1]["body"]


@pytest.mark.parametrize("field", ["audio", "prediction", "web_search_options", "functions",
                                   "prompt_cache_key", "verbosity"])
def test_openai_chat_fields_refused_by_design_state_their_reason(field: str) -> None:
    with pytest.raises(GatewayError) as err:
        _chat({field: {"x": 1}})
    assert err.value.code == "forbidden_parameter"
    assert err.value.message == f"{field} is not supported by this appliance: {REFUSED[field]}"


def test_a_reasoning_effort_object_on_responses_gets_the_chat_reason() -> None:
    with pytest.raises(GatewayError) as err:
        _responses({"reasoning": {"effort": "low"}})
    assert SHARED["reasoning_effort"].reason in err.value.message


def test_modalities_text_is_taken_other_modalities_refused() -> None:
    assert "modalities" not in json.loads(_chat({"modalities": ["text"]}).body)
    with pytest.raises(GatewayError) as err:
        _chat({"modalities": ["text", "audio"]})
    assert "text-only" in err.value.message


def test_a_non_openai_field_is_named_as_such() -> None:
    with pytest.raises(GatewayError) as err:
        _chat({"guided_regex": "a+"})
    assert err.value.code == "forbidden_parameter"
    assert "not an OpenAI chat field" in err.value.message


def test_the_fields_page_is_the_generated_table() -> None:
    from pathlib import Path

    from appliance.gateway.openai_fields import markdown

    page = Path(__file__).resolve().parents[2] / "docs" / "openai-fields.md"
    assert page.read_text(encoding="utf-8") == markdown(), (
        "run `python -m appliance.gateway.openai_fields > docs/openai-fields.md`")
