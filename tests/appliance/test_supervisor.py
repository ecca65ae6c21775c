"""Supervised engine without vLLM: a stand-in child serving /health on the Unix socket.

Modes (argv[3]): ``serve`` (healthy until killed), ``crash`` (healthy, then exits 7 after
1 s with a last log line), ``sick`` (/health answers 503 once ``<marks>/sick`` exists, the
way vLLM answers after EngineCore died). Every start appends a line to ``<marks>/starts``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from appliance import launcher
from appliance.gateway import GatewaySettings, start_in_thread
from appliance.keys import KeyLimits, add_key
from appliance.launcher import EngineSpec
from appliance.policy import load_policy
from appliance.policy_reliability import SupervisorPolicy
from appliance.serve import Appliance
from appliance.supervisor import RotatingLog, Supervisor

REPO = Path(__file__).resolve().parents[2]

STAND_IN = r'''
import http.server, os, socketserver, sys, threading, time, pathlib
sock, marks, mode = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3]
with open(marks / "starts", "a") as f:
    f.write(f"{os.getpid()}\n")
print("stand-in engine starting", flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        sick = mode == "sick" and (marks / "sick").exists()
        self.send_response(503 if sick else 200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *a): pass
class S(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    def get_request(self):
        request, _ = super().get_request(); return request, ("local", 0)
server = S(sock, H)
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
    marks = tmp_path / "marks"
    marks.mkdir()
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)

    def argv(spec: EngineSpec) -> list[str]:
        return [sys.executable, str(script), str(spec.socket_path), str(marks), mode]

    monkeypatch.setattr(launcher, "build_argv", argv)
    engine = load_policy(REPO / "policies" / "cpu-demo.toml").engine
    spec = EngineSpec(model_dir=tmp_path / "model", served_name="m", engine=engine,
                      runtime_dir=tmp_path / "run")
    return spec, marks


def _policy(tmp_path: Path, **values: object) -> SupervisorPolicy:
    base: dict[str, object] = {"log_dir": tmp_path / "logs", "restart_backoff_initial_s": 0.05,
                               "restart_backoff_max_s": 0.2}
    base.update(values)
    return SupervisorPolicy.model_validate(base)


def _wait(predicate: object, timeout: float) -> float:
    t0 = time.monotonic()
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() - t0 < timeout, "condition not reached in time"
        time.sleep(0.01)
    return time.monotonic() - t0


def test_sigkill_marks_down_within_1s_and_restarts_same_spec(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    spec, marks = _setup(monkeypatch, tmp_path, "serve")
    sup = Supervisor(spec, _policy(tmp_path), startup_timeout_s=30)
    sup.start()
    try:
        first = sup.engine
        assert first is not None and first.proc is not None and sup.status.ready
        os.kill(first.proc.pid, signal.SIGKILL)
        down_s = _wait(lambda: not sup.status.ready, 5)
        assert down_s < 1.0
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
        (marks / "sick").write_text("1")
        down_s = _wait(lambda: not sup.status.ready, 5)
        assert down_s < 1.5
        assert "503" in sup.status.reason
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
                    api_keys=[], supervisor=sup)
    assert app.wait() == 1  # returns once the crash loop is declared
    err = capsys.readouterr().err
    assert "engine crash loop: 2 deaths" in err and "CPU Generator" in err
    assert app.supervisor is None  # stopped


def test_rotating_log_keeps_bounded_backups(tmp_path: Path) -> None:
    log = RotatingLog(tmp_path / "engine.log", max_bytes=4096, backups=2)
    for i in range(100):
        log.write(f"line {i:04d} ".encode() * 20 + b"\n")
    log.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["engine.log", "engine.log.1", "engine.log.2"]
    assert all((tmp_path / n).stat().st_size <= 4096 for n in names)
    assert "line 0099" in (tmp_path / "engine.log").read_text()


def test_sighup_reloads_keys_and_audit_sigterm_drains_and_exits_0(
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
                    api_keys=[], supervisor=sup, gateway=gateway)
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
    assert app.wait() == 0
    assert seen == {"before": 200, "second": 200, "ready": 200}
    assert audit.exists() and "second" in audit.read_text()
    assert app.gateway is None and app.supervisor is None


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
