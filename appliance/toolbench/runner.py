"""Running a suite against an endpoint at each concurrency level.

For each level ``c`` the suite runs in ``repeat`` rounds. A round holds ``copies(c)``
copies of the suite (enough jobs that ``c`` requests can be in flight: ``ceil(c / cases)``)
and three phases back to back, each a closed loop of ``c`` workers pulling the round's jobs
from one queue; alternating the phases round by round spreads drift (a shared machine's
load) over both:

1. **constrained**: the single-request cases as written (tools + ``tool_choice``, or
   ``response_format``);
2. **plain** (the constraint-tax twin, skipped with ``plain=False``): the same prompts
   with ``tool_choice: "none"`` and no ``response_format``: the same
   prefill, no grammar, and ``max_tokens`` set to the median completion tokens of the round's
   constrained answers to that prompt, so both phases have the same prefill/decode mix (free
   text would otherwise run to ``max_tokens`` and look faster per token). Only tokens and
   latency are kept.
3. **chain**: each chain case is an agent loop of ``steps`` sequential requests in one worker,
   each tool result fed back; the chain stops at its first answer that is not valid.

Tokens/s of a phase = completion tokens of its 200 answers / its wall time (s).

Like with like (issue 34, ``bench/constraint_cost.py``): the constrained/plain ratio compares
the same single requests at the same concurrency. So

- **warm-up**: before the first level, each case's grammar is compiled once (one constrained
  request per case with ``max_tokens: 1``, not recorded; its wall time is
  ``wall_s["warmup"]``). On the 2-core demo host (load ~35) the first request of a schema
  waited up to 1.2 s in the engine's queue for its grammar (a fresh xgrammar compiler took
  1.5-3.7 s for a schema with ``maxLength`` or range bounds), once per schema per engine;
  timed inside the first constrained phase it was billed to the constraint's steady state;
- **chains** run in their own phase after the constrained one (``wall_s["chain"]``): an agent
  loop is sequential (batch 1 for most of its steps) and has no plain twin, so inside the
  constrained phase it turned a level's throughput into batch-1 throughput (a 50-step chain
  at concurrency 4) while the plain phase ran at batch 4.

Aborts (``BenchError``, the run so far is kept in ``BenchRun.levels``): a fatal answer
(``bad_api_key``, ``unknown_model``, ``no_such_route``) or ``MAX_CONSECUTIVE_ERRORS``
transport/garbage errors in a row (``bench_aborted``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from appliance.toolbench.checks import Verdict, judge
from appliance.toolbench.client import FATAL, Attempt, Endpoint
from appliance.toolbench.errors import BenchError
from appliance.toolbench.suite import Case, Suite

MAX_CONSECUTIVE_ERRORS = 10
FATAL_FIX = {
    "bad_api_key": "check --api-key-file; the key was refused during the run",
    "unknown_model": "pass --model with a name the endpoint serves",
    "no_such_route": "--base-url must be the API root, e.g. http://host:8000/v1",
}


@dataclass
class Record:
    """One request. ``phase`` is ``constrained`` or ``plain``; ``step`` counts from 1."""

    phase: str
    case: str
    kind: str
    repeat: int
    step: int
    outcome: str
    reason: str | None
    http_status: int | None
    latency_s: float
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None
    correct: bool | None
    detail: str | None = None
    ast_reason: str | None = None  # accuracy suites: why the answer is not accurate

    @classmethod
    def of(cls, phase: str, case: Case, repeat: int, step: int, att: Attempt) -> Record:
        v = att.verdict
        return cls(phase, case.id, case.kind, repeat, step, att.outcome, att.reason,
                   att.http_status, round(att.latency_s, 4),
                   v.prompt_tokens if v else 0, v.completion_tokens if v else 0,
                   v.finish_reason if v else None, v.correct if v else None, att.detail,
                   v.ast_reason if v else None)


@dataclass
class ChainRun:
    case: str
    repeat: int
    steps: int
    steps_ok: int  # valid answers in a row from the first step
    stop_reason: str | None


@dataclass
class LevelResult:
    concurrency: int
    records: list[Record] = field(default_factory=list)
    chains: list[ChainRun] = field(default_factory=list)
    wall_s: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "wall_s": self.wall_s,
                "chains": [asdict(c) for c in self.chains],
                "records": [asdict(r) for r in self.records]}


@dataclass
class BenchRun:
    base_url: str
    model: str
    suite: Suite
    repeat: int
    temperature: float
    levels: list[LevelResult] = field(default_factory=list)
    complete: bool = False
    error: BenchError | None = None
    label: str | None = None  # what the reader calls the target ("appliance", "raw vLLM")


def payload(case: Case, model: str, messages: list[dict[str, Any]], temperature: float,
            plain: bool, max_tokens: int | None = None,
            unconstrained: bool = False) -> dict[str, Any]:
    """The request body for ``case`` (``plain``: the unconstrained twin; ``unconstrained``:
    the target's unconstrained mode, ``tool_choice: "auto"`` whatever the case names and no
    ``response_format``, so that a raw engine applies no grammar)."""
    body: dict[str, Any] = {"model": model, "messages": messages,
                            "max_tokens": max_tokens or case.max_tokens,
                            "temperature": temperature}
    if case.tools:
        body["tools"] = case.tools
        body["tool_choice"] = "none" if plain else "auto" if unconstrained else case.tool_choice
        if case.parallel_tool_calls is not None and not plain:
            body["parallel_tool_calls"] = case.parallel_tool_calls
    if case.response_format is not None and not plain and not unconstrained:
        body["response_format"] = case.response_format
    return body


def tool_result(step: int) -> str:
    """What the chain's tool answers after ``step``: the next step to call (the known answer)."""
    return json.dumps({"done": step, "next": f"Step {step} done. Now call advance with "
                                             f"step {step + 1}."})


