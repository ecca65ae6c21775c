"""Where the constraint's time goes: engine metrics arithmetic and the paired wave runner.

The rig (``bench/constraint_cost.py``) starts the appliance once and sends the same requests
to two targets on **one** engine: ``appliance`` (through the gateway) and ``engine`` (the
engine's own Unix socket and key, no gateway). Per concurrency level ``c`` and round, four
*waves* run back to back, their order rotated round by round so that a shared machine's drift
hits all of them: (target, mode) for target in (appliance, engine) and mode in
(``constrained``: the suite's case as written, ``plain``: the same prompt with
``tool_choice: "none"`` / no ``response_format`` and ``max_tokens`` capped at the
constrained answer's median completion tokens). A wave is ``c`` requests sent at once.

Around each wave the engine's Prometheus text (``GET /metrics`` on its socket) is read; the
difference of the histogram sums and counts (:func:`delta`) gives, for that wave only:

- ``decode_ms_per_step`` = Σ ``vllm:request_decode_time_seconds`` /
  (Σ ``vllm:request_generation_tokens`` − requests): the time one decode step took as the
  requests saw it (the first token comes from prefill, so a request of ``n`` tokens decodes
  ``n − 1`` steps);
- ``prefill_ms``, ``queue_ms`` (a request waiting for its grammar's compile stays in the
  waiting queue: vLLM V1 ``WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR``), ``ttft_ms`` per request.

Client side: ``latency_s`` per request and ``tokens_per_s`` = completion tokens / wave wall
time. Ratios are constrained over plain within the same level, target and run.

Pure parts (:func:`sums`, :func:`delta`, :func:`summarize`) are unit-tested; units are
seconds in, milliseconds out where the name says ``_ms``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

#: engine series read around each wave (histogram ``_sum``/``_count`` and counters)
SERIES = (
    "vllm:request_decode_time_seconds_sum",
    "vllm:request_decode_time_seconds_count",
    "vllm:request_prefill_time_seconds_sum",
    "vllm:request_queue_time_seconds_sum",
    "vllm:time_to_first_token_seconds_sum",
    "vllm:time_to_first_token_seconds_count",
    "vllm:request_generation_tokens_sum",
    "vllm:request_prompt_tokens_sum",
)
TARGETS = ("appliance", "engine")
MODES = ("constrained", "plain")


def sums(text: str) -> dict[str, float]:
    """Prometheus text exposition -> {sample name: value summed over its label sets}, for
    :data:`SERIES` only (a process may label one series per engine or model).

    Parsed by ``prometheus_client``'s parser; a missing series is absent from the result."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in SERIES:
                out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
    return out


@dataclass
class EngineDelta:
    """What the engine recorded for the requests that finished between two scrapes."""

    requests: int
    generation_tokens: int
    prompt_tokens: int
    decode_s: float
    prefill_s: float
    queue_s: float
    ttft_s: float

    @property
    def decode_ms_per_step(self) -> float | None:
        steps = self.generation_tokens - self.requests
        return round(1000 * self.decode_s / steps, 3) if steps > 0 else None

    def per_request_ms(self, seconds: float) -> float | None:
        return round(1000 * seconds / self.requests, 3) if self.requests else None


def delta(before: Mapping[str, float], after: Mapping[str, float]) -> EngineDelta:
    """The difference ``after − before`` of two :func:`sums` (counters only grow; a series
    missing from either side counts 0). Raises ``ValueError`` when a counter went down (the
    engine restarted between the scrapes: the wave is not measurable)."""
    def d(name: str) -> float:
        value = after.get(name, 0.0) - before.get(name, 0.0)
        if value < -1e-9:
            raise ValueError(f"{name} went down ({before.get(name)} -> {after.get(name)}): "
                             "the engine restarted during the wave")
        return value

    return EngineDelta(
        requests=round(d("vllm:request_decode_time_seconds_count")),
        generation_tokens=round(d("vllm:request_generation_tokens_sum")),
        prompt_tokens=round(d("vllm:request_prompt_tokens_sum")),
        decode_s=d("vllm:request_decode_time_seconds_sum"),
        prefill_s=d("vllm:request_prefill_time_seconds_sum"),
        queue_s=d("vllm:request_queue_time_seconds_sum"),
        ttft_s=d("vllm:time_to_first_token_seconds_sum"),
    )


@dataclass
class Wave:
    """One wave: ``c`` requests of one (target, mode) sent at once."""

    concurrency: int
    round: int
    target: str
    mode: str
    wall_s: float
    latencies_s: list[float]
    completion_tokens: list[int]
    statuses: list[int]
    engine: EngineDelta | None = None

    @property
    def tokens_per_s(self) -> float | None:
        ok = sum(t for t, s in zip(self.completion_tokens, self.statuses, strict=True)
                 if s == 200)
        return ok / self.wall_s if self.wall_s > 0 else None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.engine is not None:
            out["engine"]["decode_ms_per_step"] = self.engine.decode_ms_per_step
        return out


def _median(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return round(statistics.median(vals), 4) if vals else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 4) if a is not None and b else None


