"""``appliance.toolbench.cost``: the engine-metrics arithmetic of ``bench/constraint_cost.py``
(Prometheus text -> sums, scrape differences, per-step decode time, ratios), and the bench
runner's like-with-like rules (grammar warm-up, chains outside the constraint ratio)."""

from __future__ import annotations

import pytest

from appliance.toolbench.cost import (
    MODES,
    TARGETS,
    EngineDelta,
    Wave,
    delta,
    gateway_share,
    rotation,
    summarize,
    sums,
)

# the shape vLLM 0.32 exposes: one label set per engine/model, histograms with _sum/_count
METRICS = """\
# HELP vllm:request_decode_time_seconds Histogram of time spent in DECODE phase for request.
# TYPE vllm:request_decode_time_seconds histogram
vllm:request_decode_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} 3.0
vllm:request_decode_time_seconds_sum{engine="0",model_name="m"} 1.5
vllm:request_decode_time_seconds_count{engine="0",model_name="m"} 3.0
vllm:request_decode_time_seconds_sum{engine="1",model_name="m"} 0.5
vllm:request_decode_time_seconds_count{engine="1",model_name="m"} 1.0
# HELP vllm:request_generation_tokens Number of generation tokens processed.
# TYPE vllm:request_generation_tokens histogram
vllm:request_generation_tokens_sum{engine="0",model_name="m"} 44.0
vllm:request_generation_tokens_count{engine="0",model_name="m"} 4.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2.0
"""


def test_sums_adds_label_sets_and_keeps_only_the_read_series() -> None:
    s = sums(METRICS)
    assert s["vllm:request_decode_time_seconds_sum"] == pytest.approx(2.0)
    assert s["vllm:request_decode_time_seconds_count"] == 4.0
    assert s["vllm:request_generation_tokens_sum"] == 44.0
    assert "vllm:num_requests_running" not in s
    assert "vllm:request_decode_time_seconds_bucket" not in s


def test_delta_per_step_excludes_the_prefill_token() -> None:
    before = sums(METRICS)
    after = dict(before)
    after["vllm:request_decode_time_seconds_sum"] += 0.9  # 2 requests, 20 tokens in all:
    after["vllm:request_decode_time_seconds_count"] += 2  # 18 decode steps (first token
    after["vllm:request_generation_tokens_sum"] += 20     # of each comes from prefill)
    after["vllm:request_queue_time_seconds_sum"] = 0.2    # absent before: counts from 0
    d = delta(before, after)
    assert (d.requests, d.generation_tokens) == (2, 20)
    assert d.decode_ms_per_step == pytest.approx(50.0)
    assert d.per_request_ms(d.queue_s) == pytest.approx(100.0)
    assert EngineDelta(0, 0, 0, 0, 0, 0, 0).decode_ms_per_step is None
    assert EngineDelta(0, 0, 0, 0, 0, 0, 0).per_request_ms(1.0) is None
    assert EngineDelta(2, 2, 0, 0.1, 0, 0, 0).decode_ms_per_step is None  # 1-token answers


def test_delta_refuses_a_counter_that_went_down() -> None:
    with pytest.raises(ValueError, match="restarted"):
        delta({"vllm:request_decode_time_seconds_count": 5.0},
              {"vllm:request_decode_time_seconds_count": 1.0})


def _wave(c: int, r: int, target: str, mode: str, wall: float, tokens: list[int],
          decode_s: float, latency: float = 1.0) -> Wave:
    eng = EngineDelta(len(tokens), sum(tokens), 10 * len(tokens), decode_s, 0.1, 0.0, 0.2)
    return Wave(c, r, target, mode, wall, [latency] * len(tokens), tokens,
                [200] * len(tokens), eng)


def test_summarize_ratios_and_pooled_step_time() -> None:
    waves = []
    for r in range(2):
        waves += [_wave(2, r, "engine", "constrained", 2.0, [11, 11], 2.0),  # 20 steps, 100 ms
                  _wave(2, r, "engine", "plain", 1.0, [11, 11], 1.0),        # 20 steps, 50 ms
                  _wave(2, r, "appliance", "constrained", 2.5, [11, 11], 2.0, 1.3),
                  _wave(2, r, "appliance", "plain", 1.0, [11, 11], 1.0, 1.1)]
    rows = {r["target"]: r for r in summarize(waves)}
    eng = rows["engine"]
    assert eng["constrained"]["tokens_per_s"] == pytest.approx(11.0)
    assert eng["plain"]["tokens_per_s"] == pytest.approx(22.0)
    assert eng["tokens_per_s_ratio"] == pytest.approx(0.5)
    assert eng["constrained"]["decode_ms_per_step"] == pytest.approx(100.0)
    assert eng["step_cost_ratio"] == pytest.approx(2.0)
    assert eng["step_cost_ms"] == pytest.approx(50.0)
    assert eng["constrained"]["answers"] == 4 and eng["constrained"]["errors"] == 0
    assert rows["appliance"]["tokens_per_s_ratio"] == pytest.approx(8.8 / 22.0)
    share = {g["mode"]: g["gateway_minus_engine_p50_ms"] for g in gateway_share(
        summarize(waves))}
    assert share == {"constrained": pytest.approx(300.0), "plain": pytest.approx(100.0)}


def test_tokens_per_s_counts_only_answered_requests() -> None:
    w = Wave(2, 0, "engine", "plain", 2.0, [1.0, 1.0], [10, 30], [200, 502])
    assert w.tokens_per_s == pytest.approx(5.0)
    assert Wave(1, 0, "engine", "plain", 0.0, [], [], []).tokens_per_s is None


def test_rotation_visits_every_wave_once_and_moves_the_first() -> None:
    everything = {(t, m) for t in TARGETS for m in MODES}
    firsts = set()
    for r in range(4):
        order = rotation(r)
        assert set(order) == everything and len(order) == 4
        firsts.add(order[0])
    assert firsts == everything
