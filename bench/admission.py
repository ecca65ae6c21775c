"""Admission-control load test: 1,000 concurrent requests from named keys, loopback only.

Processes: the fake engine of ``bench/gateway.py`` (``--role engine``, every answer held
``--delay-ms``, default 3 s, so admitted requests stay in flight) and the appliance gateway
with a keys file and a global bound (``--max-pending``, default 300). Each phase opens
1,000 client connections (aiohttp, one per request), warms them up with ``GET
/health/live``, then sends one chat request on each, the starts spread evenly over
``--ramp`` seconds (0 = all at once), and waits for every answer.

* phase ``limits``: 450 requests from key ``capped`` (concurrent 20), 450 from ``metered``
  (rpm 120), 100 from ``steady`` (concurrent 150: under its limit). Expected: 429
  ``rate_limited`` for the excess of the first two, ``steady`` fully served, no 5xx.
* phase ``overload``: 1,000 requests from an unlimited plain key. Expected: ``max-pending``
  admitted, the rest 503 ``overloaded``, no other 5xx.

Reported per phase: answers by key, status and code; latency p50 / p99 / max per answer
kind (request sent -> whole answer read); the gateway's peak RSS (``VmHWM``) and RSS after
the phase. Bounded: 2 phases x 1,000 requests, everything on 127.0.0.1.

Usage::

    PYTHONPATH=. python bench/admission.py [--ramp 1.0] [--delay-ms 3000]
        [--max-pending 300] [--rounds 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gateway import _free_port, _pct, _wait_ready, request_body, stop_processes  # noqa: E402

PLAIN_KEY = "sk-bench-admission-flood-0001"
MODEL = "fake-model"
N = 1000


def run_gateway(port: int, engine_port: int, keys_file: str, max_pending: int) -> None:
    from appliance.gateway import GatewaySettings, serve_until_signal

    settings = GatewaySettings(
        upstream_url=f"http://127.0.0.1:{engine_port}", served_model_name=MODEL,
        api_keys=[PLAIN_KEY], keys_file=Path(keys_file), max_pending=max_pending,
        tools_enabled=True)
    serve_until_signal(settings, "127.0.0.1", port)


def refusal_cost(n: int = 5000) -> float:
    """Microseconds of CPU (process time) per 429 refusal, in process: the gateway's ASGI app
    called directly with a request from a key already at its concurrency limit."""
    from appliance.config.keys import KeyLimits, add_key
    from appliance.gateway import GatewaySettings, create_app

    keys_file = Path(tempfile.mkdtemp(prefix="adm-cost-")) / "keys.json"
    key = add_key(keys_file, "capped", KeyLimits(concurrent=1))
    app = create_app(GatewaySettings(upstream_url="http://127.0.0.1:9", served_model_name=MODEL,
                                     keys_file=keys_file))
    state = app.state
    entry = state.keys.entries[0]
    asyncio.run(state.admission.admit(entry.id, entry.limits))  # the one slot is taken
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions",
             "raw_path": b"/v1/chat/completions", "root_path": "",
             "headers": [(b"host", b"127.0.0.1"), (b"authorization", b"Bearer " + key.encode()),
                         (b"content-type", b"application/json"), (b"content-length", b"2")]}
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    async def loop(count: int) -> None:
        for _ in range(count):
            await app(dict(scope), receive, send)

    asyncio.run(loop(500))
    t0 = time.process_time()  # CPU time: the shared machine's load does not count
    asyncio.run(loop(n))
    seconds = time.process_time() - t0
    if set(statuses) != {429}:
        raise RuntimeError(f"expected only 429 answers, got {sorted(set(statuses))}")
    return seconds / n * 1e6


def _rss_kib(pid: int) -> tuple[int, int]:
    """(VmHWM, VmRSS) of ``pid`` in KiB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            values[name] = int(rest.split()[0])
    return values["VmHWM"], values["VmRSS"]


