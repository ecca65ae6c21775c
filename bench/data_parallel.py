"""Data parallel through ``appliance serve``: the demo's tool call, then tokens/s per core.

Runs ``appliance serve`` (the CLI, the whole spine) on the built-in model twice:

- ``one rank``: ``data_parallel_size = 1`` bound to one core (``omp_threads_bind = "0"``);
- ``dp2``: ``data_parallel_size = 2``, one core per rank (``omp_threads_bind = "0|1"``).

For each: the demo's ``tool_choice="required"`` weather call through the gateway (must be a
valid call), then ``--requests`` concurrent chat completions of ``--max-tokens`` each;
tokens/s = completion tokens (from ``usage``) / wall seconds of the burst, per core = that
divided by the cores bound. Prints one JSON line per configuration and the per-core ratio
(dp2 / one rank). On a shared host the absolute figures move; the ratio is the result.

Usage: ``python bench/data_parallel.py [--requests 8] [--max-tokens 64] [--dp2-first]``

Measured 2026-12-03 on the 2-core machine kind while other jobs kept the load average at
12-17 (so both figures are far below an idle host's): results in ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _policy(folder: Path, dp: int, bind: str, port: int) -> Path:
    base = (REPO / "policies" / "cpu-demo.toml").read_text()
    base = base.replace('omp_threads_bind = "0-1"', f'omp_threads_bind = "{bind}"')
    base = base.replace('advisories = "advisories.json"',
                        f'advisories = "{REPO / "policies" / "advisories.json"}"')
    base = base.replace("port = 8000", f"port = {port}")
    body = base + f"\n[engine.parallel]\ndata_parallel_size = {dp}\n" \
        f"\n[supervisor]\nlog_dir = \"{folder / 'logs'}\"\n"
    path = folder / f"dp{dp}.toml"
    path.write_text(body)
    return path


def _ready(port: int, proc: subprocess.Popen[bytes], timeout_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"appliance serve exited {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/ready", timeout=2):
                return time.monotonic() - start
        except OSError:
            time.sleep(1)
    raise RuntimeError("not ready in time")


async def _burst(base_url: str, key: str, model: str, requests: int,
                 max_tokens: int) -> tuple[int, float]:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=600)
    t0 = time.monotonic()
    answers = await asyncio.gather(*[
        client.chat.completions.create(
            model=model, max_tokens=max_tokens, temperature=0.8,
            messages=[{"role": "user", "content": f"Tell story number {i} about a cat."}])
        for i in range(requests)])
    seconds = time.monotonic() - t0
    await client.close()
    return sum(a.usage.completion_tokens for a in answers if a.usage), seconds


def run(dp: int, bind: str, cores: int, args: argparse.Namespace, work: Path) -> dict[str, object]:
    from appliance.builtin.demo import weather_call
    from appliance.builtin.model import prepare
    from appliance.engine.reaper import spawn_group, stop_group

    model = prepare()
    port = 18600 + dp
    key = secrets.token_hex(24)
    (work / "keys").write_text(key + "\n")
    policy = _policy(work, dp, bind, port)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    log = (work / f"serve-dp{dp}.log").open("wb")
    # own session, guarded: a bench that dies (even SIGKILLed) takes the target with it
    proc = spawn_group(
        [sys.executable, "-m", "appliance.cli", "serve", "--model", str(model.model_dir),
         "--public-key", str(model.public_key), "--policy", str(policy),
         "--api-key-file", str(work / "keys")], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        ready_s = _ready(port, proc, 900)
        base = f"http://127.0.0.1:{port}/v1"
        name, arguments = asyncio.run(weather_call(base, key, "appliance-model"))
        asyncio.run(_burst(base, key, "appliance-model", 2, 8))  # warm-up
        tokens, seconds = asyncio.run(_burst(base, key, "appliance-model", args.requests,
                                             args.max_tokens))
    finally:
        stop_group(proc, grace_s=120)  # serve drains and stops its engine, then exits
        log.close()
    rate = tokens / seconds
    return {"config": f"dp{dp}", "bind": bind, "cores": cores, "ready_s": round(ready_s, 1),
            "tool_call": name, "arguments": arguments, "tokens": tokens,
            "seconds": round(seconds, 2), "tokens_per_s": round(rate, 1),
            "tokens_per_s_per_core": round(rate / cores, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--dp2-first", action="store_true",
                        help="measure dp2 before the one-rank configuration")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="appliance-dp-") as tmp:
        configs = [(1, "0", 1), (2, "0|1", 2)]
        results = {}
        for dp, bind, cores in (configs[::-1] if args.dp2_first else configs):
            results[dp] = run(dp, bind, cores, args, Path(tmp))
            print(json.dumps(results[dp]), flush=True)
        one, two = results[1], results[2]
    ratio = float(two["tokens_per_s_per_core"]) / float(one["tokens_per_s_per_core"])  # type: ignore[arg-type]
    print(json.dumps({"per_core_ratio_dp2_vs_one_rank": round(ratio, 3),
                      "total_ratio": round(float(two["tokens_per_s"])  # type: ignore[arg-type]
                                           / float(one["tokens_per_s"]), 3)}))  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
