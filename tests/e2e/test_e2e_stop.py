"""Stop means stop (issue 36), on the real vLLM CPU engine: a SIGTERM or SIGINT in any phase
of ``appliance demo`` / ``appliance serve`` ends the appliance with exit status 128+signum,
and within 10 s of its exit nothing it started is left (its engine's API server, EngineCore
and Worker, the reaper); a SIGKILLed appliance leaves no engine after 10 s.

Each case starts the real CLI as a child of the test, follows its stderr and sends the
signal when the phase's line appears (and, for the readiness wait, when vLLM's EngineCore
runs), after listing the child's process tree from ``/proc`` (:mod:`proc_tree`). Only the
test's own child is ever signalled. Engine starts are the cost (30-90 s each on 2 busy
cores): the phases before the engine cost none, the engine-start phase a few seconds.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from proc_tree import Proc, alive, describe, tree, wait_gone

from appliance.builtin.model import prepare

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "policies" / "cpu-demo.toml"
APPLIANCE = [sys.executable, "-m", "appliance.cli"]
LEFT_S = 10.0  # everything started is gone this long after the appliance's exit
START_TIMEOUT_S = 600.0


@dataclass
class Run:
    """An ``appliance`` child whose stderr lines are collected as they come."""

    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    _new: queue.Queue[str] = field(default_factory=queue.Queue)

    def follow(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            self._new.put(line)
        self._new.put("")

    def wait_line(self, text: str, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self._new.get(timeout=1.0)
            except queue.Empty:
                continue
            if text in line:
                return
            if line == "":
                break
        raise AssertionError(f"no line with {text!r}; output:\n{''.join(self.lines)[-4000:]}")

    def log(self) -> str:
        return "".join(self.lines)[-4000:]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_policy(tmp_path: Path, extra: str = "") -> Path:
    """The demo policy with absolute paths, engine logs in ``tmp_path`` and ``extra``."""
    policy = tmp_path / "policy.toml"
    text = POLICY.read_text(encoding="utf-8").replace(
        'advisories = "advisories.json"', f'advisories = "{POLICY.parent / "advisories.json"}"'
    ).replace("port = 8000", f"port = {free_port()}")  # serve: never a neighbour's port
    policy.write_text(text + f'\n[supervisor]\nlog_dir = "{tmp_path / "logs"}"\n' + extra,
                      encoding="utf-8")
    return policy


def start(command: list[str], tmp_path: Path) -> Run:
    policy = tmp_path / "policy.toml"
    if not policy.exists():
        write_policy(tmp_path)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([*APPLIANCE, *command, "--policy", str(policy)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    run = Run(proc)
    threading.Thread(target=run.follow, daemon=True).start()
    return run


def engine_core_up(run: Run) -> bool:
    """vLLM's API server has started its EngineCore (a second process in its group)."""
    procs = tree(run.proc.pid)
    return len(procs) >= 4  # the appliance, the reaper, the API server, EngineCore


def wait_for(check: Callable[[], bool], timeout_s: float, what: str, run: Run) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert run.proc.poll() is None, f"appliance exited before {what}:\n{run.log()}"
        assert time.monotonic() < deadline, f"no {what} within {timeout_s:.0f} s:\n{run.log()}"
        time.sleep(0.2)


def stop_and_check(run: Run, signum: int, second: int | None = None) -> float:
    """Send ``signum`` (then ``second`` once draining begins); assert exit 128+signum and
    that the whole tree listed just before is gone within LEFT_S. Returns seconds from
    the signal to the appliance's exit."""
    procs: set[Proc] = tree(run.proc.pid)
    assert (run.proc.pid, next(iter(s for p, s in procs if p == run.proc.pid))) in procs
    t0 = time.monotonic()
    run.proc.send_signal(signum)
    if second is not None:
        run.wait_line("draining", 120)
        if run.proc.poll() is None:
            run.proc.send_signal(second)
    try:
        status = run.proc.wait(timeout=120)
    except subprocess.TimeoutExpired:  # pragma: no cover - the failure being tested
        run.proc.kill()
        raise AssertionError(f"appliance still running 120 s after the signal:\n{run.log()}")
    exit_s = time.monotonic() - t0
    left = wait_gone(procs, LEFT_S)
    assert not left, f"left running {LEFT_S:.0f} s after exit: {describe(left)}\n{run.log()}"
    assert status == 128 + signum, f"exit status {status}:\n{run.log()}"
    print(f"\n{signal.Signals(signum).name}: {len(procs)} processes, appliance exit after "
          f"{exit_s:.1f} s, all gone; {os.getloadavg()[0]:.1f} load")
    return exit_s


@pytest.fixture(scope="module", autouse=True)
def _built_in_model() -> None:
    prepare()  # cached before the first timed phase


