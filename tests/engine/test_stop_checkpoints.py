"""A stop whose first raise was swallowed is raised again (:mod:`appliance.engine.stopping`).

Seen once in a clean full run of ``tests/e2e/test_e2e_stop.py::test_stop_before_the_engine
[serve-INT]``: SIGINT during ``serve``'s preflight was acted on only after the engine had
started and the gateway listened (the serving loop polled it). The handler raises
:class:`Stopped` at whatever bytecode the main thread is at; when that is a finaliser
(``__del__``: Python prints "Exception ignored in ..." and goes on) or code that catches
``BaseException``, the raise is lost, and the old rule (delivered once raised) never raised it
again. Here the swallow is forced (the signal is sent and handled inside such code), and the
next checkpoint must raise: :meth:`StopSignals.raise_if_requested`, the end of a critical
section, the phase boundaries of :meth:`appliance.serve.Appliance.start` (no engine starts;
exit status 130 through the CLI) and :meth:`~appliance.serve.Appliance.wait`."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance import serve
from appliance.cli import _run
from appliance.config.models import ServedModel
from appliance.config.policy import load_policy
from appliance.engine.runs import ModelRun
from appliance.engine.stopping import SIGNALS, Stopped, StopSignals
from appliance.serve import Appliance

REPO = Path(__file__).resolve().parents[2]


def _busy() -> None:
    """Some bytecode, where a pending signal handler runs."""
    total = 0
    for number in range(20000):
        total += number


class _SignalledWhileFinalised:
    """An object whose finaliser is running when the stop signal is handled (as a
    ``__del__``, a weakref callback or a generator closed by the collector can be)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum

    def __del__(self) -> None:
        os.kill(os.getpid(), self.signum)
        _busy()  # the handler raises Stopped in here: Python ignores it and goes on


def _swallow_in_finaliser(signum: int) -> None:
    _SignalledWhileFinalised(signum)  # no reference kept: finalised at once, in this thread
    _busy()


def _swallow_in_library(signum: int) -> None:
    try:  # library code that catches BaseException (a cleanup that forgets to re-raise)
        os.kill(os.getpid(), signum)
        _busy()
    except BaseException:  # noqa: BLE001,S110 - the swallow under test
        pass
    _busy()


SWALLOWS: dict[str, Callable[[int], None]] = {"finaliser": _swallow_in_finaliser,
                                              "library": _swallow_in_library}


@pytest.fixture
def ignored() -> Iterator[list[BaseException | None]]:
    """The exceptions Python reported as ignored ("Exception ignored in ...")."""
    seen: list[BaseException | None] = []
    previous = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: seen.append(unraisable.exc_value)
    try:
        yield seen
    finally:
        sys.unraisablehook = previous


@pytest.fixture
def signals() -> Iterator[StopSignals]:
    stop = StopSignals()
    stop.install()
    yield stop
    stop.uninstall()


# -- StopSignals: raised again at the next checkpoint until caught --------------------------
def test_a_stop_swallowed_by_a_finaliser_is_raised_at_the_next_checkpoint(
        signals: StopSignals, ignored: list[BaseException | None]) -> None:
    _swallow_in_finaliser(signal.SIGINT)
    assert [type(exc) for exc in ignored] == [Stopped]  # the swallow happened
    assert signals.requested
    with pytest.raises(Stopped) as info:
        signals.raise_if_requested()
    assert info.value.exit_status == 130 and signals.raised == 2  # handler, checkpoint
    assert signals.caught(info.value)
    signals.raise_if_requested()  # caught by the stop path: never raised again


def test_a_stop_swallowed_by_library_code_is_raised_when_a_critical_section_ends(
        signals: StopSignals) -> None:
    _swallow_in_library(signal.SIGTERM)
    assert signals.requested
    done = []
    with pytest.raises(Stopped) as info:
        with signals.critical():  # e.g. an engine start: finishes, then raises
            signals.raise_if_requested()  # held: not inside the section
            done.append(1)
    assert done == [1] and info.value.exit_status == 143 and not signals.handled


