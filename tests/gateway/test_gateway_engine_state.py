"""The gateway while the supervised engine is down (appliance.engine.state)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx
from gw_fake_engine import FakeEngine, Reply, chunk
from gw_helpers import AUTH, chat_body, sse_json

from appliance.engine.state import DEATH_GRACE_S, EngineStatus
from appliance.gateway import GatewayHandle


def _spy_wait_down(status: EngineStatus) -> list[bool]:
    """Record each answer of ``status.wait_down``: True = the death was confirmed, False =
    the grace ran out (or, with no call at all, the gateway never waited)."""
    answers: list[bool] = []
    real = status.wait_down

    async def spy(timeout: float = DEATH_GRACE_S) -> bool:
        answers.append(await real(timeout))
        return answers[-1]

    status.wait_down = spy  # type: ignore[method-assign]
    return answers


def _supervised(gw: GatewayHandle) -> EngineStatus:
    status = EngineStatus()
    status.supervised = True
    gw.state.attach_engine(status)
    return status


def test_down_engine_ready_false_and_new_requests_503_with_retry_after(
        engine: FakeEngine, make_gateway: Callable[..., GatewayHandle]) -> None:
    gw = make_gateway()
    status = _supervised(gw)
    with httpx.Client(base_url=gw.url, headers=AUTH) as client:
        assert client.get("/health/ready").status_code == 200
        status.mark_down("engine exited with status -9", expected_back_s=12.0)
        ready = client.get("/health/ready")
        resp = client.post("/v1/chat/completions", json=chat_body())
        assert ready.status_code == 503 and ready.json()["error"]["code"] == "engine_restarting"
        assert resp.status_code == 503
        assert resp.json()["error"]["code"] == "engine_restarting"
        assert resp.json()["error"]["type"] == "server_error"
        assert 10 <= int(resp.headers["retry-after"]) <= 12
        assert not status.ready  # answered while the engine is still down: never held
        assert not engine.chat_calls
        assert client.get("/v1/models").status_code == 200  # the gateway itself stays up
        metrics = client.get("/metrics").text
        assert "appliance_engine_up 0.0" in metrics
        status.mark_up()
        assert client.get("/health/ready").status_code == 200
        assert client.post("/v1/chat/completions", json=chat_body()).status_code == 200
        assert "appliance_engine_restarts_total 1.0" in client.get("/metrics").text


def _die_soon(status: EngineStatus, after_s: float) -> None:
    def later() -> None:
        time.sleep(after_s)
        status.mark_down("engine exited with status -9", expected_back_s=5.0)
    threading.Thread(target=later, daemon=True).start()


def test_in_flight_plain_request_ends_with_503_not_502(
        engine: FakeEngine, make_gateway: Callable[..., GatewayHandle]) -> None:
    gw = make_gateway()
    status = _supervised(gw)
    engine.reply = Reply(status=500, body={"error": {"message": "EngineDeadError"}},
                         delay_s=0.1)
    waits = _spy_wait_down(status)
    _die_soon(status, 0.3)
    with httpx.Client(base_url=gw.url, headers=AUTH) as client:
        resp = client.post("/v1/chat/completions", json=chat_body())
    assert resp.status_code == 503, resp.text
    assert resp.json()["error"]["code"] == "engine_restarting"
    assert "retry-after" in resp.headers
    assert waits == [True]  # ended by the supervisor's confirmation, not the grace running out


def test_in_flight_stream_ends_with_terminal_engine_restarting_event(
        engine: FakeEngine, make_gateway: Callable[..., GatewayHandle]) -> None:
    gw = make_gateway()
    status = _supervised(gw)
    engine.reply = Reply(events=[chunk({"delta": {"role": "assistant", "content": "he"}}),
                                 {"error": {"message": "EngineCore died", "code": 500}}],
                         done=False, gaps={1: 0.8})
    _die_soon(status, 0.4)
    with httpx.Client(base_url=gw.url, headers=AUTH) as client:
        resp = client.post("/v1/chat/completions", json=chat_body(stream=True))
    events, done = sse_json(resp.text)
    assert resp.status_code == 200 and done
    assert events[0]["choices"][0]["delta"]["content"] == "he"
    assert events[-1]["error"]["code"] == "engine_restarting"


def test_unsupervised_gateway_keeps_502_without_delay(
        engine: FakeEngine, gateway: GatewayHandle, client: httpx.Client) -> None:
    engine.reply = Reply(status=500, body={"error": {"message": "boom"}})
    waits = _spy_wait_down(gateway.state.engine)
    resp = client.post("/v1/chat/completions", json=chat_body(), headers=AUTH)
    assert resp.status_code == 502 and resp.json()["error"]["code"] == "upstream_error"
    assert waits == []  # no grace: the gateway never waited for a death


def test_live_engine_failure_stays_502_after_the_grace(
        engine: FakeEngine, make_gateway: Callable[..., GatewayHandle]) -> None:
    gw = make_gateway()
    _supervised(gw)
    engine.reply = Reply(status=500, body={"error": {"message": "boom"}})
    with httpx.Client(base_url=gw.url, headers=AUTH) as client:
        resp = client.post("/v1/chat/completions", json=chat_body())
    assert resp.status_code == 502 and resp.json()["error"]["code"] == "upstream_error"
