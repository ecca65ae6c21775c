"""The bench runner compares like with like (issue 34): grammars are compiled before the
first level (one ``max_tokens: 1`` request per case, not recorded), and agent-loop chains
run in their own phase, outside the constrained/plain tokens/s ratio.

The endpoint is a recording stand-in for ``client.Endpoint.attempt`` (the runner's only call):
what is asserted is the order and shape of the requests the runner sends."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from appliance.toolbench.checks import Verdict
from appliance.toolbench.client import Attempt
from appliance.toolbench.report import summarize
from appliance.toolbench.runner import BenchRun, planned_requests, run_bench
from appliance.toolbench.suite import load_cases
from appliance.toolbench.suites import BUILTIN_SUITES

CHAIN = {**next(c for c in BUILTIN_SUITES["standard"] if c["id"] == "agent_chain_10"),
         "id": "chain3", "steps": 3}
WEATHER = next(c for c in BUILTIN_SUITES["standard"] if c["id"] == "weather_enum_required")
SUITE = load_cases("mix", [WEATHER, {**WEATHER, "id": "weather_2"}, CHAIN])


class Recorder:
    """Answers every request valid at once: 10 tokens for single requests, 1000 for chain
    steps (so a chain inside the ratio would dominate it)."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def attempt(self, payload: dict[str, Any], judge: Any) -> Attempt:
        self.sent.append(payload)
        await asyncio.sleep(0.005)  # wall times are kept in ms
        tools = payload.get("tools") or []
        chain = tools and tools[0]["function"]["name"] == "advance"
        tokens = 1000 if chain else 10
        if judge is None:  # plain twin or warm-up: only tokens matter
            return Attempt("valid", None, 200, 0.01,
                           Verdict(True, None, None, "stop", completion_tokens=tokens))
        step = len([m for m in payload["messages"] if m.get("role") == "tool"]) + 1
        calls = [{"id": f"c{len(self.sent)}", "name": tools[0]["function"]["name"],
                  "arguments": json.dumps({"step": step} if chain else
                                          {"city": "Oslo", "unit": "c"})}]
        return Attempt("valid", None, 200, 0.01,
                       Verdict(True, None, True, "tool_calls", calls, 5, tokens))


def _run(warmup: bool) -> tuple[Recorder, BenchRun]:
    rec = Recorder()
    run = BenchRun("http://x/v1", "m", SUITE, 1, 0.0)
    asyncio.run(run_bench(rec, run, [2], True, warmup=warmup))  # type: ignore[arg-type]
    assert run.complete and run.error is None
    return rec, run


def test_warmup_compiles_each_case_once_before_the_first_level() -> None:
    rec, run = _run(warmup=True)
    warm = rec.sent[:3]
    assert [b["max_tokens"] for b in warm] == [1, 1, 1]
    assert [b["tool_choice"] for b in warm] == ["required"] * 3  # constrained: compiles
    assert all(b["max_tokens"] > 1 for b in rec.sent[3:])
    assert "warmup" in run.levels[0].wall_s
    assert len(run.levels[0].records) == 2 + 2 + 3  # warm-ups not recorded
    rec2, run2 = _run(warmup=False)
    assert rec2.sent[0]["max_tokens"] > 1 and "warmup" not in run2.levels[0].wall_s


def test_chains_run_after_the_plain_twin_and_stay_out_of_the_ratio() -> None:
    rec, run = _run(warmup=False)
    kinds = ["chain" if b["tools"][0]["function"]["name"] == "advance" else
             "plain" if b["tool_choice"] == "none" else "single" for b in rec.sent]
    assert kinds == ["single", "single", "plain", "plain", "chain", "chain", "chain"]
    level = run.levels[0]
    assert set(level.wall_s) == {"constrained", "plain", "chain"}
    s = summarize(level, SUITE)
    assert s["answers"] == 5  # chain steps still count for validity
    assert s["tokens_per_s"]["constrained"] == pytest.approx(
        20 / level.wall_s["constrained"], rel=1e-3)  # the 3000 chain tokens are not in it
    assert planned_requests(SUITE, 1, True, 2) == len(rec.sent)
