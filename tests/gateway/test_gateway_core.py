"""Core behaviour: routes, auth, pass-through, streaming relay, metrics, audit, readiness."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket

import httpx
import pytest
from gw_fake_engine import MODEL, FakeEngine, Reply, completion, text_stream
from gw_helpers import AUTH, KEY, OTHER_KEY, WEATHER_TOOL, chat_body, sse_json

from appliance.gateway import GatewaySettings, create_app, hash_api_key


def test_health_routes_need_no_key_and_live_does_not_touch_engine(client, engine):
    live = client.get("/health/live")
    assert live.status_code == 200 and live.json() == {"status": "live"}
    assert engine.calls == []
    ready = client.get("/health/ready")
    assert ready.status_code == 200
    assert [c["path"] for c in engine.calls] == ["/health"]


def test_ready_is_503_when_engine_is_down(make_gateway):
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gw = make_gateway(upstream_url=f"http://127.0.0.1:{port}", ready_timeout_s=1.0)
    r = httpx.get(gw.url + "/health/ready")
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "engine_unavailable"


@pytest.mark.parametrize("headers", [
    {},
    {"Authorization": "Bearer sk-wrong-key-000000000"},
    {"Authorization": f"Basic {KEY}"},
    {"Authorization": f"bearer{KEY}"},
    {"Authorization": "Bearer  x"},
])
def test_missing_or_bad_key_is_401_and_engine_untouched(client, engine, headers):
    for method, path in (("POST", "/v1/chat/completions"), ("GET", "/v1/models"),
                         ("GET", "/metrics")):
        r = client.request(method, path, headers=headers, json=chat_body())
        assert r.status_code == 401, (path, r.text)
        err = r.json()["error"]
        assert err["code"] == "unauthorized" and err["type"] == "authentication_error"
        assert r.headers["www-authenticate"].startswith("Bearer")
    assert engine.calls == []


def test_every_configured_key_works_and_key_is_case_sensitive(client):
    for key in (KEY, OTHER_KEY):
        assert client.get("/v1/models", headers={"Authorization": f"Bearer {key}"}
                          ).status_code == 200
    assert client.get("/v1/models", headers={"Authorization": f"Bearer {KEY.upper()}"}
                      ).status_code == 401


def test_auth_compares_digests_in_constant_time_against_all_keys(client, monkeypatch):
    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    for key, status in ((KEY, 200), ("sk-not-a-valid-key-123", 401)):
        calls.clear()
        r = client.get("/v1/models", headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == status
        # every stored digest is compared (no early exit on the first match), digests only
        assert len(calls) == 2
        assert all(a == hashlib.sha256(key.encode()).digest() and len(b) == 32
                   for a, b in calls)


def test_settings_keep_only_key_hashes():
    s = GatewaySettings(upstream_url="http://127.0.0.1:9", served_model_name="m",
                        api_keys=[KEY])
    assert s.api_key_sha256 == (hash_api_key(KEY),)
    assert KEY not in s.model_dump_json() and KEY not in repr(s)
    with pytest.raises(ValueError):
        GatewaySettings(upstream_url="http://10.0.0.5:8000", served_model_name="m",
                        api_keys=[KEY])  # engine must be local
    with pytest.raises(ValueError):
        GatewaySettings(upstream_url="http://127.0.0.1:8000", served_model_name="m",
                        api_keys=["short"])


@pytest.mark.parametrize("method,path", [
    ("GET", "/docs"), ("GET", "/redoc"), ("POST", "/invocations"),  # /openapi.json: ours
    ("POST", "/tokenize"), ("POST", "/detokenize"), ("GET", "/version"), ("GET", "/health"),
    ("POST", "/v1/completions"), ("GET", "/v1/responses/resp_1"), ("POST", "/v1/messages"),
    ("POST", "/v1/responses/render"), ("POST", "/v1/responses/resp_1/cancel"),
    ("POST", "/v1/chat/completions/render"), ("POST", "/v1/chat/completions/batch"),
    ("POST", "/v1/chat/completions/"), ("POST", "/V1/chat/completions"),
    ("POST", "//v1/chat/completions"), ("POST", "/v1/chat%2Fcompletions"),
    ("POST", "/v1/load_lora_adapter"), ("POST", "/scale_elastic_ep"), ("GET", "/v1/models/"),
])
def test_routes_outside_allowlist_are_404_without_engine(client, engine, method, path):
    r = client.request(method, path, headers=AUTH, json=chat_body())
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "not_found"
    assert engine.calls == []


def test_wrong_method_is_405(client, engine):
    r = client.get("/v1/chat/completions", headers=AUTH)
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert engine.calls == []


def test_app_exposes_no_docs_routes(engine):
    app = create_app(GatewaySettings(upstream_url=engine.url, served_model_name=MODEL,
                                     api_keys=[KEY]))
    paths = {r.path for r in app.table.routes}
    assert paths == {"/health/live", "/health/ready", "/v1/models", "/v1/models/{model}",
                     "/v1/chat/completions", "/v1/responses", "/metrics",
                     "/openapi.json"}


def test_models_lists_only_the_served_model(client, engine):
    r = client.get("/v1/models", headers=AUTH)
    assert r.status_code == 200
    assert [m["id"] for m in r.json()["data"]] == [MODEL]
    assert engine.calls == []


def test_non_stream_passthrough_and_forwarded_body(client, engine):
    engine.reply = Reply(body=completion({"content": "Hello there"}))
    r = client.post("/v1/chat/completions", headers=AUTH,
                    json=chat_body(temperature=0.5, max_tokens=16))
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["content"] == "Hello there"
    assert r.headers["x-request-id"]
    (call,) = engine.chat_calls
    sent = dict(call["body"])
    salt = sent.pop("cache_salt")  # the caller's engine cache salt (test_gateway_tenant)
    assert sent == chat_body(temperature=0.5, max_tokens=16) and len(salt) == 64
    # the client's key never reaches the engine
    assert b"authorization" not in call["headers"]


def test_upstream_key_is_added_and_max_tokens_defaults_to_cap(make_gateway, engine):
    gw = make_gateway(upstream_api_key="internal-engine-key", max_tokens_cap=77)
    r = httpx.post(gw.url + "/v1/chat/completions", headers=AUTH, json=chat_body())
    assert r.status_code == 200
    (call,) = engine.chat_calls
    assert call["headers"][b"authorization"] == b"Bearer internal-engine-key"
    assert call["body"]["max_tokens"] == 77


def test_model_mismatch_is_404(client, engine):
    r = client.post("/v1/chat/completions", headers=AUTH, json=chat_body(model="other"))
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert engine.calls == []


def test_tools_disabled_gives_400(make_gateway, engine):
    """400, not 503 (schemathesis: a 5xx for a setting; the openai SDK retries 503s)."""
    gw = make_gateway(tools_enabled=False)
    r = httpx.post(gw.url + "/v1/chat/completions", headers=AUTH,
                   json=chat_body(tools=[WEATHER_TOOL], tool_choice="required"))
    assert r.status_code == 400 and r.json()["error"]["code"] == "tools_unavailable"
    assert engine.calls == []


def test_stream_text_is_relayed(client, engine):
    engine.reply = Reply(events=text_stream("Hel", "lo ", "wörld"))
    r = client.post("/v1/chat/completions", headers=AUTH, json=chat_body(stream=True))
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events, done = sse_json(r.text)
    assert done
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events)
    assert text == "Hello wörld"
    assert events[-1]["choices"][0]["finish_reason"] == "stop"


def test_upstream_4xx_keeps_status_and_5xx_becomes_502(client, engine):
    engine.reply = Reply(status=400, body={"error": {"message": "context too long",
                                                     "type": "BadRequestError", "code": 400}})
    r = client.post("/v1/chat/completions", headers=AUTH, json=chat_body())
    assert r.status_code == 400 and r.json()["error"]["code"] == "upstream_rejected"
    assert "context too long" in r.json()["error"]["message"]
    engine.reply = Reply(status=500, body=b"Traceback (most recent call last): secret")
    r = client.post("/v1/chat/completions", headers=AUTH, json=chat_body(stream=True))
    assert r.status_code == 502 and "Traceback" not in r.text


def test_metrics_need_key_and_count_requests(client):
    client.post("/v1/chat/completions", headers=AUTH, json=chat_body())
    r = client.get("/metrics", headers=AUTH)
    assert r.status_code == 200
    assert 'gateway_requests_total{route="/v1/chat/completions",status="200"}' in r.text
    assert "gateway_request_duration_seconds_bucket" in r.text


def test_audit_log_has_one_line_per_request(make_gateway, engine, tmp_path):
    log = tmp_path / "audit.jsonl"
    gw = make_gateway(audit_log=log)
    engine.reply = Reply(body=completion({"content": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
        "tool_calls"))
    with httpx.Client(base_url=gw.url) as c:
        c.post("/v1/chat/completions", headers=AUTH,
               json=chat_body(tools=[WEATHER_TOOL], tool_choice="required"))
        c.get("/v1/models")
        c.get("/health/live")
    gw.stop()
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [(x["route"], x["status"]) for x in lines] == [("/v1/chat/completions", 200),
                                                          ("/v1/models", 401)]
    first = lines[0]
    assert first["key_id"] == hashlib.sha256(KEY.encode()).hexdigest()[:8]
    assert first["tool_calls_valid"] == 1 and first["tool_calls_invalid"] == 0
    assert first["model"] == MODEL and first["latency_ms"] > 0
    assert KEY not in log.read_text()
    assert oct(log.stat().st_mode & 0o777) == "0o600"


def test_upstream_over_unix_socket(make_gateway, tmp_path):
    sock = tmp_path / "engine.sock"
    uds_engine = FakeEngine().start(uds=str(sock))
    try:
        gw = make_gateway(upstream_url=None, upstream_uds=sock)
        assert httpx.get(gw.url + "/health/ready").status_code == 200
        uds_engine.reply = Reply(events=text_stream("over ", "uds"))
        r = httpx.post(gw.url + "/v1/chat/completions", headers=AUTH,
                       json=chat_body(stream=True))
        events, done = sse_json(r.text)
        assert done and "".join(e["choices"][0]["delta"].get("content") or ""
                                for e in events) == "over uds"
        assert [c["path"] for c in uds_engine.calls] == ["/health", "/v1/chat/completions"]
    finally:
        uds_engine.stop()
