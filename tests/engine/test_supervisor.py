"""Supervised engine without vLLM: a stand-in child serving /health on the Unix socket.

Modes (argv[3]): ``serve`` (healthy until killed), ``crash`` (healthy, then exits 7 after
1 s with a last log line), ``sick`` (/health answers 503 once ``<marks>/sick`` exists, the
way vLLM answers after EngineCore died), ``wedge`` (/health answers its first 3 probes,
then never again: alive and running, not answering), ``slow`` (every other /health answer
takes 0.6 s), ``family`` (serves, with a child process in its group, pid in
``<marks>/child``). Every start appends a line to ``<marks>/starts``. ``POST`` requests (chat
through a gateway) are never answered: a stream gets its 200 SSE head, then nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from engine_stand_in import demo_spec, use_stand_in

from appliance.config.keys import KeyLimits, add_key
from appliance.config.policy import load_policy
from appliance.config.reliability import SupervisorPolicy
from appliance.engine import launcher
from appliance.engine.launcher import EngineSpec
from appliance.engine.supervisor import UNHEALTHY_PROBES, RotatingLog, Supervisor, group_members
from appliance.gateway import GatewaySettings, start_in_thread
from appliance.serve import Appliance, ModelRun

REPO = Path(__file__).resolve().parents[2]

STAND_IN = r'''
import http.server, os, socketserver, sys, threading, time, pathlib
sock, marks, mode = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3]
with open(marks / "starts", "a") as f:
    f.write(f"{os.getpid()}\n")
print("stand-in engine starting", flush=True)
probes = [0]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        probes[0] += 1
        if mode == "wedge" and probes[0] > 3 or mode == "slow" and probes[0] % 2:
            time.sleep(3600 if mode == "wedge" else 0.6)
        sick = mode == "sick" and (marks / "sick").exists()
        self.send_response(503 if sick else 200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if b'"stream":true' in body.replace(b" ", b""):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
        time.sleep(3600)
    def log_message(self, *a): pass
class S(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    def get_request(self):
        request, _ = super().get_request(); return request, ("local", 0)
server = S(sock, H)
if mode == "family":  # a child in the same process group, like vLLM's EngineCore
    import subprocess
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    (marks / "child").write_text(str(child.pid))
if mode == "crash":
    def die():
        time.sleep(1.0)
        print("RuntimeError: CPU Generator does not use offset", flush=True)
        os._exit(7)
    threading.Thread(target=die, daemon=True).start()
server.serve_forever()
'''


def _setup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mode: str) -> tuple[EngineSpec,
                                                                               Path]:
    return demo_spec(tmp_path), use_stand_in(monkeypatch, tmp_path, STAND_IN, mode)


def _policy(tmp_path: Path, **values: object) -> SupervisorPolicy:
    base: dict[str, object] = {"log_dir": tmp_path / "logs", "restart_backoff_initial_s": 0.05,
                               "restart_backoff_max_s": 0.2}
    base.update(values)
    return SupervisorPolicy.model_validate(base)


def _record_probes(sup: Supervisor) -> list[int | None]:
    """Every /health probe answer of the supervisor's watch loop, in order (None: none)."""
    answers: list[int | None] = []
    real = sup._probe

    def probe() -> int | None:
        answers.append(real())
        return answers[-1]

    sup._probe = probe  # type: ignore[method-assign]
    return answers


def _wait(predicate: object, timeout: float) -> float:
    t0 = time.monotonic()
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() - t0 < timeout, "condition not reached in time"
        time.sleep(0.01)
    return time.monotonic() - t0


