"""``--compare``: two targets in one run, requests interleaved and paired case by case.

``run_paired(targets, levels)`` runs the suite once per round on both targets at once: each
of ``c`` workers takes the next job (a case of a suite copy, as in
:mod:`appliance.toolbench.runner`) and sends it to **both** targets concurrently, then takes
the next; so at concurrency ``c`` each target has up to ``c`` requests in flight (``2c`` in
all), both see the same moment's load (a shared machine's drift falls on both alike), and
every answer of one target has its twin of the other (same case, same repeat), which the
report pairs (:mod:`appliance.toolbench.categories`).

A target is a ``Target(endpoint, run, unconstrained)``; ``unconstrained`` sends every tool
case with ``tool_choice: "auto"`` and no ``response_format``
(:func:`appliance.toolbench.runner.payload`). No plain (constraint-tax) twin runs in a
compared run. Each target's results go into its own ``BenchRun`` (``levels`` with the phase
``constrained``); an abort on either (a fatal answer, ``bench_aborted``) stops both, the error
kept on each run, named after the target that failed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from appliance.toolbench.client import Endpoint
from appliance.toolbench.errors import BenchError
from appliance.toolbench.runner import BenchRun, LevelResult, Runner, copies
from appliance.toolbench.suite import Case


@dataclass
class Target:
    endpoint: Endpoint
    run: BenchRun
    unconstrained: bool = False


def planned_pairs(run: BenchRun, concurrency: int) -> int:
    """Requests one level sends to one target when every chain completes."""
    return run.repeat * copies(run.suite, concurrency) * run.suite.requests_per_repeat


async def _level(runners: list[Runner], targets: list[Target], concurrency: int) -> None:
    suite, repeat = targets[0].run.suite, targets[0].run.repeat
    results = [LevelResult(concurrency) for _ in targets]
    for t, res in zip(targets, results, strict=True):
        t.run.levels.append(res)
    n = copies(suite, concurrency)

    def failed() -> BenchError | None:
        for rn, t in zip(runners, targets, strict=True):
            if rn.guard.error is not None:
                err = rn.guard.error
                return BenchError(f"{t.run.label or t.run.base_url}: {err.message}",
                                  code=err.code, fix=err.fix)
        return None

    for r in range(repeat):
        queue: asyncio.Queue[tuple[int, Case]] = asyncio.Queue()
        for rep in range(r * n, (r + 1) * n):
            for case in suite.cases:
                queue.put_nowait((rep, case))

        async def worker(queue: asyncio.Queue[tuple[int, Case]]) -> None:
            while failed() is None:
                try:
                    rep, case = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                await asyncio.gather(*(rn.job(case, rep, res)
                                       for rn, res in zip(runners, results, strict=True)))

        t0 = time.monotonic()
        await asyncio.gather(*(worker(queue) for _ in range(concurrency)))
        wall = time.monotonic() - t0
        for res in results:
            res.wall_s["constrained"] = round(res.wall_s.get("constrained", 0.0) + wall, 3)
        err = failed()
        if err is not None:
            raise err


async def run_paired(targets: list[Target], levels: list[int],
                     advance: Callable[[], None] | None = None,
                     on_level: Callable[[list[BenchRun]], None] | None = None) -> None:
    """Run every level on all ``targets`` (same suite, repeat); results land in their runs."""
    runners = [Runner(t.endpoint, t.run.model, t.run.temperature, advance, t.unconstrained)
               for t in targets]
    runs = [t.run for t in targets]
    try:
        for c in levels:
            try:
                await _level(runners, targets, c)
            finally:
                if on_level is not None:
                    on_level(runs)
        for run in runs:
            run.complete = True
    except BenchError as exc:
        for run in runs:
            run.error = exc
    except asyncio.CancelledError:
        for run in runs:
            run.error = BenchError("interrupted", code="bench_interrupted",
                                   fix="run again; the report holds the answers so far")
        if on_level is not None:
            on_level(runs)
        raise
