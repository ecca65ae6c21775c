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
