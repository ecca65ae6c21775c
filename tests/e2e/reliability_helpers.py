"""Shared pieces of the real-engine reliability tests: a chaos-sized CPU policy (small
scheduler budget and KV cache, so chunked prefill and preemption really happen), a served
appliance, and small async HTTP helpers."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from appliance.builtin.model import PreparedModel
from appliance.config.policy import Policy, load_policy
from appliance.serve import Appliance

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "policies" / "cpu-demo.toml"
MODEL = "appliance-model"
# A tool prompt is ~300 tokens: a 128-token step budget splits every prefill across steps.
BATCHED_TOKENS = 128
# 40 blocks x 128 tokens = 5120 KV slots for 16-32 sequences of 300-600 tokens.
KV_BLOCKS = 40
# The chaos campaign's cache: 17 blocks = 2176 slots (just above max_model_len 2048) for 16
# sequences of 100-900 tokens: requests wait for blocks and running ones are preempted.
CHAOS_KV_BLOCKS = 17


def chaos_policy(log_dir: Path, kv_blocks: int = KV_BLOCKS, **supervisor: Any) -> Policy:
    """cpu-demo.toml with the small scheduler budget, KV cache and a test log folder."""
    policy = load_policy(POLICY)
    return policy.model_copy(update={
        "engine": policy.engine.model_copy(update={
            "max_num_batched_tokens": BATCHED_TOKENS, "num_kv_blocks": kv_blocks,
            # the small caches below are sized for 2048-token sequences (the demo's 8192
            # would not fit one in 17 or 40 blocks)
            "max_num_seqs": 32, "max_model_len": 2048}),
        "supervisor": policy.supervisor.model_copy(update={"log_dir": log_dir, **supervisor}),
    })


@dataclass
class Served:
    app: Appliance
    key: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.app.port}"

    def client(self, timeout: float = 300.0) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
        return httpx.AsyncClient(base_url=self.url, timeout=timeout, limits=limits,
                                 headers={"Authorization": f"Bearer {self.key}"})


def start_served(model: PreparedModel, policy: Policy) -> Served:
    key = secrets.token_urlsafe(24)
    app = Appliance(policy=policy, model_dir=model.model_dir, public_key=model.public_key,
                    api_keys=[key], host="127.0.0.1", port=0)
    app.start()
    return Served(app, key)


WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city, in Celsius (c) or Fahrenheit (f).",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 40},
                           "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city", "unit"], "additionalProperties": False,
        },
    },
}


def tool_body(i: int, **extra: Any) -> dict[str, Any]:
    city = ["Paris", "Oslo", "Lima", "Pune"][i % 4]
    body: dict[str, Any] = {
        "model": MODEL, "tools": [WEATHER_TOOL], "tool_choice": "required",
        "messages": [{"role": "user", "content": f"What is the weather in {city}? " * 4}],
        "max_tokens": 96, "temperature": 0.7,
    }
    body.update(extra)
    return body


def long_body(i: int, stream: bool, max_tokens: int = 400) -> dict[str, Any]:
    """A sampled "long story" chat request (keeps the engine busy for many steps)."""
    return {"model": MODEL, "stream": stream, "max_tokens": max_tokens, "temperature": 1.0,
            "messages": [{"role": "user", "content": f"Write a long story number {i}."}]}


async def send_long(client: httpx.AsyncClient, i: int, stream: bool,
                    max_tokens: int = 400) -> tuple[int, str, float]:
    """(status, error code or '' for a normal end, monotonic end time); a stream without
    its ``[DONE]`` is ``no_done_event``, one ended by a restart ``engine_restarting``."""
    body = long_body(i, stream, max_tokens)
    if not stream:
        resp = await client.post("/v1/chat/completions", json=body)
        code = resp.json().get("error", {}).get("code", "") if resp.status_code != 200 else ""
        return resp.status_code, code, time.monotonic()
    last, done = "", False
    async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        async for line in resp.aiter_lines():
            if line.startswith("data: ") and '"error"' in line:
                last = line
            done = done or line == "data: [DONE]"
    code = "engine_restarting" if "engine_restarting" in last else ("error" if last else "")
    return resp.status_code, code or ("" if done else "no_done_event"), time.monotonic()


def check_cut_by_failure(results: list[tuple[int, str, float]], at: float,
                         min_cut: int) -> list[float]:
    """Assert how :func:`send_long` results (request ``i`` streamed when ``i`` is odd) ended
    around an engine failure at monotonic time ``at``; return the seconds after ``at`` at
    which the requests that ended after it ended.

    A normal end (200, ``""``) is right whenever it arrives: a sampled story may reach EOS
    just before the failure, and its client may read the last bytes after ``at`` (seen in CI,
    stop 16: stream 13 got its ``[DONE]`` after the kill). A dead or stopped engine sends no
    ``[DONE]``, and a stream the gateway ends itself carries an error event before its
    ``[DONE]``. Every other request was cut: it ends after ``at`` with 503 (plain) or 200 and
    a terminal ``engine_restarting`` event (streamed), and at least ``min_cut`` were cut.
    """
    cut = 0
    for i, (status, code, end) in enumerate(results):
        if code == "":
            assert status == 200, (i, status, "a normal end is a 200")
            continue
        cut += 1
        assert (status, code) == ((200 if i % 2 else 503), "engine_restarting"), (i, status, code)
        assert end > at, (i, status, code, "cut before the failure")
    assert cut >= min_cut, f"only {cut} of {len(results)} requests cut by the failure"
    return [end - at for _, _, end in results if end > at]


def engine_running(served: Served) -> int:
    """``vllm:num_requests_running`` read from the engine's own metrics (0 if unreachable)."""
    from appliance.engine.launcher import engine_get

    engine = served.app.runs[0].engine
    assert engine is not None
    try:
        _, body = engine_get(engine.spec.socket_path, "/metrics", engine.spec.api_key)
    except OSError:
        return 0
    for line in body.decode().splitlines():
        if line.startswith("vllm:num_requests_running{"):
            return int(float(line.rsplit(" ", 1)[1]))
    return 0