def summarize(waves: list[Wave]) -> list[dict[str, Any]]:
    """Per (concurrency, target): medians over rounds of each mode's figures and the
    constrained/plain ratios (tokens/s ratio: higher is better; per-step ratio: the
    constraint's cost per decode step, 1.0 = free).

    Engine figures: pooled over the rounds (Σ decode time / Σ decode steps), so a round with
    few tokens weighs less."""
    rows: list[dict[str, Any]] = []
    for c in sorted({w.concurrency for w in waves}):
        for target in TARGETS:
            row: dict[str, Any] = {"concurrency": c, "target": target}
            for mode in MODES:
                sel = [w for w in waves
                       if w.concurrency == c and w.target == target and w.mode == mode]
                if not sel:
                    continue
                eng = [w.engine for w in sel if w.engine is not None]
                req = sum(e.requests for e in eng)
                steps = sum(e.generation_tokens - e.requests for e in eng)
                row[mode] = {
                    "waves": len(sel),
                    "answers": sum(len(w.statuses) for w in sel),
                    "errors": sum(s != 200 for w in sel for s in w.statuses),
                    "tokens_per_s": _median(w.tokens_per_s for w in sel),
                    "mean_completion_tokens": round(statistics.fmean(
                        t for w in sel for t in w.completion_tokens), 2)
                    if any(w.completion_tokens for w in sel) else None,
                    "latency_p50_s": _median(x for w in sel for x in w.latencies_s),
                    "decode_ms_per_step": round(1000 * sum(e.decode_s for e in eng) / steps, 3)
                    if steps > 0 else None,
                    "prefill_ms": round(1000 * sum(e.prefill_s for e in eng) / req, 3)
                    if req else None,
                    "queue_ms": round(1000 * sum(e.queue_s for e in eng) / req, 3)
                    if req else None,
                    "ttft_ms": round(1000 * sum(e.ttft_s for e in eng) / req, 3)
                    if req else None,
                }
            con, pla = row.get("constrained"), row.get("plain")
            if con and pla:
                row["tokens_per_s_ratio"] = _ratio(con["tokens_per_s"], pla["tokens_per_s"])
                row["step_cost_ratio"] = _ratio(con["decode_ms_per_step"],
                                                pla["decode_ms_per_step"])
                row["step_cost_ms"] = (
                    round(con["decode_ms_per_step"] - pla["decode_ms_per_step"], 3)
                    if con["decode_ms_per_step"] is not None
                    and pla["decode_ms_per_step"] is not None else None)
            rows.append(row)
    return rows


def gateway_share(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per level and mode: median latency through the gateway minus directly on the engine
    (the same requests, the same engine, interleaved): the appliance's own time, in ms."""
    out = []
    for c in sorted({r["concurrency"] for r in rows}):
        by = {r["target"]: r for r in rows if r["concurrency"] == c}
        app, eng = by.get("appliance"), by.get("engine")
        if not app or not eng:
            continue
        for mode in MODES:
            a, e = app.get(mode), eng.get(mode)
            if a and e and a["latency_p50_s"] is not None and e["latency_p50_s"] is not None:
                out.append({"concurrency": c, "mode": mode,
                            "gateway_minus_engine_p50_ms":
                                round(1000 * (a["latency_p50_s"] - e["latency_p50_s"]), 1)})
    return out


def rotation(round_no: int) -> list[tuple[str, str]]:
    """The wave order of a round: (target, mode) pairs rotated by ``round_no``."""
    pairs = [(t, m) for t in TARGETS for m in MODES]
    k = round_no % len(pairs)
    return pairs[k:] + pairs[:k]


@dataclass
class Target:
    """An OpenAI endpoint reachable by httpx: ``base_url`` (``.../v1``), key, optional Unix
    socket (then ``base_url`` is ``http://localhost/v1``)."""

    name: str
    base_url: str
    api_key: str
    uds: str | None = None
    clients: list[Any] = field(default_factory=list)

    def client(self, timeout_s: float) -> Any:
        import httpx

        transport = httpx.AsyncHTTPTransport(uds=self.uds) if self.uds else None
        c = httpx.AsyncClient(base_url=self.base_url, transport=transport, timeout=timeout_s,
                              headers={"Authorization": f"Bearer {self.api_key}"},
                              limits=httpx.Limits(max_connections=1024,
                                                  max_keepalive_connections=1024))
        self.clients.append(c)
        return c


async def send(client: Any, body: dict[str, Any]) -> tuple[int, float, int, bytes]:
    """POST one chat completion: (status, latency s, completion tokens, raw body)."""
    t0 = time.monotonic()
    resp = await client.post("/chat/completions", content=json.dumps(body),
                             headers={"Content-Type": "application/json"})
    latency = time.monotonic() - t0
    tokens = 0
    if resp.status_code == 200:
        try:
            tokens = int(resp.json().get("usage", {}).get("completion_tokens", 0))
        except (ValueError, AttributeError, TypeError):
            tokens = 0
    return resp.status_code, latency, tokens, resp.content


async def wave(client: Any, bodies: list[dict[str, Any]]) -> tuple[float, list[tuple[
        int, float, int, bytes]]]:
    """Send every body at once; (wall s, per-request results in body order)."""
    t0 = time.monotonic()
    results = await asyncio.gather(*(send(client, b) for b in bodies))
    return time.monotonic() - t0, list(results)