class _Guard:
    """Counts transport errors in a row; holds the abort reason."""

    def __init__(self) -> None:
        self.in_a_row = 0
        self.error: BenchError | None = None

    def see(self, att: Attempt) -> None:
        if att.outcome == "error" and att.reason in FATAL:
            self.error = BenchError(f"the endpoint answered HTTP {att.http_status} during the "
                                    f"run: {att.detail}", code=att.reason,
                                    fix=FATAL_FIX[att.reason or ""])
        elif att.outcome == "error":
            self.in_a_row += 1
            if self.in_a_row >= MAX_CONSECUTIVE_ERRORS and self.error is None:
                self.error = BenchError(
                    f"{self.in_a_row} requests in a row got no usable answer "
                    f"(last: {att.reason}: {att.detail})", code="bench_aborted",
                    fix="check that the endpoint is up; lower --concurrency or raise "
                        "--timeout if it is overloaded")
        else:
            self.in_a_row = 0


class Runner:
    def __init__(self, endpoint: Endpoint, model: str, temperature: float,
                 advance: Callable[[], None] | None = None, unconstrained: bool = False) -> None:
        self.endpoint, self.model, self.temperature = endpoint, model, temperature
        self.unconstrained = unconstrained
        self.advance = advance or (lambda: None)
        self.guard = _Guard()

    async def _one(self, case: Case, messages: list[dict[str, Any]], plain: bool,
                   step: int, max_tokens: int | None = None) -> Attempt:
        def judge_it(body: Any) -> Verdict:
            return judge(case, body, step)

        att = await self.endpoint.attempt(
            payload(case, self.model, messages, self.temperature, plain, max_tokens,
                    self.unconstrained),
            None if plain else judge_it)
        self.guard.see(att)
        self.advance()
        return att

    async def _chain(self, case: Case, repeat: int, out: LevelResult) -> None:
        history: list[dict[str, Any]] = []
        ok, stop = 0, None
        for step in range(1, case.steps + 1):
            if self.guard.error is not None:
                stop = "aborted"
                break
            att = await self._one(case, case.messages + history[-2 * case.window:], False,
                                  step)
            out.records.append(Record.of("constrained", case, repeat, step, att))
            if att.outcome != "valid" or att.verdict is None or not att.verdict.calls:
                stop = att.reason or att.outcome
                break
            ok += 1
            call = att.verdict.calls[0]
            history.append({"role": "assistant", "content": None, "tool_calls": [{
                "id": call["id"], "type": "function",
                "function": {"name": call["name"], "arguments": call["arguments"]}}]})
            history.append({"role": "tool", "tool_call_id": call["id"],
                            "content": tool_result(step)})
        out.chains.append(ChainRun(case.id, repeat, case.steps, ok, stop))
        for _ in range(case.steps - ok - (1 if stop not in (None, "aborted") else 0)):
            self.advance()  # steps not run still count on the progress bar

    async def job(self, case: Case, repeat: int, out: LevelResult, plain: bool = False,
                  cap: int | None = None) -> None:
        """Run one case (a chain: its whole agent loop) and record it in ``out``."""
        if case.kind == "chain" and not plain:
            await self._chain(case, repeat, out)
        else:
            att = await self._one(case, case.messages, plain, 1, cap)
            out.records.append(Record.of("plain" if plain else "constrained", case, repeat, 1,
                                         att))

    async def warm(self, suite: Suite) -> float:
        """Compile each case's grammar once (``max_tokens: 1``, answers not recorded);
        returns the wall time (s)."""
        t0 = time.monotonic()
        for case in suite.cases:
            if self.guard.error is not None:
                break
            att = await self.endpoint.attempt(
                payload(case, self.model, case.messages, self.temperature, False, 1,
                        self.unconstrained), None)
            if att.outcome == "error" and att.reason in FATAL:
                self.guard.see(att)
        return round(time.monotonic() - t0, 3)

    async def _phase(self, suite: Suite, repeats: range, concurrency: int, plain: bool,
                     out: LevelResult, caps: dict[str, int] | None = None,
                     chains: bool = False) -> None:
        """One closed loop over the round's jobs: the single-request cases, or with
        ``chains`` the chain cases (timed as ``wall_s["chain"]``)."""
        queue: asyncio.Queue[tuple[int, Case]] = asyncio.Queue()
        for r in repeats:
            for case in suite.cases:
                if (case.kind == "chain") == chains:
                    queue.put_nowait((r, case))
        if queue.empty():
            return

        async def worker() -> None:
            while self.guard.error is None:
                try:
                    r, case = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                await self.job(case, r, out, plain, (caps or {}).get(case.id))

        t0 = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        key = "chain" if chains else "plain" if plain else "constrained"
        out.wall_s[key] = round(out.wall_s.get(key, 0.0) + time.monotonic() - t0, 3)

    async def level(self, suite: Suite, repeat: int, concurrency: int, plain: bool,
                    out: LevelResult) -> None:
        """Fill ``out`` (kept even when this raises ``BenchError``)."""
        n = copies(suite, concurrency)
        for r in range(repeat):
            repeats = range(r * n, (r + 1) * n)
            start = len(out.records)
            await self._phase(suite, repeats, concurrency, False, out)
            if plain and self.guard.error is None:
                caps = plain_caps(out.records[start:])
                await self._phase(suite, repeats, concurrency, True, out, caps)
            if self.guard.error is None:
                await self._phase(suite, repeats, concurrency, False, out, chains=True)
            if self.guard.error is not None:
                raise self.guard.error