def test_sigkill_marks_down_on_the_exit_and_restarts_same_spec(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    spec, marks = _setup(monkeypatch, tmp_path, "serve")
    sup = Supervisor(spec, _policy(tmp_path), startup_timeout_s=30)
    sup.start()
    try:
        first = sup.engine
        assert first is not None and first.proc is not None and sup.status.ready
        probes = _record_probes(sup)
        os.kill(first.proc.pid, signal.SIGKILL)
        _wait(lambda: not sup.status.ready, 5)
        # Found by the process poll, not by probes running out: no failed probe counted.
        assert "engine exited with status -9" in sup.status.reason
        assert all(answer == 200 for answer in probes), probes
        assert sup.status.state == "restarting"
        assert sup.status.retry_after_s() >= 1
        _wait(lambda: sup.status.ready, 20)
        assert sup.status.restarts == 1 and sup.engine is not first
        assert sup.engine is not None and sup.engine.spec is spec  # same staged copy
        assert len((marks / "starts").read_text().split()) == 2
        assert sup.restart_times and sup.restart_times[0] < 20
    finally:
        sup.stop()
    log = (tmp_path / "logs" / "engine.log").read_text()
    assert log.count("stand-in engine starting") == 2
    assert "engine exited with status -9" in log
    assert (tmp_path / "logs" / "engine.log").stat().st_mode & 0o777 == 0o600


def test_health_503_is_a_death_and_the_group_is_killed(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    spec, marks = _setup(monkeypatch, tmp_path, "sick")
    sup = Supervisor(spec, _policy(tmp_path), startup_timeout_s=30)
    sup.start()
    try:
        first = sup.engine
        assert first is not None and first.proc is not None
        probes = _record_probes(sup)
        (marks / "sick").write_text("1")
        _wait(lambda: not sup.status.ready, 5)
        assert "503" in sup.status.reason
        # Declared dead on exactly UNHEALTHY_PROBES non-200 answers in a row.
        failed = [answer for answer in probes if answer != 200]
        assert failed == [503] * UNHEALTHY_PROBES, probes
        _wait(lambda: first.proc is not None and first.proc.poll() is not None, 5)
        (marks / "sick").unlink()
        _wait(lambda: sup.status.ready, 20)
    finally:
        sup.stop()


def test_crash_loop_sets_fatal_with_last_log_lines_and_backoff_grows(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    spec, marks = _setup(monkeypatch, tmp_path, "crash")
    policy = _policy(tmp_path, max_deaths=3, death_window_s=60, restart_backoff_initial_s=0.1,
                     restart_backoff_max_s=0.4)
    sup = Supervisor(spec, policy, startup_timeout_s=30)
    sup.start()
    try:
        _wait(sup.fatal.is_set, 30)
    finally:
        sup.stop()
    assert sup.status.state == "failed"
    assert "3 deaths within 60 s" in sup.fatal_message
    assert "CPU Generator does not use offset" in sup.fatal_message
    assert str(tmp_path / "logs" / "engine.log") in sup.fatal_message
    assert len((marks / "starts").read_text().split()) == 3  # no 4th start
    assert sup._backoff() == pytest.approx(0.4)  # 0.1, 0.2, then capped at 0.4


def test_appliance_wait_exits_1_on_crash_loop(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    spec, _ = _setup(monkeypatch, tmp_path, "crash")
    policy = load_policy(REPO / "policies" / "cpu-demo.toml")
    policy = policy.model_copy(update={"supervisor": _policy(tmp_path, max_deaths=2)})
    sup = Supervisor(spec, policy.supervisor, startup_timeout_s=30)
    sup.start()
    app = Appliance(policy=policy, model_dir=tmp_path, public_key=tmp_path / "k",
                    api_keys=[], runs=[_run(spec, sup)])
    assert app.wait() == 1  # returns once the crash loop is declared
    err = capsys.readouterr().err
    assert "engine crash loop: 2 deaths" in err and "CPU Generator" in err
    assert app.runs[0].supervisor is None  # stopped


def _run(spec: EngineSpec, sup: Supervisor) -> ModelRun:
    """The one model of ``serve`` with its started supervisor, as ``Appliance.runs`` holds it."""
    from appliance.config.models import ServedModel

    return ModelRun(ServedModel(spec.served_name, spec.engine, path=spec.model_dir),
                    spec.model_dir, "d", supervisor=sup, spec=spec)


def _two_models(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                **supervisor: object) -> Appliance:
    """An appliance serving ``good`` (stand-in ``serve``) and ``bad`` (``crash``, two
    deaths end its loop) through one gateway, as ``serve`` starts them for ``[[models]]``."""
    from appliance.config.models import ServedModel

    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    for name in ("good", "bad"):
        (tmp_path / name).mkdir()

    def argv(spec: EngineSpec) -> list[str]:
        mode = "crash" if spec.served_name == "bad" else "serve"
        return [sys.executable, str(script), str(spec.socket_path),
                str(tmp_path / spec.served_name), mode]

    monkeypatch.setattr(launcher, "build_argv", argv)
    policy = load_policy(REPO / "policies" / "cpu-demo.toml")
    policy = policy.model_copy(update={"supervisor": _policy(tmp_path, max_deaths=2,
                                                             **supervisor)})
    runs = []
    for name in ("good", "bad"):
        spec = EngineSpec(model_dir=tmp_path / "model", served_name=name,
                          engine=policy.engine, runtime_dir=tmp_path / f"run-{name}")
        sup = Supervisor(spec, policy.supervisor, startup_timeout_s=30,
                         log_name=f"engine-{name}.log")
        sup.start()
        runs.append(ModelRun(ServedModel(name, policy.engine, ref=name), tmp_path, "d",
                             supervisor=sup, spec=spec))
    gateway = start_in_thread(GatewaySettings.model_validate({
        "models": [{"name": run.spec.served_name, "upstream_uds": run.spec.socket_path}
                   for run in runs if run.spec is not None],
        "api_keys": ["k" * 20]}))
    for run in runs:
        assert run.supervisor is not None
        gateway.state.attach_engine(run.supervisor.status, run.served.served_name)
    return Appliance(policy=policy, model_dir=tmp_path, public_key=tmp_path / "k",
                     api_keys=[], gateway=gateway, runs=runs)


def test_one_models_crash_loop_leaves_the_others_serving(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    """[[models]]: the failed model is refused 503 engine_unavailable, readiness is
    degraded, the other model is ready; SIGTERM still drains and exits 0."""
    app = _two_models(monkeypatch, tmp_path)
    bad = app.runs[1].supervisor
    assert bad is not None and app.gateway is not None
    url = app.gateway.url
    seen: dict[str, object] = {}

    def drive() -> None:
        _wait(bad.fatal.is_set, 30)
        time.sleep(0.6)  # wait() has seen it
        auth = {"Authorization": "Bearer " + "k" * 20}
        with httpx.Client(base_url=url, timeout=5) as client:
            refused = client.post("/v1/chat/completions", headers=auth, json={
                "model": "bad", "messages": [{"role": "user", "content": "hi"}]})
            seen["bad"] = (refused.status_code, refused.json()["error"]["code"])
            ready = client.get("/health/ready")
            seen["ready"] = (ready.status_code, ready.json())
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=drive, daemon=True).start()
    assert app.wait() == 128 + signal.SIGTERM  # stopped by SIGTERM (issue 36)
    assert seen["bad"] == (503, "engine_unavailable")
    assert seen["ready"] == (200, {"status": "degraded",
                                   "models": {"good": "ready", "bad": "engine_unavailable"}})
    err = capsys.readouterr().err
    assert "engine crash loop: 2 deaths" in err
    assert "model(s) bad given up after a crash loop" in err


def test_one_models_crash_loop_ends_serve_when_the_policy_says_so(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    app = _two_models(monkeypatch, tmp_path, exit_on_model_failure=True)
    assert app.wait() == 1


def test_rotating_log_keeps_bounded_backups(tmp_path: Path) -> None:
    log = RotatingLog(tmp_path / "engine.log", max_bytes=4096, backups=2)
    for i in range(100):
        log.write(f"line {i:04d} ".encode() * 20 + b"\n")
    log.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["engine.log", "engine.log.1", "engine.log.2"]
    assert all((tmp_path / n).stat().st_size <= 4096 for n in names)
    assert "line 0099" in (tmp_path / "engine.log").read_text()


def test_sighup_reloads_keys_and_audit_sigterm_drains_and_exits_143(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The real signal path of ``appliance serve`` (``Appliance.wait``), with the stand-in
    engine behind a real gateway."""
    spec, _ = _setup(monkeypatch, tmp_path, "serve")
    policy = load_policy(REPO / "policies" / "cpu-demo.toml")
    policy = policy.model_copy(update={"supervisor": _policy(tmp_path, drain_timeout_s=2)})
    sup = Supervisor(spec, policy.supervisor, startup_timeout_s=30)
    sup.start()
    keys, audit = tmp_path / "keys.json", tmp_path / "audit.jsonl"
    first = add_key(keys, "first", KeyLimits())
    gateway = start_in_thread(GatewaySettings(
        upstream_uds=spec.socket_path, served_model_name="m", keys_file=keys, audit_log=audit))
    gateway.state.attach_engine(sup.status)
    app = Appliance(policy=policy, model_dir=tmp_path, public_key=tmp_path / "k",
                    api_keys=[], runs=[_run(spec, sup)], gateway=gateway)
    seen: dict[str, int] = {}

    def drive() -> None:
        time.sleep(0.5)  # wait() has installed its handlers
        with httpx.Client(base_url=gateway.url, timeout=5) as client:
            auth = {"Authorization": f"Bearer {first}"}
            seen["before"] = client.get("/v1/models", headers=auth).status_code
            second = add_key(keys, "second", KeyLimits())
            audit.rename(tmp_path / "audit.jsonl.1")
            os.kill(os.getpid(), signal.SIGHUP)
            deadline = time.monotonic() + 5
            while gateway.state.keys.reloads < 1 and time.monotonic() < deadline:
                time.sleep(0.02)
            seen["second"] = client.get("/v1/models", headers={
                "Authorization": f"Bearer {second}"}).status_code
            seen["ready"] = client.get("/health/ready").status_code
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=drive, daemon=True).start()
    assert app.wait() == 128 + signal.SIGTERM  # stopped by SIGTERM (issue 36)
    assert seen == {"before": 200, "second": 200, "ready": 200}
    assert audit.exists() and "second" in audit.read_text()
    assert app.gateway is None and app.runs[0].supervisor is None


def test_stop_during_a_restart_returns_promptly(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    spec, marks = _setup(monkeypatch, tmp_path, "serve")
    sup = Supervisor(spec, _policy(tmp_path, restart_backoff_initial_s=0.0), startup_timeout_s=300)
    sup.start()
    first = sup.engine
    assert first is not None and first.proc is not None
    os.kill(first.proc.pid, signal.SIGKILL)
    _wait(lambda: len((marks / "starts").read_text().split()) == 2, 10)  # restart begun
    t0 = time.monotonic()
    sup.stop()
    assert time.monotonic() - t0 < 25
    assert sup.engine is not None and sup.engine.proc is not None
    assert sup.engine.proc.poll() is not None


# -- hung engine: alive, not answering (issue 7 follow-up) -------------------------------
HUNG = {"probe_interval_s": 0.1, "probe_timeout_s": 0.2, "hung_probes": 3}


def test_sigstopped_engine_is_declared_hung_killed_and_restarted(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    spec, marks = _setup(monkeypatch, tmp_path, "family")
    policy = _policy(tmp_path, **HUNG)
    sup = Supervisor(spec, policy, startup_timeout_s=30)
    sup.start()
    try:
        first = sup.engine
        assert first is not None and first.proc is not None and sup.status.ready
        _wait(lambda: (marks / "child").exists(), 5)
        child = int((marks / "child").read_text())
        assert sorted(group_members(first.proc.pid)) == sorted([first.proc.pid, child])
        probes = _record_probes(sup)
        os.killpg(first.proc.pid, signal.SIGSTOP)  # the whole engine: leader and child
        _wait(lambda: not sup.status.ready, 10)
        # Declared hung on exactly hung_probes unanswered probes in a row, none sooner.
        seen = list(probes)  # the restarted engine's answers may follow
        first_silent = seen.index(None)
        assert seen[first_silent:first_silent + HUNG["hung_probes"]] == [None] * HUNG[
            "hung_probes"] and seen.count(None) == HUNG["hung_probes"], seen
        assert f"engine hung: {HUNG['hung_probes']} /health probes" in sup.status.reason
        assert "engine hung" in sup.status.reason and str(first.proc.pid) in sup.status.reason
        _wait(lambda: first.proc is not None and first.proc.poll() is not None, 5)
        assert first.proc.returncode == -signal.SIGKILL  # killed although stopped
        _wait(lambda: group_members(first.proc.pid) == [], 5)  # the child too (not zombies)
        _wait(lambda: sup.status.ready, 20)
        assert sup.status.restarts == 1 and sup.status.deaths == 1
        assert len(sup._deaths) == 1  # the same crash-loop accounting as an exit
        assert sup.engine is not first and sup.engine is not None
        assert sup.engine.spec is spec  # the same staged copy
        assert len((marks / "starts").read_text().split()) == 2
    finally:
        sup.stop()
    log = (tmp_path / "logs" / "engine.log").read_text()
    assert "engine hung: 3 /health probes in a row unanswered" in log
    assert "death 1 of 5" in log and "engine start #2" in log
    err = capsys.readouterr().err
    assert "appliance: supervisor: engine hung" in err and "restarted and ready" in err


def test_wedged_engine_counts_towards_the_crash_loop(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    """A process that keeps running but stops answering /health (a blocked event loop, no
    signal involved) is a death each time; two of them end the loop like two crashes."""
    spec, marks = _setup(monkeypatch, tmp_path, "wedge")
    sup = Supervisor(spec, _policy(tmp_path, max_deaths=2, death_window_s=60, **HUNG),
                     startup_timeout_s=30)
    sup.start()
    try:
        _wait(sup.fatal.is_set, 30)
    finally:
        sup.stop()
    assert sup.status.state == "failed"
    assert "2 deaths within 60 s" in sup.fatal_message and "engine hung" in sup.fatal_message
    assert len((marks / "starts").read_text().split()) == 2  # no third start
    log = (tmp_path / "logs" / "engine.log").read_text()
    assert "death 1 of 2 within 60 s; restarting in 0.05 s" in log
    assert "death 2 of 2 within 60 s; giving up" in log


def test_slow_probes_below_the_threshold_are_not_a_death(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    """Every other probe times out (0.6 s answer, 0.2 s timeout): never 2 in a row, so a
    busy-but-alive engine is not killed."""
    spec, marks = _setup(monkeypatch, tmp_path, "slow")
    sup = Supervisor(spec, _policy(tmp_path, probe_interval_s=0.3, probe_timeout_s=0.2,
                                   hung_probes=2), startup_timeout_s=30)
    sup.start()
    try:
        time.sleep(3.0)  # about 8 probes, half of them unanswered
        assert sup.status.ready and sup.status.deaths == 0
    finally:
        sup.stop()
    assert len((marks / "starts").read_text().split()) == 1


def test_hung_engine_ends_in_flight_requests_through_the_gateway(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Requests held by a SIGSTOPped engine end once it is declared hung: 503
    ``engine_restarting`` (plain) and a terminal SSE error event (stream), not at their
    timeouts; readiness answers ``engine_restarting`` meanwhile."""
    spec, _ = _setup(monkeypatch, tmp_path, "serve")
    policy = _policy(tmp_path, restart_backoff_initial_s=2.0, restart_backoff_max_s=2.0,
                     **HUNG)
    sup = Supervisor(spec, policy, startup_timeout_s=30)
    sup.start()
    gateway = start_in_thread(GatewaySettings(upstream_uds=spec.socket_path,
                                              served_model_name="m", api_keys=["k" * 32]))
    gateway.state.attach_engine(sup.status)
    results: dict[str, tuple[int, str, float]] = {}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    auth = {"Authorization": f"Bearer {'k' * 32}"}

    def plain() -> None:
        with httpx.Client(base_url=gateway.url, timeout=30, headers=auth) as client:
            resp = client.post("/v1/chat/completions", json=body)
            results["plain"] = (resp.status_code, resp.json()["error"]["code"],
                                time.monotonic())

    def stream() -> None:
        with httpx.Client(base_url=gateway.url, timeout=30, headers=auth) as client, \
                client.stream("POST", "/v1/chat/completions",
                              json={**body, "stream": True}) as resp:
            text = "".join(resp.iter_text())
            results["stream"] = (resp.status_code, text, time.monotonic())

    threads = [threading.Thread(target=plain), threading.Thread(target=stream)]
    try:
        for thread in threads:
            thread.start()
        time.sleep(0.5)  # both are held by the engine now
        assert not results
        engine = sup.engine
        assert engine is not None and engine.proc is not None
        os.kill(engine.proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        _wait(lambda: not sup.status.ready, 10)
        with httpx.Client(base_url=gateway.url, timeout=5) as client:
            ready = client.get("/health/ready")
        assert ready.status_code == 503
        assert ready.json()["error"]["code"] == "engine_restarting"
        for thread in threads:
            thread.join(10)
    finally:
        gateway.stop()
        sup.stop()
    bound = policy.hung_after_s() + 1.0
    status, code, end = results["plain"]
    assert (status, code) == (503, "engine_restarting") and end - stopped < bound
    status, text, end = results["stream"]
    assert status == 200 and end - stopped < bound
    assert text.rstrip().splitlines()[-1].startswith("data: ") and "engine_restarting" in text


def test_group_that_survives_sigkill_is_fatal_not_a_hang(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A process stuck in the kernel ignores SIGKILL; the supervisor used to wait for it
    forever (``proc.wait()`` unbounded: never ready again, never exiting). Stand-in for the
    survivor: the watched process is a live sleeper that leads no process group, so the
    group SIGKILL does not reach it."""
    spec, _marks = _setup(monkeypatch, tmp_path, "wedge")
    policy = _policy(tmp_path, kill_settle_s=0.5, **HUNG)
    sup = Supervisor(spec, policy, startup_timeout_s=30)
    sup.start()
    engine = sup.engine
    assert engine is not None and engine.proc is not None
    real = engine.proc
    survivor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        engine.proc = survivor
        _wait(sup.fatal.is_set, 15)
        assert survivor.poll() is None  # it was never reaped: the wait was bounded
        assert "survived SIGKILL for 0.5 s" in sup.fatal_message
        assert "engine hung" in sup.fatal_message
        assert not sup.status.ready
        assert len((_marks / "starts").read_text().split()) == 1  # no restart beside it
    finally:
        survivor.kill()
        survivor.wait()
        engine.proc = real
        os.killpg(real.pid, signal.SIGKILL)
        real.wait()
        sup.stop()
