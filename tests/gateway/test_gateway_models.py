"""Several models behind one gateway (``GatewaySettings.models``, issue 23): requests are
routed by ``model`` to that model's engine, ``/v1/models`` lists every served model the
caller may use, an unknown model is 404 ``model_not_found``, a model off the caller's list
403 ``model_not_allowed``, and a model whose engine is down 503 for that model only."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from gw_fake_engine import FakeEngine, Reply, completion
from gw_helpers import KEY

from appliance.config.keys import KeyLimits, add_key
from appliance.engine.state import EngineStatus
from appliance.gateway import GatewayHandle, GatewaySettings, start_in_thread

AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def second() -> Iterator[FakeEngine]:
    eng = FakeEngine().start()
    yield eng
    eng.stop()


def _settings(a: FakeEngine, b: FakeEngine, **extra: Any) -> GatewaySettings:
    return GatewaySettings(models=[{"name": "small", "upstream_url": a.url},
                                   {"name": "coder", "upstream_url": b.url}],
                           api_keys=[KEY], tools_enabled=True, vocab_size=32000,
                           request_timeout_s=10.0, **extra)


@pytest.fixture
def two(engine: FakeEngine, second: FakeEngine) -> Iterator[GatewayHandle]:
    engine.reply = Reply(body=completion({"content": "from small"}))
    second.reset()
    second.reply = Reply(body=completion({"content": "from coder"}))
    handle = start_in_thread(_settings(engine, second))
    yield handle
    handle.stop()


def _chat(model: str | None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}], **extra}
    if model is not None:
        body["model"] = model
    return body


def test_requests_are_routed_by_model(two: GatewayHandle, engine: FakeEngine,
                                      second: FakeEngine) -> None:
    with httpx.Client(base_url=two.url, headers=AUTH, timeout=10) as c:
        r = c.post("/v1/chat/completions", json=_chat("coder"))
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == \
            "from coder"
        r = c.post("/v1/chat/completions", json=_chat("small"))
        assert r.json()["choices"][0]["message"]["content"] == "from small"
        # no model: the first entry (the default)
        r = c.post("/v1/chat/completions", json=_chat(None))
        assert r.json()["choices"][0]["message"]["content"] == "from small"
        # streaming and /v1/responses take the same route
        r = c.post("/v1/chat/completions", json=_chat("coder", stream=True))
        assert r.status_code == 200
        r = c.post("/v1/responses", json={"model": "coder", "input": "hi"})
        assert r.status_code == 200
        assert r.json()["output"][0]["content"][0]["text"] == "from coder"
    assert [call["body"]["model"] for call in second.chat_calls] == ["coder"] * 3
    assert [call["body"]["model"] for call in engine.chat_calls] == ["small", "small"]


def test_model_list_card_and_unknown_model(two: GatewayHandle, engine: FakeEngine,
                                           second: FakeEngine) -> None:
    with httpx.Client(base_url=two.url, headers=AUTH, timeout=10) as c:
        ids = [m["id"] for m in c.get("/v1/models").json()["data"]]
        assert ids == ["small", "coder"]
        assert c.get("/v1/models/coder").json()["id"] == "coder"
        assert c.get("/v1/models/nope").status_code == 404
        r = c.post("/v1/chat/completions", json=_chat("nope"))
        assert r.status_code == 404
        err = r.json()["error"]
        assert err["code"] == "model_not_found" and err["param"] == "model"
        assert "'nope'" in err["message"]
        r = c.post("/v1/chat/completions", json=_chat(7))  # type: ignore[arg-type]
        assert r.status_code == 404
        schema = c.get("/openapi.json").json()
        assert schema["components"]["schemas"]["Model"]["properties"]["id"] == \
            {"enum": ["small", "coder"]}
    assert not engine.chat_calls and not second.chat_calls


def test_allow_lists_per_model(engine: FakeEngine, second: FakeEngine,
                               tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    coder_only = add_key(path, "coder-only", KeyLimits(models=("coder",)))
    handle = start_in_thread(_settings(engine, second, keys_file=path))
    try:
        with httpx.Client(base_url=handle.url, timeout=10,
                          headers={"Authorization": f"Bearer {coder_only}"}) as c:
            assert [m["id"] for m in c.get("/v1/models").json()["data"]] == ["coder"]
            assert c.get("/v1/models/small").status_code == 403
            r = c.post("/v1/chat/completions", json=_chat("small"))
            assert r.status_code == 403
            err = r.json()["error"]
            assert err["code"] == "model_not_allowed" and "'small'" in err["message"]
            assert "'coder-only'" in err["message"]
            # the default model is "small": a request without model is refused too
            assert c.post("/v1/chat/completions", json=_chat(None)).status_code == 403
            assert c.post("/v1/chat/completions", json=_chat("coder")).status_code == 200
            # the 404 names only the models this key may use
            msg = c.post("/v1/chat/completions", json=_chat("x")).json()["error"]["message"]
            assert "small" not in msg
            assert "'coder'" in c.get("/v1/models/x").json()["error"]["message"]
        assert not engine.chat_calls and len(second.chat_calls) == 1
    finally:
        handle.stop()


def test_a_down_engine_refuses_its_model_only(two: GatewayHandle, engine: FakeEngine,
                                              second: FakeEngine) -> None:
    statuses = {}
    for name in ("small", "coder"):
        status = EngineStatus()
        status.supervised = True
        two.state.attach_engine(status, name)
        statuses[name] = status
    with httpx.Client(base_url=two.url, headers=AUTH, timeout=10) as c:
        ready = c.get("/health/ready")
        assert ready.status_code == 200
        assert ready.json() == {"status": "ready",
                                "models": {"small": "ready", "coder": "ready"}}
        statuses["coder"].mark_down("engine exited with status -9", expected_back_s=9.0)
        r = c.post("/v1/chat/completions", json=_chat("coder"))
        assert r.status_code == 503 and r.json()["error"]["code"] == "engine_restarting"
        assert 1 <= int(r.headers["retry-after"]) <= 9
        assert c.post("/v1/chat/completions", json=_chat("small")).status_code == 200
        ready = c.get("/health/ready")
        assert ready.status_code == 200
        assert ready.json() == {"status": "degraded",
                                "models": {"small": "ready", "coder": "engine_restarting"}}
        metrics = c.get("/metrics").text
        assert 'appliance_model_engine_up{model="coder"} 0.0' in metrics
        assert 'appliance_model_engine_up{model="small"} 1.0' in metrics
        assert 'gateway_model_requests_total{model="coder",status="503"} 1.0' in metrics
        assert 'gateway_model_requests_total{model="small",status="200"} 1.0' in metrics
        statuses["small"].mark_down("engine exited", expected_back_s=5.0)
        assert c.get("/health/ready").status_code == 503
        r = c.post("/v1/chat/completions", json=_chat("small"))
        assert r.status_code == 503  # refused before the body is read: no engine is up
        statuses["coder"].mark_up()
        statuses["small"].mark_up()
        assert c.post("/v1/chat/completions", json=_chat("coder")).status_code == 200
    assert not any(call["body"]["model"] == "coder" for call in second.chat_calls[:-1])


def test_routing_table_is_validated(engine: FakeEngine) -> None:
    with pytest.raises(ValueError, match="each served name once"):
        GatewaySettings(models=[{"name": "a", "upstream_url": engine.url},
                                {"name": "a", "upstream_url": engine.url}], api_keys=[KEY])
    with pytest.raises(ValueError, match="loopback"):
        GatewaySettings(models=[{"name": "a", "upstream_url": engine.url},
                                {"name": "b", "upstream_url": "http://10.1.2.3:80"}],
                        api_keys=[KEY])
    with pytest.raises(ValueError, match="with models the first row is the default model"):
        GatewaySettings(models=[{"name": "a", "upstream_url": engine.url}],
                        served_model_name="b", api_keys=[KEY])
    one = GatewaySettings(upstream_url=engine.url, served_model_name="m", api_keys=[KEY])
    assert [(m.name, m.upstream_url) for m in one.models] == [("m", engine.url)]
    assert one.default_model is one.models[0]
    assert "served_model_name" not in one.model_dump() and "upstream_url" not in one.model_dump()


def test_worker_payload_keeps_every_engine_key(engine: FakeEngine) -> None:
    """``[gateway] workers``: a child process gets the routing table with the engines' real
    keys (a masked ``**********`` would make every engine refuse it)."""
    from appliance.gateway.http.workers import settings_payload

    settings = GatewaySettings(models=[
        {"name": "a", "upstream_url": engine.url, "upstream_api_key": "key-of-engine-a"},
        {"name": "b", "upstream_uds": "/run/b.sock", "upstream_api_key": "key-of-engine-b"}],
        api_keys=[KEY])
    child = GatewaySettings.model_validate(settings_payload(settings))
    assert [m.upstream_api_key.get_secret_value() for m in child.models  # type: ignore[union-attr]
            ] == ["key-of-engine-a", "key-of-engine-b"]
    assert child.default_model.name == "a"
