"""The interval and test functions of the paired comparison (appliance.toolbench.stats)."""

from __future__ import annotations

import math

import pytest

from appliance.toolbench.stats import bootstrap_mean, mcnemar_exact, paired_difference


def test_mcnemar_exact_two_sided_binomial() -> None:
    assert mcnemar_exact(0, 4) == pytest.approx(0.125)  # 2 * 0.5**4
    assert mcnemar_exact(4, 0) == mcnemar_exact(0, 4)
    assert mcnemar_exact(1, 9) == pytest.approx(2 * (1 + 10) / 1024)
    assert mcnemar_exact(3, 3) == 1.0 and mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(0, 20) < 1e-5


def test_paired_difference_wald_interval() -> None:
    d = paired_difference(10, 2, 100)
    half = 1.959963984540054 * math.sqrt(12 - 64 / 100) / 100
    assert d["difference"] == pytest.approx(0.08)
    assert (d["low"], d["high"]) == pytest.approx((0.08 - half, 0.08 + half))
    same = paired_difference(0, 0, 50)
    assert (same["difference"], same["low"], same["high"]) == (0.0, 0.0, 0.0)
    assert paired_difference(0, 0, 0)["difference"] is None
    assert paired_difference(5, 0, 5)["high"] == 1.0  # clipped to the possible range


def test_bootstrap_mean_is_reproducible_and_brackets_the_mean() -> None:
    values = [0.5, 0.7, 1.1, 2.0, 0.9, 1.4, 3.2, 0.8]
    a, b = bootstrap_mean(values), bootstrap_mean(values)
    assert a == b
    assert a["mean"] == pytest.approx(sum(values) / len(values))
    assert a["low"] is not None and a["high"] is not None
    assert min(values) < a["low"] < a["mean"] < a["high"] < max(values)
    flat = bootstrap_mean([2.0] * 5)
    assert flat == {"mean": 2.0, "low": 2.0, "high": 2.0}
    assert bootstrap_mean([]) == {"mean": None, "low": None, "high": None}
