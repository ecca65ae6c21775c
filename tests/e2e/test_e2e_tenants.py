"""Tenants on one appliance do not learn about each other through the engine's prefix cache
(issue 31), on the real vLLM CPU engine (prefix caching on) and the built-in model.

Two API keys, A and B. The appliance's gateway (``cache_isolation = "key"``, the default)
salts each key's requests with its own ``cache_salt``; a second gateway in front of the same
engine runs ``cache_isolation = "none"``. Per round and mode (alternating order, medians over
rounds: the machine's load moves every sample): A sends a fresh ~1,000-token prompt, B sends
the same prompt, A repeats it, A sends another fresh prompt (``bench/tenants.py``, which
also writes the figures in ``bench/results/tenants/``).

Asserted: with ``key``, B's time to first token on A's prompt is in the range of a fresh
prompt (>= 0.7x) while A's own repeat keeps its cache hit (<= 0.6x); with ``none``, B gets
the hit (<= 0.6x), so the measurement can tell a shared cache from a salted one.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import tenants  # noqa: E402  (bench/tenants.py: the rig and the measurement)

pytestmark = pytest.mark.e2e
ROUNDS = 3


@pytest.fixture(scope="module")
def rig() -> Iterator[tenants.Rig]:
    with tenants.started() as started:
        yield started


def test_a_tenant_cannot_time_another_tenants_prompt(rig: tenants.Rig) -> None:
    result: dict[str, Any] = tenants.measure(rig, rounds=ROUNDS, words=900, log=sys.stdout)
    print("\n" + tenants.report(result))
    salted, shared = result["key"], result["none"]
    assert salted["other_vs_fresh"] >= 0.7, result  # B: no hit on A's prompt
    assert salted["own_vs_fresh"] <= 0.6, result  # A: its own hit is kept
    assert shared["other_vs_fresh"] <= 0.6, result  # without salts the leak is measurable
