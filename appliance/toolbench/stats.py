"""Statistics for the report. Pure functions over plain numbers.

- ``wilson(k, n, z=1.96) -> (low, high)``: the Wilson score interval for a binomial rate
  (95 % by default); well-behaved at 0 and n, unlike the normal approximation.
  Source: E. B. Wilson, "Probable inference, the law of succession, and statistical
  inference", JASA 22 (1927) 209-212.
- ``chained(p, low, high, k)``: the chance that K independent calls all succeed, ``p**K``,
  with the interval ``(low**K, high**K)`` (monotone transform of the Wilson bounds).
- ``percentile(values, q)``: linear interpolation between closest ranks (numpy's default),
  ``q`` in 0..100; ``None`` for no values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

Z95 = 1.959963984540054


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for ``k`` successes in ``n`` trials; (0, 1) when n == 0."""
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= k <= n:
        raise ValueError(f"k={k} outside 0..n={n}")
    p = k / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # exact ends: at k == n the bound is 1 (not 0.9999…), so an all-valid run never
    # "regresses" against an all-valid baseline through rounding
    low = 0.0 if k == 0 else max(0.0, centre - half)
    high = 1.0 if k == n else min(1.0, centre + half)
    return low, high


@dataclass(frozen=True)
class Rate:
    """``k`` of ``n``; ``rate`` is None when n == 0."""

    k: int
    n: int
    rate: float | None
    low: float
    high: float

    @classmethod
    def of(cls, k: int, n: int) -> Rate:
        low, high = wilson(k, n)
        return cls(k, n, k / n if n else None, low, high)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def chained(rate: Rate, k: int) -> dict[str, float | None]:
    """Predicted chance that ``k`` calls in a row all succeed, from the per-call rate."""
    if rate.rate is None:
        return {"rate": None, "low": 0.0, "high": 1.0}
    return {"rate": rate.rate ** k, "low": rate.low ** k, "high": rate.high ** k}


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def bootstrap_mean(values: Sequence[float], resamples: int = 2000, seed: int = 0,
                   level: float = 0.95) -> dict[str, float | None]:
    """``{mean, low, high}``: the mean and its percentile-bootstrap interval (``resamples``
    resamples with replacement, a fixed ``seed`` so a report is reproducible; B. Efron,
    "Bootstrap methods: another look at the jackknife", Ann. Stat. 7 (1979) 1-26). All
    ``None`` for no values."""
    if not values:
        return {"mean": None, "low": None, "high": None}
    import random

    rng = random.Random(seed)  # noqa: S311 (resampling for an interval, not a secret)
    n = len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(resamples))
    tail = (1 - level) / 2 * 100
    return {"mean": sum(values) / n, "low": percentile(means, tail),
            "high": percentile(means, 100 - tail)}


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for ``b`` and ``c`` discordant pairs (one target right
    and the other wrong, each way): the binomial test of ``min(b, c)`` in ``b + c`` at 1/2
    (Q. McNemar, Psychometrika 12 (1947) 153-157). 1.0 when there is no discordant pair."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail: float = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def paired_difference(b: int, c: int, n: int, z: float = Z95) -> dict[str, float | None]:
    """``{difference, low, high}`` of two paired proportions, (b − c) / n, with the Wald
    interval of a paired difference: ± z·sqrt(b + c − (b − c)²/n) / n (Agresti, Categorical
    Data Analysis, 3rd ed., 10.1.1). ``None`` for no pairs."""
    if n <= 0:
        return {"difference": None, "low": None, "high": None}
    d = (b - c) / n
    half = z * math.sqrt(max(0.0, b + c - (b - c) ** 2 / n)) / n
    return {"difference": d, "low": max(-1.0, d - half), "high": min(1.0, d + half)}