def test_no_checkpoint_raises_while_the_stop_is_on_its_way_up_or_in_another_thread(
        signals: StopSignals) -> None:
    _swallow_in_library(signal.SIGTERM)
    errors: list[BaseException] = []

    def elsewhere() -> None:
        try:
            signals.raise_if_requested()  # a supervisor thread: never raised there
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join(10)
    assert errors == []
    stopped = False
    try:
        signals.raise_if_requested()
    except Stopped:
        stopped = True
        signals.raise_if_requested()  # the stop path in its except: not cut short
        with signals.critical():  # Appliance.stop in that except: finishes, no raise
            pass
    assert stopped and signals.raised == 2 and not signals.handled  # swallowed, then here


def test_a_second_signal_after_a_swallowed_stop_still_escalates(
        signals: StopSignals) -> None:
    repeats: list[int] = []
    signals.on_repeat.append(lambda: repeats.append(1))
    _swallow_in_library(signal.SIGINT)
    os.kill(os.getpid(), signal.SIGINT)  # kills the engine groups; raises nothing itself
    _busy()
    assert repeats == [1]
    with pytest.raises(Stopped):
        signals.raise_if_requested()


def test_a_polled_section_handles_a_stop_swallowed_before_it(signals: StopSignals) -> None:
    _swallow_in_library(signal.SIGTERM)
    with signals.polled():  # the demo's serving loop: it drains instead
        assert signals.event.is_set()
    signals.raise_if_requested()
    assert signals.handled


# -- Appliance.start: a stop swallowed during preflight never starts an engine -------------
@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Appliance]:
    """An appliance of the CPU demo policy whose ``check()`` is a stand-in (one model,
    no files read) and whose engine and gateway starts fail the test."""
    policy = load_policy(REPO / "policies" / "cpu-demo.toml")
    model = ServedModel("m", policy.engine, path=tmp_path)
    monkeypatch.setattr(serve, "start_engine", _must_not_start)
    monkeypatch.setattr(Appliance, "_start_gateway", _must_not_start)
    SIGNALS.install()
    hup = signal.getsignal(signal.SIGHUP)  # start() replaces it (serve: SIGHUP reloads)
    yield Appliance(policy=policy, model_dir=tmp_path, public_key=tmp_path / "k",
                    api_keys=["k" * 32], runs=[ModelRun(model, tmp_path, "d")])
    signal.signal(signal.SIGHUP, hup)


def _must_not_start(*_args: Any, **_kwargs: Any) -> float:
    raise AssertionError("started after a stop was requested during preflight")


@pytest.mark.parametrize("swallow", list(SWALLOWS), ids=list(SWALLOWS))
def test_a_stop_swallowed_during_preflight_never_starts_an_engine(
        app: Appliance, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        ignored: list[BaseException | None], swallow: str) -> None:
    """The e2e case ``test_stop_before_the_engine[serve-INT]``: SIGINT while verify/scan
    runs, its raise lost there; start() must stop at the end of preflight, exit 130."""
    checked: list[int] = []

    def check(self: Appliance) -> list[ModelRun]:
        SWALLOWS[swallow](signal.SIGINT)  # the scan goes on after the lost raise
        checked.append(1)
        return self.runs

    monkeypatch.setattr(Appliance, "check", check)
    assert _run(argparse.Namespace(func=lambda _args: app.start())) == 130
    err = capsys.readouterr().err
    assert checked == [1]
    assert "received SIGINT while starting" in err and "exit status 130" in err
    assert SIGNALS.handled and app.watchdog is None  # stopped, caught by the stop path
    assert [type(exc) for exc in ignored] == ([Stopped] if swallow == "finaliser" else [])


def test_a_stop_swallowed_before_the_serving_loop_is_raised_not_drained(
        app: Appliance, monkeypatch: pytest.MonkeyPatch) -> None:
    """``serve``: a stop lost between the gateway start and ``wait()`` ends it with
    ``Stopped`` (the caller stops everything), not in the serving loop's drain."""
    loops: list[int] = []
    monkeypatch.setattr(serve, "wait_for_stop", lambda *_args: loops.append(1) or 143)
    _swallow_in_library(signal.SIGTERM)
    with pytest.raises(Stopped) as info:
        app.wait()
    assert info.value.exit_status == 143 and loops == []
