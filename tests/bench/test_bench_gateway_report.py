"""``bench/gateway.py``'s report: added latency is paired by round, like ``x direct``."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "gateway.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_gateway_report", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(rps: float, p50: float, p99: float) -> dict[str, Any]:
    return {"rps": rps, "p50": p50, "p99": p99, "ttfb_p50": p50, "ttfb_p99": p99,
            "cpu_us_per_req": 800.0, "errors": 0, "outside_cores": 0.0}


def test_added_latency_is_the_median_of_same_round_differences(
        capsys: pytest.CaptureFixture[str]) -> None:
    # The machine drifts between rounds; in each round the gateway adds 1 ms but one.
    # Median of the per-round differences: +1 ms. Difference of the medians: 58 - 60 = -2.
    direct = [_row(1000, 50, 70), _row(900, 70, 90), _row(950, 60, 80)]
    gateway = [_row(990, 51, 71), _row(890, 71, 91), _row(960, 58, 78)]
    _bench().report({("stream", "direct"): direct, ("stream", "gateway"): gateway}, ["stream"])
    out = capsys.readouterr().out
    summary = next(line for line in out.splitlines() if line.startswith("stream: "))
    assert "added p50 +1.00 ms, p99 +1.00 ms" in summary
    assert summary.endswith("targets (>= 0.98x, <= +1 ms p50) met"), summary
    row = next(line for line in out.splitlines() if line.startswith("| stream | gateway"))
    assert "| +1.00 / +1.00 | +1.00 / +1.00 |" in row, row
    assert "| 0.990 (0.989-1.011) |" in row, row


def test_the_summary_says_when_a_target_is_missed(capsys: pytest.CaptureFixture[str]) -> None:
    direct = [_row(1000, 50, 70), _row(1000, 50, 70)]
    slow = [_row(990, 51.5, 71), _row(990, 51.5, 71)]  # 0.99x but +1.5 ms
    _bench().report({("ns", "direct"): direct, ("ns", "gateway"): slow}, ["ns"])
    summary = next(line for line in capsys.readouterr().out.splitlines()
                   if line.startswith("ns: "))
    assert summary.endswith("targets (>= 0.98x, <= +1 ms p50) missed"), summary
