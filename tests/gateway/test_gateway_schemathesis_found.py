"""Regression tests for what schemathesis (tests/gateway/test_schemathesis.py) found."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from gw_fake_engine import MODEL
from gw_helpers import AUTH, KEY

from appliance.gateway import GatewayHandle


def _statuses_on_one_connection(handle: GatewayHandle, body: bytes, count: int) -> list[bytes]:
    """Send ``count`` requests in turn on one keep-alive connection, each in one write; the
    next goes out as soon as the previous answer is in, so the server (which resumes
    reading only after answering) often reads a whole request, headers and body, at once."""
    request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: "
               f"Bearer {KEY}\r\nContent-Type: application/json\r\nContent-Length: "
               f"{len(body)}\r\n\r\n").encode() + body
    statuses = []
    with socket.create_connection(("127.0.0.1", handle.port), timeout=10) as sock:
        reader = sock.makefile("rb")
        for _ in range(count):
            sock.sendall(request)
            statuses.append(reader.readline().strip())
            length = 0
            while (line := reader.readline().strip()):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
                if line.lower() == b"connection: close":
                    return statuses
            reader.read(length)
    return statuses


def test_schemathesis_whole_request_in_one_read_is_not_431(gateway: GatewayHandle) -> None:
    """A body over ``max_header_bytes`` (64 KiB) arriving in the same read as its header
    block was counted as header bytes: ``431 request_header_too_large`` for a 146 KB body
    (schemathesis, ``messages`` over ``maxItems``; on a keep-alive connection about every
    second such request). It must reach the handler (here: 400, too many messages)."""
    body = json.dumps({"messages": [{"role": "user", "content": "x" * 100}] * 1100}).encode()
    statuses = _statuses_on_one_connection(gateway, body, 12)
    assert statuses == [b"HTTP/1.1 400 Bad Request"] * 12, statuses


@pytest.mark.parametrize("tools", [{}, "", 0, False])
def test_schemathesis_responses_tools_of_wrong_type_refused(client: httpx.Client,
                                                            tools: Any) -> None:
    """``/v1/responses`` ignored a falsy non-array ``tools`` (``{}`` answered 200; found by
    schemathesis' negative mode, ``tools: Incorrect type``): it is a 400 as on chat."""
    r = client.post("/v1/responses", headers=AUTH,
                    json={"model": MODEL, "input": "hi", "tools": tools})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "tools"


def test_schemathesis_responses_empty_tools_still_accepted(client: httpx.Client) -> None:
    r = client.post("/v1/responses", headers=AUTH, json={"model": MODEL, "input": "hi",
                                                         "tools": [], "tool_choice": "none"})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(("field", "value"), [("store", 0), ("background", 0),
                                              ("store", 0.0)])
def test_schemathesis_responses_fixed_fields_need_their_json_type(
        client: httpx.Client, field: str, value: Any) -> None:
    """``store: 0`` passed as ``store: false`` (Python ``0 == False``; schemathesis'
    negative mode, ``store: Incorrect type``): the fixed fields compare type and value."""
    r = client.post("/v1/responses", headers=AUTH,
                    json={"model": MODEL, "input": "hi", field: value})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == field


@pytest.mark.parametrize("keyword", [{"$schema": {}}, {"$schema": []}, {"type": {}},
                                     {"type": ["string", {}]}, {"type": [[]]}])
@pytest.mark.parametrize("where", ["parameters", "response_format"])
def test_schemathesis_unhashable_schema_keyword_value_is_400_not_500(
        client: httpx.Client, keyword: dict[str, Any], where: str) -> None:
    """``"$schema": {}`` in tool parameters was a 500 ``internal_error`` (``TypeError:
    unhashable type: 'dict'`` in the schema-subset walker; schemathesis, 400 examples per
    operation); ``type`` with an object name was the same. Both are 400 ``invalid_schema``
    / ``unsupported_schema_feature`` naming the keyword."""
    schema = {"type": "object", "properties": {"a": {"type": "string", **keyword}}}
    if where == "parameters":
        body: dict[str, Any] = {"tools": [{"type": "function", "function": {
            "name": "f", "parameters": schema}}]}
    else:
        body = {"response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": schema}}}
    r = client.post("/v1/chat/completions", headers=AUTH, json={
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}], **body})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] in ("invalid_schema", "unsupported_schema_feature")
    assert "/properties/a/" + next(iter(keyword)) in error["param"]


@pytest.mark.parametrize("tools", [[None], [{"type": "function", "function": {"name": "f"}}]])
def test_schemathesis_tools_on_a_tools_off_gateway_is_400_not_503(
        make_gateway: Callable[..., GatewayHandle], tools: list[Any]) -> None:
    """``tools: [null]`` to a gateway with tool calling off was a 503 ``tools_unavailable``
    (schemathesis, restricted profile): a setting, not a passing state, so a 400 the openai
    SDK does not retry."""
    gw = make_gateway(tools_enabled=False)
    r = httpx.post(gw.url + "/v1/chat/completions", headers=AUTH, json={
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "tools": tools})
    assert r.status_code == 400 and r.json()["error"]["code"] == "tools_unavailable"
