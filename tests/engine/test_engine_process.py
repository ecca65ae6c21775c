"""Engine process handling without vLLM: a stand-in child that serves /health on the Unix
socket, spawns a grandchild, and records the signals it gets."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from engine_stand_in import demo_spec, use_stand_in

from appliance.engine.launcher import Engine, EngineSpec
from appliance.errors import LaunchError

STAND_IN = r'''
import http.server, os, signal, socketserver, subprocess, sys, pathlib
sock, marks, mode = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3]
print("stand-in engine starting", flush=True)
if mode == "die":
    print("fatal: cannot load model weights", flush=True)
    sys.exit(3)
mark = str(marks / "grandchild")
grandchild = subprocess.Popen([sys.executable, "-c",
    "import signal, sys, time, pathlib\n"
    f"def term(*a):\n    pathlib.Path({mark!r}).write_text('TERM'); sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, term)\n"
    f"pathlib.Path({mark!r} + '_ready').write_text('ok')\n"
    "time.sleep(120)"])
import time
while not pathlib.Path(mark + "_ready").exists():  # its handler is installed
    time.sleep(0.01)
def on_term(*_):
    marks.joinpath("child").write_text("TERM")
    grandchild.wait(10)
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)
if mode == "hang":
    import time; time.sleep(120)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404); self.end_headers()
    def log_message(self, *a): pass
class S(socketserver.UnixStreamServer):
    def get_request(self):
        request, _ = super().get_request(); return request, ("local", 0)
S(sock, H).serve_forever()
'''


@pytest.fixture
def spec(tmp_path: Path) -> EngineSpec:
    return demo_spec(tmp_path)


def _use_stand_in(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mode: str) -> Path:
    return use_stand_in(monkeypatch, tmp_path, STAND_IN, mode)


def test_ready_then_sigterm_reaches_the_whole_process_group(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, spec: EngineSpec) -> None:
    marks = _use_stand_in(monkeypatch, tmp_path, "serve")
    engine = Engine(spec)
    engine.start()
    try:
        assert engine.wait_ready(timeout_s=30, poll_s=0.05) < 30
        assert (spec.runtime_dir.stat().st_mode & 0o777) == 0o700
    finally:
        status = engine.stop(grace_s=10)
    assert status == 0
    assert (marks / "child").read_text() == "TERM"
    deadline = time.monotonic() + 5
    while not (marks / "grandchild").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (marks / "grandchild").read_text() == "TERM"
    assert "stand-in engine starting" in spec.log_path.read_text()


def test_engine_death_fails_with_its_last_log_lines(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, spec: EngineSpec) -> None:
    _use_stand_in(monkeypatch, tmp_path, "die")
    engine = Engine(spec)
    engine.start()
    with pytest.raises(LaunchError) as info:
        engine.wait_ready(timeout_s=30, poll_s=0.05)
    assert info.value.code == "engine_exited"
    assert "status 3" in info.value.message
    assert "fatal: cannot load model weights" in info.value.message


def test_engine_not_ready_times_out_and_is_stopped(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, spec: EngineSpec) -> None:
    _use_stand_in(monkeypatch, tmp_path, "hang")
    engine = Engine(spec)
    engine.start()
    with pytest.raises(LaunchError) as info:
        engine.wait_ready(timeout_s=1.5, poll_s=0.05)
    assert info.value.code == "engine_start_timeout"
    assert engine.proc is not None and engine.proc.poll() is not None
    assert os.path.exists(spec.log_path)
