"""``serve``'s engines across models (``appliance.engine.runs``): the crash-loop policy
(``given_up``) and the stop of every engine; the real supervisors and signals are in
``tests/appliance/test_supervisor.py`` (``Appliance.wait``)."""

from __future__ import annotations

import threading
from pathlib import Path

from appliance.config.engine import EnginePolicy
from appliance.config.models import ServedModel
from appliance.engine.runs import ModelRun, given_up, stop_engines


class _Supervisor:
    """What ``given_up`` and ``stop_engines`` read of a supervisor: ``fatal`` (set once its
    crash loop is declared), ``fatal_message``, ``stop()``, ``engine``."""

    def __init__(self, name: str) -> None:
        self.fatal = threading.Event()
        self.fatal_message = f"{name}: engine crash loop"
        self.stopped = 0
        self.engine = None

    def stop(self) -> None:
        self.stopped += 1


def _runs(*names: str) -> tuple[list[ModelRun], list[_Supervisor]]:
    sups = [_Supervisor(name) for name in names]
    runs = [ModelRun(ServedModel(name, EnginePolicy(), ref=name), Path(name), "d",
                     supervisor=sup)  # type: ignore[arg-type]
            for name, sup in zip(names, sups, strict=True)]
    return runs, sups


def test_one_failed_model_of_two_is_reported_once_and_serve_goes_on() -> None:
    runs, (good, bad) = _runs("good", "bad")
    said: list[str] = []
    reported: set[int] = set()
    assert not given_up(runs, reported, False, said.append)
    assert said == []
    bad.fatal.set()
    assert not given_up(runs, reported, False, said.append)
    assert said[0] == "bad: engine crash loop"
    assert said[1].startswith("model(s) bad given up after a crash loop")
    assert "1 other model(s) keep serving" in said[1]
    assert not given_up(runs, reported, False, said.append)
    assert len(said) == 2  # nothing new: nothing said again
    good.fatal.set()
    assert given_up(runs, reported, False, said.append)  # every engine failed: exit 1
    assert said[2] == "good: engine crash loop"


def test_exit_on_model_failure_and_one_model_end_serve_at_the_first_crash_loop() -> None:
    runs, (_, bad) = _runs("good", "bad")
    bad.fatal.set()
    assert given_up(runs, set(), True, [].append)
    one, (only,) = _runs("only")
    only.fatal.set()
    assert given_up(one, set(), False, [].append)


def test_stop_engines_stops_each_started_engine_once_and_forgets_it() -> None:
    runs, sups = _runs("a", "b")
    runs.append(ModelRun(ServedModel("c", EnginePolicy(), ref="c"), Path("c"), "d"))
    assert runs[0].engine is None
    stop_engines(runs)
    stop_engines(runs)
    assert [s.stopped for s in sups] == [1, 1]
    assert all(run.supervisor is None and run.engine is None for run in runs)
