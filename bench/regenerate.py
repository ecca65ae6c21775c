"""How many refused answers bounded regeneration turns valid (issue 34), on the CPU demo.

One run starts the appliance once (the built-in model, ``cpu-demo.toml`` with ``[gateway]
regenerate_invalid = --tries``) and sends the ``formats`` suite of ``appliance bench tools``
(``appliance/toolbench/data/formats.json``: dates, ranges and patterns the grammar leaves to
the gateway's validation) ``--repeat`` times at ``--concurrency``, non-streaming, at
``--temperature``. The measurement is paired, request by request: the response header
``x-appliance-regenerations`` is present exactly when the first answer was refused
(``invalid_structured_output`` / ``invalid_tool_call``), so each request tells both what
``regenerate_invalid = 0`` would have answered (its first answer: 200 iff no header) and
what ``--tries`` answered (its status). Reported: first-answer and final validity (Wilson
95 % intervals), refused first answers turned valid (k of m), regenerations sent (extra
engine calls), latency with and without regeneration, per case, and the gateway's
``gateway_regenerations_total{model,outcome}``.

Usage::

    PYTHONPATH=. python bench/regenerate.py [--tries 2] [--repeat 2] [--concurrency 4]
        [--temperature 0.7] [--cases ID,ID] [--json out.json] [--md out.md]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from appliance.gateway.chat.regenerate import HEADER
from appliance.toolbench.checks import judge
from appliance.toolbench.runner import payload
from appliance.toolbench.stats import wilson
from appliance.toolbench.suite import Case, load_suite

REFUSED = ("invalid_structured_output", "invalid_tool_call")


def rate(k: int, n: int) -> tuple[float | None, float | None, float | None]:
    """(rate, low, high) of k successes in n: the Wilson interval of
    :func:`appliance.toolbench.stats.wilson` (none of the three when n == 0)."""
    if n == 0:
        return None, None, None
    low, high = wilson(k, n)
    return k / n, low, high


async def one(client: httpx.AsyncClient, case: Case, model: str, temperature: float,
              repeat: int) -> dict[str, Any]:
    body = payload(case, model, case.messages, temperature, False)
    t0 = time.monotonic()
    try:
        r = await client.post("/chat/completions", json=body)
    except httpx.HTTPError as exc:
        return {"case": case.id, "repeat": repeat, "status": None, "error": type(exc).__name__,
                "regenerations": None, "latency_s": time.monotonic() - t0, "valid": False}
    latency = time.monotonic() - t0
    header = r.headers.get(HEADER.decode())
    record: dict[str, Any] = {"case": case.id, "repeat": repeat, "status": r.status_code,
                              "regenerations": None if header is None else int(header),
                              "latency_s": round(latency, 3), "error": None, "valid": False,
                              "reason": None}
    try:
        obj = r.json()
    except ValueError:
        record["error"] = "not_json"
        return record
    if r.status_code != 200:
        err = obj.get("error") if isinstance(obj, dict) else None
        record["error"] = err.get("code") if isinstance(err, dict) else f"http_{r.status_code}"
        return record
    verdict = judge(case, obj, 1)
    record.update(valid=verdict.valid, reason=verdict.reason,
                  completion_tokens=verdict.completion_tokens)
    return record


def first_valid(rec: dict[str, Any]) -> bool:
    """What ``regenerate_invalid = 0`` would have answered: the first answer, valid."""
    if rec["regenerations"] is not None:  # the first answer was refused
        return False
    return bool(rec["valid"])


def summarize(records: list[dict[str, Any]], metrics: dict[str, float]) -> dict[str, Any]:
    n = len(records)
    first = sum(first_valid(r) for r in records)
    final = sum(bool(r["valid"]) for r in records)
    refused_first = [r for r in records if r["regenerations"] is not None]
    recovered = [r for r in refused_first if r["valid"]]
    sent = sum(r["regenerations"] or 0 for r in records)

    def lat(rows: list[dict[str, Any]]) -> float | None:
        return round(statistics.median(r["latency_s"] for r in rows), 2) if rows else None

    cases: dict[str, dict[str, int]] = {}
    for r in records:
        c = cases.setdefault(r["case"], {"n": 0, "first_valid": 0, "final_valid": 0,
                                         "refused_first": 0, "regenerations": 0})
        c["n"] += 1
        c["first_valid"] += first_valid(r)
        c["final_valid"] += bool(r["valid"])
        c["refused_first"] += r["regenerations"] is not None
        c["regenerations"] += r["regenerations"] or 0
    other = {}
    for r in records:
        if not r["valid"] and r["regenerations"] is None:
            key = r["error"] or r["reason"] or "?"
            other[key] = other.get(key, 0) + 1
    return {
        "requests": n,
        "first_answer_valid": dict(zip(("rate", "low", "high"), rate(first, n),
                                       strict=True), k=first),
        "final_valid": dict(zip(("rate", "low", "high"), rate(final, n), strict=True),
                            k=final),
        "refused_first": len(refused_first),
        "recovered": dict(zip(("rate", "low", "high"),
                              rate(len(recovered), len(refused_first)), strict=True),
                          k=len(recovered)),
        "regenerations_sent": sent,
        "extra_engine_calls_per_request": round(sent / n, 3) if n else None,
        "latency_p50_s": {"no_regeneration": lat([r for r in records
                                                 if r["regenerations"] is None]),
                          "regenerated": lat(refused_first)},
        "not_valid_without_refusal": other,
        "cases": cases,
        "gateway_regenerations_total": metrics,
    }


def scrape(text: str) -> dict[str, float]:
    """``gateway_regenerations_total`` from a ``/metrics`` text, summed per ``outcome``
    (parsed by ``prometheus_client``'s parser, as ``appliance.toolbench.cost`` does)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gateway_regenerations_total":
                outcome = sample.labels["outcome"]
                out[outcome] = out.get(outcome, 0.0) + float(sample.value)
    return out


def pct(d: dict[str, Any]) -> str:
    if d["rate"] is None:
        return "–"
    return f"{100 * d['rate']:.1f} % [{100 * d['low']:.1f}–{100 * d['high']:.1f}]"


def markdown(result: dict[str, Any]) -> str:
    s = result["summary"]
    lines = [
        "# Bounded regeneration on the `formats` suite",
        "",
        f"`{result['command']}`  ",
        f"{result['started']} UTC, host load before/after: {result['load_before']} / "
        f"{result['load_after']} (`/proc/loadavg`, {os.cpu_count()} CPUs), model "
        f"{result['model']}, `[gateway] regenerate_invalid = {result['tries']}`, "
        f"temperature {result['temperature']}, concurrency {result['concurrency']}, "
        f"{result['repeat']} round(s), wall {result['wall_s']:.0f} s.",
        "",
        "Paired per request: the first answer is what `regenerate_invalid = 0` answers "
        "(the header `x-appliance-regenerations` is present exactly when it was refused).",
        "",
        "| | valid (95 % interval) |",
        "|---|---|",
        f"| first answer (`regenerate_invalid = 0`) | {s['first_answer_valid']['k']}/"
        f"{s['requests']}: {pct(s['first_answer_valid'])} |",
        f"| after regeneration (`= {result['tries']}`) | {s['final_valid']['k']}/"
        f"{s['requests']}: {pct(s['final_valid'])} |",
        f"| refused first answers turned valid | {s['recovered']['k']}/{s['refused_first']}:"
        f" {pct(s['recovered'])} |",
        "",
        f"Regenerations sent: {s['regenerations_sent']} "
        f"({s['extra_engine_calls_per_request']} extra engine calls per request). Latency "
        f"p50: {s['latency_p50_s']['no_regeneration']} s without regeneration, "
        f"{s['latency_p50_s']['regenerated']} s with. Not valid without a refusal (not "
        f"regenerated): {s['not_valid_without_refusal'] or 'none'}. "
        f"`gateway_regenerations_total` by outcome: {s['gateway_regenerations_total']}.",
        "",
        "| case | n | first valid | refused first | final valid | regenerations |",
        "|---|---|---|---|---|---|",
    ]
    for cid, c in s["cases"].items():
        lines.append(f"| `{cid}` | {c['n']} | {c['first_valid']} | {c['refused_first']} | "
                     f"{c['final_valid']} | {c['regenerations']} |")
    return "\n".join(lines) + "\n"


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


async def drive(base_url: str, key: str, model: str, args: argparse.Namespace
                ) -> tuple[list[dict[str, Any]], dict[str, float]]:
    suite = load_suite("formats")
    wanted = set(args.cases.split(",")) if args.cases else None
    cases = [c for c in suite.cases if wanted is None or c.id in wanted]
    if not cases:
        raise SystemExit(f"--cases {args.cases!r} names no case of the formats suite")
    jobs = [(r, c) for r in range(args.repeat) for c in cases]
    sem = asyncio.Semaphore(args.concurrency)
    async with httpx.AsyncClient(base_url=base_url, timeout=args.timeout,
                                 headers={"Authorization": f"Bearer {key}"}) as client:
        async def run(r: int, c: Case) -> dict[str, Any]:
            async with sem:
                rec = await one(client, c, model, args.temperature, r)
                print(json.dumps(rec), file=sys.stderr, flush=True)
                return rec

        records = list(await asyncio.gather(*(run(r, c) for r, c in jobs)))
        root = base_url.rsplit("/v1", 1)[0]
        metrics = scrape((await client.get(f"{root}/metrics")).text)
    return records, metrics


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tries", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--cases", default=None, help="comma list of case ids (default: all)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--md", type=Path, default=None)
    args = ap.parse_args()

    from appliance.builtin.model import prepare
    from appliance.config.policy import load_policy
    from appliance.resources import policy_path
    from appliance.serve import Appliance

    model = prepare()
    policy = load_policy(policy_path("cpu-demo.toml"))
    policy = policy.model_copy(update={"gateway": policy.gateway.model_copy(
        update={"regenerate_invalid": args.tries})})
    key = secrets.token_urlsafe(32)
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    load_before = _load()
    app = Appliance(policy=policy, model_dir=model.model_dir, public_key=model.public_key,
                    api_keys=[key], host="127.0.0.1", port=0)
    app.start()
    try:
        t0 = time.monotonic()
        records, metrics = asyncio.run(drive(f"http://127.0.0.1:{app.port}/v1", key,
                                             policy.model.served_name, args))
        wall = time.monotonic() - t0
    finally:
        app.stop()
    result = {
        "command": "PYTHONPATH=. python bench/regenerate.py " + " ".join(sys.argv[1:]),
        "started": started, "load_before": load_before, "load_after": _load(),
        "model": policy.model.served_name, "tries": args.tries,
        "temperature": args.temperature, "concurrency": args.concurrency,
        "repeat": args.repeat, "wall_s": round(wall, 1),
        "summary": summarize(records, metrics), "records": records,
    }
    text = markdown(result)
    print(text)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    if args.md is not None:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