SIGNALS = [signal.SIGTERM, signal.SIGINT]


@pytest.mark.parametrize("signum", SIGNALS, ids=["TERM", "INT"])
@pytest.mark.parametrize("command", [["demo", "--once"], ["serve-store"]], ids=["demo", "serve"])
def test_stop_before_the_engine(tmp_path: Path, signum: int, command: list[str]) -> None:
    """Verify/scan/preflight (demo) and the store check (serve --model NAME)."""
    if command == ["serve-store"]:
        command = serve_store_command(tmp_path)
        run = start(command, tmp_path)
        run.wait_line("store: ")
    else:
        run = start(command, tmp_path)
        run.wait_line("verify: ok")
    stop_and_check(run, signum)
    assert "engine: starting" not in run.log() or "while starting" in run.log()


def test_sighup_stops_the_demo_and_reloads_serve(tmp_path: Path) -> None:
    """SIGHUP means stop to the demo (its terminal went away), reload to serve."""
    (tmp_path / "demo").mkdir()
    demo = start(["demo", "--once"], tmp_path / "demo")
    demo.wait_line("verify: ok")
    stop_and_check(demo, signal.SIGHUP)
    run = start(serve_store_command(tmp_path), tmp_path)
    run.wait_line("store: ")
    run.proc.send_signal(signal.SIGHUP)
    run.wait_line("scan: clean")  # went on
    stop_and_check(run, signal.SIGTERM)


@pytest.mark.parametrize("signum", SIGNALS, ids=["TERM", "INT"])
def test_stop_while_the_engine_starts(tmp_path: Path, signum: int) -> None:
    run = start(["demo", "--once"], tmp_path)
    run.wait_line("engine: starting vLLM")
    wait_for(lambda: len(tree(run.proc.pid)) >= 3, 60, "the engine process", run)
    stop_and_check(run, signum)
    assert "while starting" in run.log()


@pytest.mark.parametrize("signum", SIGNALS, ids=["TERM", "INT"])
def test_stop_during_the_readiness_wait(tmp_path: Path, signum: int) -> None:
    run = start(["demo", "--once"], tmp_path)
    run.wait_line("engine: starting vLLM")
    wait_for(lambda: engine_core_up(run), START_TIMEOUT_S, "vLLM's EngineCore", run)
    stop_and_check(run, signum)
    assert "engine: ready" not in run.log()


@pytest.mark.parametrize("signum", SIGNALS, ids=["TERM", "INT"])
def test_stop_during_the_demos_first_call(tmp_path: Path, signum: int) -> None:
    """The Ctrl-C of issue 36 was ignored here, the SIGTERM orphaned the engine."""
    run = start(["demo"], tmp_path)
    run.wait_line("gateway: listening")
    stop_and_check(run, signum)
    assert "serving until interrupted" not in run.log()


@pytest.mark.parametrize(("signum", "second"), [(signal.SIGTERM, signal.SIGINT),
                                                (signal.SIGINT, signal.SIGTERM)],
                         ids=["TERM-then-INT", "INT-then-TERM"])
def test_stop_while_serving_and_again_while_draining(tmp_path: Path, signum: int,
                                                      second: int) -> None:
    run = start(["demo"], tmp_path)
    run.wait_line("serving until interrupted")
    stop_and_check(run, signum, second)
    assert "draining" in run.log()
    print("second signal during the stop:", "again while stopping" in run.log())


def test_sigkill_leaves_no_engine(tmp_path: Path) -> None:
    """No stop path at all: the reaper stops the engine's whole group."""
    run = start(["demo", "--once"], tmp_path)
    run.wait_line("engine: starting vLLM")
    wait_for(lambda: engine_core_up(run), START_TIMEOUT_S, "vLLM's EngineCore", run)
    procs = tree(run.proc.pid)
    run.proc.kill()
    run.proc.wait(timeout=30)
    left = wait_gone(procs, LEFT_S)
    assert not left, f"left running {LEFT_S:.0f} s after SIGKILL: {describe(left)}"
    assert alive(procs) == set()


def serve_store_command(tmp_path: Path) -> list[str]:
    """``serve --model smol`` from a store in ``tmp_path`` holding the built-in model."""
    from appliance.store import Store, import_model

    model = prepare()
    store = tmp_path / "store"
    import_model(Store(store), model.model_dir, model.public_key, name="smol")
    write_policy(tmp_path, f'[store]\nroot = "{store}"\nallow_owner_serve = true\n')
    keys = tmp_path / "api-keys"
    keys.write_text("k" * 32 + "\n", encoding="utf-8")
    return ["serve", "--model", "smol", "--public-key", str(model.public_key),
            "--api-key-file", str(keys)]