async def phase(url: str, plan: list[tuple[str, str]], ramp: float) -> list[dict[str, Any]]:
    """Send one request per (key id, key) in ``plan``; return one row per answer."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=120)
    body = request_body(stream=False)
    rows: list[dict[str, Any]] = []
    if True:  # one session (one connection) per request: 1,000 concurrent connections
        sessions = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1),
                                          timeout=timeout) for _ in plan]
        try:
            await asyncio.gather(*(s.get(url + "/health/live") for s in sessions))
            t0 = time.perf_counter()

            async def one(i: int, key_id: str, key: str) -> None:
                delay = t0 + (ramp * i / len(plan)) - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                start = time.perf_counter()
                async with sessions[i].post(
                        url + "/v1/chat/completions", data=body,
                        headers={"Authorization": f"Bearer {key}",
                                 "Content-Type": "application/json"}) as resp:
                    raw = await resp.read()
                    status = resp.status
                    retry = resp.headers.get("retry-after")
                ms = (time.perf_counter() - start) * 1000
                code = ""
                if status != 200:
                    try:
                        code = json.loads(raw)["error"]["code"]
                    except (ValueError, KeyError, TypeError):
                        code = "unparsable"
                rows.append({"key": key_id, "status": status, "code": code, "ms": ms,
                             "retry_after": retry})

            await asyncio.gather(*(one(i, kid, key) for i, (kid, key) in enumerate(plan)))
        finally:
            await asyncio.gather(*(s.close() for s in sessions))
    return rows


def summarize(name: str, rows: list[dict[str, Any]], rss: tuple[int, int]) -> dict[str, Any]:
    counts = collections.Counter((r["key"], r["status"], r["code"]) for r in rows)
    kinds: dict[str, list[float]] = collections.defaultdict(list)
    for r in rows:
        kinds[f"{r['status']} {r['code'] or 'ok'}"].append(r["ms"])
    bad = sum(n for (_, status, code), n in counts.items()
              if status >= 500 and code != "overloaded")
    print(f"\n## phase {name}: {len(rows)} answers")
    for (key, status, code), n in sorted(counts.items()):
        print(f"  {key:9s} {status} {code or 'ok':14s} {n:5d}")
    for kind, values in sorted(kinds.items()):
        print(f"  latency {kind:18s} n={len(values):4d} p50 {_pct(values, 0.5):8.1f} ms  "
              f"p99 {_pct(values, 0.99):8.1f} ms  max {max(values):8.1f} ms")
    print(f"  5xx other than 503 overloaded: {bad}")
    print(f"  gateway peak RSS (VmHWM) {rss[0] / 1024:.1f} MiB, RSS after {rss[1] / 1024:.1f} "
          "MiB")
    return {"phase": name, "counts": {f"{k}|{s}|{c}": n for (k, s, c), n in counts.items()},
            "latency_ms": {k: {"n": len(v), "p50": _pct(v, 0.5), "p99": _pct(v, 0.99),
                               "max": max(v)} for k, v in kinds.items()},
            "other_5xx": bad, "vmhwm_kib": rss[0], "rss_kib": rss[1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--role", choices=["bench", "gateway", "refusal-cost"], default="bench")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--engine-port", type=int, default=0)
    ap.add_argument("--keys-file", default="")
    ap.add_argument("--max-pending", type=int, default=300)
    ap.add_argument("--delay-ms", type=float, default=3000.0)
    ap.add_argument("--ramp", type=float, default=1.0, help="seconds over which the 1,000 "
                    "requests start (0: all at once)")
    ap.add_argument("--rounds", type=int, default=1, help="repeat both phases")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.role == "gateway":
        run_gateway(args.port, args.engine_port, args.keys_file, args.max_pending)
        return
    if args.role == "refusal-cost":
        print(f"gateway CPU per 429 refusal (in process): {refusal_cost():.1f} us")
        return

    from appliance.config.keys import KeyLimits, add_key

    tmp = Path(tempfile.mkdtemp(prefix="adm-bench-"))
    keys_file = tmp / "keys.json"
    keys = {"capped": add_key(keys_file, "capped", KeyLimits(concurrent=20)),
            "metered": add_key(keys_file, "metered", KeyLimits(rpm=120)),
            "steady": add_key(keys_file, "steady", KeyLimits(concurrent=150))}
    env = dict(os.environ)
    env["PYTHONPATH"] = str(HERE.parent) + os.pathsep + env.get("PYTHONPATH", "")
    engine_port, gw_port = _free_port(), _free_port()
    engine = subprocess.Popen([sys.executable, str(HERE / "gateway.py"), "--role", "engine",
                               "--port", str(engine_port), "--delay-ms", str(args.delay_ms)],
                              env=env)
    gateway = subprocess.Popen([sys.executable, __file__, "--role", "gateway", "--port",
                                str(gw_port), "--engine-port", str(engine_port),
                                "--keys-file", str(keys_file), "--max-pending",
                                str(args.max_pending)], env=env)
    results = []
    try:
        _wait_ready(f"http://127.0.0.1:{engine_port}/health")
        _wait_ready(f"http://127.0.0.1:{gw_port}/health/ready")
        url = f"http://127.0.0.1:{gw_port}"
        print(f"# {N} requests per phase, ramp {args.ramp} s, engine holds each answer "
              f"{args.delay_ms:.0f} ms, max_pending {args.max_pending}, {os.cpu_count()} CPUs"
              f", gateway idle RSS {_rss_kib(gateway.pid)[1] / 1024:.1f} MiB")
        import uvloop

        plans = {
            "limits": [("capped", keys["capped"])] * 450 + [("metered", keys["metered"])] * 450
            + [("steady", keys["steady"])] * 100,
            "overload": [("flood", PLAIN_KEY)] * N,
        }
        for rnd in range(args.rounds):
            for name, plan in plans.items():
                # interleave keys so every key's requests arrive across the whole ramp
                order = sorted(range(len(plan)), key=lambda i: (i * 7919) % len(plan))
                load = os.getloadavg()[0]
                rows = uvloop.run(phase(url, [plan[i] for i in order], args.ramp))
                print(f"\n# round {rnd + 1}, load average before the phase {load:.1f}")
                results.append(summarize(name, rows, _rss_kib(gateway.pid)))
                time.sleep(args.delay_ms / 1000 + 1)  # the engine's held answers drain
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
    finally:
        stop_processes([gateway, engine])


if __name__ == "__main__":
    main()