def plain_caps(records: list[Record]) -> dict[str, int]:
    """Per case: the median completion tokens of its first-step 200 answers (the plain twin's
    ``max_tokens``)."""
    tokens: dict[str, list[int]] = {}
    for rec in records:
        if rec.step == 1 and rec.http_status == 200 and rec.completion_tokens > 0:
            tokens.setdefault(rec.case, []).append(rec.completion_tokens)
    return {case: sorted(v)[len(v) // 2] for case, v in tokens.items()}


def copies(suite: Suite, concurrency: int) -> int:
    """Suite copies per round so that ``concurrency`` jobs can be in flight."""
    return max(1, -(-concurrency // len(suite.cases)))


def planned_requests(suite: Suite, repeat: int, plain: bool, concurrency: int) -> int:
    """Requests one level sends when every chain completes."""
    singles = sum(c.kind != "chain" for c in suite.cases)
    return repeat * copies(suite, concurrency) * (
        suite.requests_per_repeat + (singles if plain else 0))


async def run_bench(endpoint: Endpoint, run: BenchRun, levels: list[int], plain: bool,
                    advance: Callable[[], None] | None = None,
                    on_level: Callable[[BenchRun], None] | None = None,
                    unconstrained: bool = False, warmup: bool = True) -> BenchRun:
    """Run every level into ``run`` (partial results stay there on abort or Ctrl-C);
    ``warmup``: compile the suite's grammars first (:meth:`Runner.warm`)."""
    runner = Runner(endpoint, run.model, run.temperature, advance, unconstrained)
    try:
        warm_s = await runner.warm(run.suite) if warmup else None
        if runner.guard.error is not None:
            raise runner.guard.error
        for c in levels:
            result = LevelResult(c)
            if warm_s is not None:
                result.wall_s["warmup"], warm_s = warm_s, None
            run.levels.append(result)
            try:
                await runner.level(run.suite, run.repeat, c, plain, result)
            finally:
                if on_level is not None:
                    on_level(run)
        run.complete = True
    except BenchError as exc:
        run.error = exc
    except asyncio.CancelledError:  # Ctrl-C: keep what was measured, then stop
        run.error = BenchError("interrupted", code="bench_interrupted",
                               fix="run again; the report holds the answers so far")
        if on_level is not None:
            on_level(run)
        raise
    return run
