"""Regression test ``seed-cpu-generator-offset`` on the real CPU engine (quirk entry in
``policies/engine-quirks.json``; RBLN-SW/vllm-rbln PR#1025, qualcomm/vllm-qaic PR#92).

32 concurrent seeded ``tool_choice="required"`` calls with a 128-token step budget (every
prefill is split across steps, the condition of the crash). The gateway refuses each with
``400 unsupported_on_engine`` naming ``seed`` and the fix; the engine survives and serves the
same requests without ``seed``. ``APPLIANCE_REPRODUCE_QUIRKS=1`` also sends the seeded
requests straight to the engine (bypassing the gateway) to check the quirk is still
needed on the installed version: the engine must die there (and is then restarted by the
supervisor).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator

import httpx
import pytest
from reliability_helpers import Served, chaos_policy, start_served, tool_body

from appliance.builtin.model import PreparedModel, prepare
from appliance.engine.launcher import engine_get

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    model: PreparedModel = prepare()
    handle = start_served(model, chaos_policy(tmp_path_factory.mktemp("logs")))
    try:
        yield handle
    finally:
        handle.app.stop()


def _engine_healthy(served: Served) -> bool:
    engine = served.app.runs[0].engine
    assert engine is not None
    try:
        status, _ = engine_get(engine.spec.socket_path, "/health", timeout=5.0)
    except OSError:
        return False
    return status == 200


def test_seed_cpu_generator_offset(served: Served) -> None:
    async def run() -> tuple[list[httpx.Response], float, list[httpx.Response]]:
        async with served.client() as client:
            t0 = time.perf_counter()
            seeded = await asyncio.gather(*(
                client.post("/v1/chat/completions", json=tool_body(i, seed=i))
                for i in range(32)))
            refused_s = time.perf_counter() - t0
            plain = await asyncio.gather(*(
                client.post("/v1/chat/completions", json=tool_body(i)) for i in range(32)))
            return seeded, refused_s, plain

    seeded, refused_s, plain = asyncio.run(run())
    for resp in seeded:
        assert resp.status_code == 400, resp.text
        err = resp.json()["error"]
        assert err["code"] == "unsupported_on_engine"
        assert err["param"] == "seed"
        assert err["reason"] == "seed-cpu-generator-offset"
        assert "Fix: omit seed" in err["message"]
    assert _engine_healthy(served)
    valid = 0
    for resp in plain:
        assert resp.status_code == 200, resp.text
        call = resp.json()["choices"][0]["message"]["tool_calls"][0]
        assert call["function"]["name"] == "get_weather"
        json.loads(call["function"]["arguments"])
        valid += 1
    assert _engine_healthy(served)
    print(f"\nseed-cpu-generator-offset: 32/32 seeded refused with 400 in {refused_s * 1000:.0f} "
          f"ms total; engine alive; the same 32 unseeded served: {valid}/32 valid tool calls")


def test_null_seed_is_absent_on_the_real_engine(served: Served) -> None:
    """``seed: null`` (what openai's SDK sends for ``seed=None``) means absent: 32 concurrent
    such requests, with the other sampling fields null too, are served as unseeded ones and
    the engine the seeded kind kills stays healthy (the field never reaches it)."""
    nulls = {"seed": None, "top_p": None, "n": None, "stop": None, "presence_penalty": None,
             "frequency_penalty": None, "logprobs": None, "top_logprobs": None, "user": None}

    async def run() -> list[httpx.Response]:
        async with served.client() as client:
            return await asyncio.gather(*(
                client.post("/v1/chat/completions", json=tool_body(i, **nulls))
                for i in range(32)))

    answers = asyncio.run(run())
    calls = 0
    for resp in answers:
        assert resp.status_code == 200, resp.text
        choice = resp.json()["choices"][0]
        if choice["finish_reason"] == "length":  # a call cut by max_tokens is withheld
            assert "tool_calls" not in choice["message"], resp.text
            continue
        call = choice["message"]["tool_calls"][0]
        assert call["function"]["name"] == "get_weather"
        json.loads(call["function"]["arguments"])
        calls += 1
    assert calls >= 16, f"{calls}/32 answers were whole tool calls"
    assert _engine_healthy(served)


@pytest.mark.skipif(os.environ.get("APPLIANCE_REPRODUCE_QUIRKS") != "1",
                    reason="set APPLIANCE_REPRODUCE_QUIRKS=1 to re-check that the quirk is "
                    "still needed (kills the engine once)")
def test_seed_quirk_still_needed_on_this_engine(served: Served) -> None:
    engine = served.app.runs[0].engine
    assert engine is not None
    sock, key = engine.spec.socket_path, engine.spec.api_key

    async def via_gateway(i: int) -> tuple[int, str]:
        async with served.client(timeout=120) as client:
            r = await client.post("/v1/chat/completions", json=tool_body(i, max_tokens=200))
            return r.status_code, "" if r.status_code == 200 else r.json()["error"]["code"]

    async def run() -> list[int | str]:
        gateway_side = [asyncio.create_task(via_gateway(i)) for i in range(8)]
        transport = httpx.AsyncHTTPTransport(uds=str(sock))
        async with httpx.AsyncClient(transport=transport, base_url="http://engine",
                                     timeout=120, headers={"Authorization": f"Bearer {key}"}
                                     ) as client:
            async def one(i: int) -> int | str:
                try:
                    r = await client.post("/v1/chat/completions", json=tool_body(i, seed=i))
                    return r.status_code
                except httpx.HTTPError as exc:
                    return type(exc).__name__
            direct = list(await asyncio.gather(*(one(i) for i in range(32))))
        answers = await asyncio.gather(*gateway_side)
        # requests in flight through the gateway when EngineCore died: served or 503
        assert all(a in ((200, ""), (503, "engine_restarting")) for a in answers), answers
        return direct

    sup = served.app.runs[0].supervisor
    assert sup is not None
    t0 = time.monotonic()
    results = asyncio.run(run())
    deadline = time.monotonic() + 30
    while sup.status.deaths == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    print(f"\nseeded straight to the engine: {results} after {time.monotonic() - t0:.1f} s; "
          f"supervisor saw {sup.status.deaths} death(s): {sup.status.reason}")
    assert sup.status.deaths >= 1, "the engine survived: re-test and narrow the quirk's range"
    log = sup.log_path.read_text(errors="replace")
    assert "CPU Generator does not use offset" in log
    deadline = time.monotonic() + 4 * served.app.timings.engine_ready_s
    while not sup.status.ready:
        assert time.monotonic() < deadline, "engine not restarted"
        time.sleep(0.5)
    assert _engine_healthy(served)
