"""A hung real CPU engine (issue 7 follow-up): the engine's whole process group is SIGSTOPped
while 4 requests (2 plain, 2 streamed) are in flight — alive, answering nothing.

Checked: the supervisor declares it hung within ``hung_probes x probe_interval_s + 1 s``
(ready false, ``/health/ready`` 503 ``engine_restarting``); the requests in flight end
right after with 503 ``engine_restarting`` / a terminal SSE ``engine_restarting`` event,
not at their timeouts; the stopped group is SIGKILLed (nothing of it left) and the engine
is restarted through the crash path (no second verify or scan, back and serving within
``RESTART_BOX_S``, ``appliance_engine_restarts_total`` 1, "engine hung" in the engine log).

Time box: one engine start and one restart (about 2 x 65 s on the 2-core machine), every
wait below bounded. Run under ``flock /tmp/engine.lock``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from reliability_helpers import (
    Served,
    chaos_policy,
    check_cut_by_failure,
    engine_running,
    long_body,
    send_long,
    start_served,
)

from appliance.builtin.model import prepare
from appliance.engine.supervisor import group_members
from appliance.preflight import model_files

pytestmark = pytest.mark.e2e

# 3 probes 1 s apart, each waiting 0.5 s: hung at most 3.5 s after the last answer
# (SupervisorPolicy.hung_after_s); asserted: within hung_probes x interval + 1 s = 4 s.
PROBES = {"probe_interval_s": 1.0, "probe_timeout_s": 0.5, "hung_probes": 3}
RESTART_BOX_S = 300.0


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("logs")


@pytest.fixture(scope="module")
def served(logs: Path) -> Iterator[Served]:
    handle = start_served(prepare(), chaos_policy(logs, restart_backoff_initial_s=0.5,
                                                  **PROBES))
    try:
        yield handle
    finally:
        handle.app.stop()





def test_sigstopped_engine_is_detected_killed_and_restarted(
        served: Served, monkeypatch: pytest.MonkeyPatch, logs: Path) -> None:
    calls: list[str] = []
    real_verify, real_scan = model_files.signing.verify_and_stage, model_files.scan_model
    monkeypatch.setattr(model_files.signing, "verify_and_stage",
                        lambda *a, **k: calls.append("verify") or real_verify(*a, **k))
    monkeypatch.setattr(model_files, "scan_model",
                        lambda *a, **k: calls.append("scan") or real_scan(*a, **k))
    sup = served.app.runs[0].supervisor
    engine = served.app.runs[0].engine
    assert sup is not None and engine is not None and engine.proc is not None
    first_start = served.app.timings.engine_ready_s
    bound = PROBES["hung_probes"] * PROBES["probe_interval_s"] + 1.0
    stopped: list[float] = []
    not_ready: list[tuple[float, str]] = []

    def watch_ready() -> None:
        # the supervisor's state, polled cheaply (a /health/ready poll would itself wait up
        # to ready_timeout_s on the hung engine); then what a load balancer sees
        while not stopped or time.monotonic() - stopped[0] < 20:
            if stopped and not sup.status.ready:
                at = time.monotonic()
                with httpx.Client(base_url=served.url, timeout=5) as client:
                    resp = client.get("/health/ready")
                not_ready.append((at, f"{resp.status_code} "
                                      f"{resp.json().get('error', {}).get('code', '')}"))
                return
            time.sleep(0.02)

    async def run() -> list[tuple[int, str, float]]:
        async with served.client(timeout=120) as client:
            tasks = [asyncio.create_task(send_long(client, i, stream=i % 2 == 1))
                     for i in range(4)]
            deadline = time.monotonic() + 60
            while engine_running(served) < 4 and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            await asyncio.sleep(1.0)
            assert engine.proc is not None
            os.killpg(engine.proc.pid, signal.SIGSTOP)  # API server and EngineCore
            stopped.append(time.monotonic())
            return list(await asyncio.gather(*tasks))

    watcher = threading.Thread(target=watch_ready, daemon=True)
    watcher.start()
    results = asyncio.run(run())
    watcher.join(25)
    stop_at = stopped[0]
    assert not_ready, "ready still true 20 s after SIGSTOP"
    ready_false_s = not_ready[0][0] - stop_at
    assert ready_false_s < bound, f"ready still true {ready_false_s:.2f} s after SIGSTOP"
    assert not_ready[0][1] == "503 engine_restarting"
    assert "engine hung" in sup.status.reason
    ended = check_cut_by_failure(results, stop_at, min_cut=2)
    assert max(ended) < bound + 2.0, ended
    # the requests end as the kernel closes the sockets; the supervisor reaps right after
    deadline = time.monotonic() + 15
    while engine.proc.poll() is None or group_members(engine.proc.pid):
        assert time.monotonic() < deadline, ("engine group still alive",
                                             group_members(engine.proc.pid))
        time.sleep(0.1)
    assert engine.proc.returncode == -signal.SIGKILL  # EngineCore went too (zombies aside)
    # Back through the crash path. The restart's duration is the engine's start time, which
    # on the shared machine varies with other load (a 50 s first start was followed by a
    # restart of over 99 s): bounded by RESTART_BOX_S, the measured ratio is printed.
    limit = max(2 * first_start, RESTART_BOX_S)
    while not sup.status.ready:
        assert time.monotonic() < stop_at + limit, f"not back after {limit:.0f} s"
        time.sleep(0.2)
    back_s = time.monotonic() - stop_at
    with httpx.Client(base_url=served.url, timeout=120,
                      headers={"Authorization": f"Bearer {served.key}"}) as client:
        ok = client.post("/v1/chat/completions", json={**long_body(0, False), "max_tokens": 8})
        assert ok.status_code == 200, ok.text
        assert "appliance_engine_restarts_total 1.0" in client.get("/metrics").text
    assert calls == []  # no new verify, no new scan
    log = (logs / "engine.log").read_text(errors="replace")
    assert "engine hung: 3 /health probes in a row unanswered within 0.5 s" in log
    assert "engine start #2" in log
    print(f"\nSIGSTOP: ready false after {ready_false_s:.2f} s (bound {bound:.0f} s); "
          f"{len(ended)}/4 ended after the stop, all within {max(ended):.2f} s (503/terminal "
          f"event); back and serving after {back_s:.1f} s (first start {first_start:.1f} s, "
          f"ratio {back_s / first_start:.2f})")
