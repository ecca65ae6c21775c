"""Bounded waiting on the real CPU engine (issue 23): 1,000 concurrent short chat requests
against the demo (policies/cpu-demo.toml, the built-in model) with
``[admission] max_queue_wait_s = 10``: every request is answered 200, 429 or 503 within
``max_queue_wait_s + 5 s``, none later; the 503s are ``overloaded`` with a ``Retry-After``;
every request that started waited at most ``max_queue_wait_s`` (the gateway's queue-time
histogram).

The 1,000 clients run in a child process (aiohttp, one connection each), so their event
loop does not share an interpreter with the gateway. Time box: one engine start (about
65-105 s on the 2-core machine) and at most ``WAIT_S + 5 s`` of requests. Run under
``flock /tmp/engine.lock``. Measured (2026-12-03, 2-core host shared with other work):
with the demo's default ``max_running`` (= ``max_num_seqs`` = 32), 33 x 200 / 967 x 503,
slowest 14.07 s (load 5), and 32 x 200 / 968 x 503, slowest 16.67 s (load 11: the first
batch of 32 alone took longer than 10 s, past the bound); hence ``MAX_RUNNING``. With it
(load 12): 16 x 200, 984 x 503 ``overloaded``, slowest 14.64 s, measured service rate
1.18 requests/s.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from reliability_helpers import POLICY, Served, start_served

from appliance.builtin.model import prepare
from appliance.config.policy import load_policy

pytestmark = pytest.mark.e2e

WAIT_S = 10.0
CLIENTS = 1000
# Engine slots the gateway fills. The bound is on the answer (wait + service), so a started
# request must finish within 5 s: on the 2-core CPU engine a full batch of the demo's 32
# sequences took 10-17 s on a loaded host (measured), 8 at a time keeps each one short.
MAX_RUNNING = 8

BURST = r"""
import asyncio, json, sys, time
import aiohttp

url, key, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
body = json.dumps({"model": "appliance-model", "max_tokens": 8, "temperature": 0,
                   "messages": [{"role": "user", "content": "Say hi."}]})
headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}


async def main():
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=300)) as session:
        async def one(i):
            t0 = time.monotonic()
            try:
                async with session.post(url + "/v1/chat/completions", data=body,
                                        headers=headers) as resp:
                    raw = await resp.read()
                    code = ""
                    if resp.status != 200:
                        code = json.loads(raw)["error"]["code"]
                    return [resp.status, time.monotonic() - t0, code,
                            resp.headers.get("retry-after")]
            except Exception as exc:
                return [0, time.monotonic() - t0, type(exc).__name__, None]
        return await asyncio.gather(*(one(i) for i in range(n)))

print(json.dumps(asyncio.run(main())))
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    policy = load_policy(POLICY)
    state = tmp_path_factory.mktemp("state") / "quotas.json"
    policy = policy.model_copy(update={"admission": policy.admission.model_copy(update={
        "max_queue_wait_s": WAIT_S, "max_pending": 4096, "max_running": MAX_RUNNING,
        "quota_state_file": state})})
    handle = start_served(prepare(), policy)
    try:
        yield handle
    finally:
        handle.app.stop()


def test_one_thousand_concurrent_answered_within_max_queue_wait(served: Served) -> None:
    out = subprocess.run([sys.executable, "-c", BURST, served.url, served.key, str(CLIENTS)],
                         capture_output=True, text=True, timeout=WAIT_S + 240, check=True)
    results = json.loads(out.stdout)
    codes = [r[0] for r in results]
    slowest = max(r[1] for r in results)
    summary = {c: codes.count(c) for c in sorted(set(codes))}
    print(f"{CLIENTS} concurrent: {summary}, slowest {slowest:.2f} s")
    assert set(codes) <= {200, 429, 503}, summary
    assert codes.count(200) > 0
    assert slowest <= WAIT_S + 5.0
    for status, _, code, retry in results:
        if status == 503:
            assert code == "overloaded" and retry is not None and int(retry) >= 1
    metrics = httpx.get(served.url + "/metrics", timeout=30,
                        headers={"Authorization": f"Bearer {served.key}"}).text
    lines = dict(ln.rsplit(" ", 1) for ln in metrics.splitlines()
                 if ln.startswith("gateway_queue_wait_seconds_"))
    started = float(lines["gateway_queue_wait_seconds_count"])
    assert started == float(lines['gateway_queue_wait_seconds_bucket{le="10.0"}'])
    assert started == codes.count(200)
    rate = next(ln for ln in metrics.splitlines() if ln.startswith("gateway_service_rate "))
    print(f"measured {rate} requests/s")
