"""The stop machinery without an engine (issue 36): stop signals raised or held
(:mod:`appliance.engine.stopping`), process groups stopped whole and reaped when their
appliance is SIGKILLed (:mod:`appliance.engine.reaper`). The "engine" is a fake process tree
of ``sh`` and ``sleep``; the "appliance" a ``python -c`` child of the test. Only processes
this test started are signalled."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from proc_tree import alive, describe, tree, wait_gone

from appliance.engine.reaper import Reaper, group_members, spawn_group, stop_group
from appliance.engine.stopping import Stopped, StopSignals

REPO = Path(__file__).resolve().parents[2]
# A fake engine: a group leader with two children; the second ignores SIGTERM (a wedged
# EngineCore), the leader exits on SIGTERM without waiting for them.
FAKE_ENGINE = ["sh", "-c", "sleep 300 & (trap '' TERM; sleep 300) & wait"]


def _wait(check: object, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_stop_group_kills_members_that_outlive_the_leader() -> None:
    proc = spawn_group(FAKE_ENGINE)
    try:
        _wait(lambda: len(group_members(proc.pid)) == 3, 10)
        t0 = time.monotonic()
        assert stop_group(proc, grace_s=1.0, settle_s=5.0)
        assert group_members(proc.pid) == []
        assert time.monotonic() - t0 < 5.0
    finally:
        if group_members(proc.pid, session=proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)


def test_stop_group_of_a_leader_gone_before_stops_the_rest() -> None:
    proc = spawn_group(["sh", "-c", "(trap '' TERM; sleep 300) & exit 0"])
    proc.wait(10)
    _wait(lambda: len(group_members(proc.pid, session=proc.pid)) == 1, 10)
    assert stop_group(proc, grace_s=0.5, settle_s=5.0)
    assert group_members(proc.pid) == []


def test_reaper_stops_guarded_groups_when_the_pipe_ends_and_not_released_ones() -> None:
    reaper = Reaper(grace_s=1.0)
    kept = subprocess.Popen(["sleep", "300"], start_new_session=True)
    guarded = subprocess.Popen(FAKE_ENGINE, start_new_session=True)
    try:
        reaper.guard(kept.pid)
        reaper.guard(guarded.pid)
        reaper.release(kept.pid)
        _wait(lambda: len(group_members(guarded.pid)) == 3, 10)
        assert reaper.close(timeout=20) == 0
        guarded.wait(5)
        _wait(lambda: group_members(guarded.pid) == [], 5)
        assert kept.poll() is None  # released: not the reaper's any more
    finally:
        for proc in (kept, guarded):
            if group_members(proc.pid, session=proc.pid):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


APPLIANCE = textwrap.dedent("""
    import sys, time
    from appliance.engine.reaper import spawn_group, stop_group
    from appliance.engine.stopping import install, Stopped
    install()
    engines = []
    try:
        for _ in range(2):  # two engines, as with [[models]]
            engines.append(spawn_group({engine!r}))
        print("started", flush=True)
        while True:
            time.sleep(0.5)  # like Engine.wait_ready
    except Stopped as exc:
        for proc in engines:
            stop_group(proc, grace_s=1.0)
        sys.exit(exc.exit_status)
""")


def _appliance() -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", APPLIANCE.format(engine=FAKE_ENGINE)],
                            stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert proc.stdout is not None and proc.stdout.readline() == "started\n"
    _wait(lambda: len(tree(proc.pid)) >= 8, 10)  # 1 + reaper + 2 x 3
    return proc


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_a_stop_signal_stops_every_group_and_exits_128_plus_signum(signum: int) -> None:
    proc = _appliance()
    procs = tree(proc.pid)
    try:
        proc.send_signal(signum)
        assert proc.wait(30) == 128 + signum
        left = wait_gone(procs, 10)
        assert not left, describe(left)
    finally:
        _kill_left(procs)


def test_sigkilled_appliance_leaves_nothing_after_the_reapers_grace() -> None:
    proc = _appliance()
    procs = tree(proc.pid)
    try:
        proc.kill()
        proc.wait(10)
        left = wait_gone(procs, 10)  # reaper: SIGTERM, 5 s, SIGKILL
        assert not left, describe(left)
    finally:
        _kill_left(procs)


def _kill_left(procs: set[tuple[int, int]]) -> None:
    for pid, _ in alive(procs):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# -- StopSignals: raised at once, held in critical sections, handled by pollers ------------
@pytest.fixture
def signals() -> object:
    stop = StopSignals()
    stop.install()
    yield stop
    stop.uninstall()


def test_first_signal_raises_stopped(signals: StopSignals) -> None:
    with pytest.raises(Stopped) as info:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert info.value.exit_status == 143 and signals.signum == signal.SIGTERM


def test_critical_section_finishes_then_raises(signals: StopSignals) -> None:
    done = []
    with pytest.raises(Stopped) as info:
        with signals.critical():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)
            done.append(1)
    assert done == [1] and info.value.exit_status == 130


def test_polled_section_handles_the_stop_and_a_second_signal_escalates(
        signals: StopSignals) -> None:
    repeats: list[int] = []
    signals.on_repeat.append(lambda: repeats.append(1))
    with signals.polled():
        os.kill(os.getpid(), signal.SIGTERM)
        assert signals.event.wait(5)
        with signals.critical():  # the stop path (Appliance.stop) inside the poller
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)
    assert repeats == [1]
    signals.raise_if_requested()  # handled: never raised afterwards
    assert signals.signum == signal.SIGTERM


def test_hup_stops_only_when_asked() -> None:
    stop = StopSignals()
    stop.install(hup_stops=True)
    try:
        assert signal.SIGHUP in stop.installed
        with pytest.raises(Stopped) as info:
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(5)
        assert info.value.exit_status == 129
    finally:
        stop.uninstall()
    assert signal.getsignal(signal.SIGHUP) != stop._handle


def test_critical_in_another_thread_neither_holds_nor_raises(signals: StopSignals) -> None:
    """The supervisor restarts engines from its own thread: its critical section must not
    hold the main thread's stop, nor raise it in the supervisor thread."""
    import threading

    entered, release, errors = threading.Event(), threading.Event(), []

    def restart() -> None:
        try:
            with signals.critical():
                entered.set()
                release.wait(10)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    thread = threading.Thread(target=restart)
    thread.start()
    assert entered.wait(10)
    try:
        with pytest.raises(Stopped):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    finally:
        release.set()
        thread.join(10)
    assert errors == []
