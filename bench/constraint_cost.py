"""Where the tool-call constraint's time goes, on the real CPU engine (issue 34).

Rig: the built-in signed model served by ``Appliance`` under ``policies/cpu-demo.toml``
(``--tool-strict-level parameter``, xgrammar, ``disable_any_whitespace``), one API key. The
same requests go to two targets on **that one engine**: ``appliance`` (through the gateway)
and ``engine`` (the engine's own Unix socket and key: raw vLLM with the same constraint, no
gateway), so gateway time and engine time separate without a second engine competing for the
two cores. Requests: the single-request cases of the ``standard`` tool suite (tools with
``required``/named/``auto`` choice, parallel calls, ``response_format`` json_schema),
temperature 0; the ``plain`` twin is the same prompt with ``tool_choice: "none"`` and no
``response_format`` (``appliance.toolbench.runner.payload``), ``max_tokens`` capped at the
constrained answer's completion tokens.

Measured (``appliance.toolbench.cost``):

1. cold grammar compile: each case once, one at a time, right after the engine starts (its
   xgrammar cache is empty), against the same request again (a cache hit): the engine's queue
   time and time to first token per request (a request waits for its grammar in the queue);
2. per level ``--levels`` (default 1,4,8,32) and round: four waves of ``c`` requests at once,
   (appliance | engine) × (constrained | plain), order rotated per round; per wave the
   engine's own decode time per step (``vllm:request_decode_time_seconds`` / decode steps),
   prefill, queue and first-token times from its ``/metrics``, and the client's tokens/s;
3. in-process, the same xgrammar 0.2.8 and tokenizer: compile of each case's JSON grammar with
   and without the compiler cache, ``fill_next_token_bitmask`` + ``accept_token`` per token
   walking the engine's own constrained answer (the scheduler's per-request mask work per
   step; vLLM fills masks one request after another below 128 requests);
4. in-process, the gateway's own checks: ``check_chat_request`` (cold schema cache and warm)
   and ``check_completion`` on the engine's answer bytes.

Usage::

    PYTHONPATH=. timeout 1500 python bench/constraint_cost.py [--levels 1,4,8,32]
        [--rounds 2] [--out bench/results/tools/cost]
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

from appliance.toolbench.cost import (
    Target,
    Wave,
    delta,
    gateway_share,
    rotation,
    summarize,
    sums,
    wave,
)
from appliance.toolbench.runner import payload
from appliance.toolbench.suite import Case, load_suite

POLICY = Path(__file__).resolve().parent.parent / "policies" / "cpu-demo.toml"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cases(only: list[str] | None = None) -> list[Case]:
    """The standard suite's single-request cases (``only``: these ids, in this order)."""
    singles = {c.id: c for c in load_suite("standard").cases if c.kind != "chain"}
    return [singles[i] for i in only] if only else list(singles.values())


async def scrape(metrics: Any) -> dict[str, float]:
    resp = await metrics.get("/metrics")
    resp.raise_for_status()
    return sums(resp.text)


def bodies(cs: list[Case], model: str, c: int, mode: str,
           caps: dict[str, int]) -> list[dict[str, Any]]:
    out = []
    for i in range(c):
        case = cs[i % len(cs)]
        plain = mode == "plain"
        out.append(payload(case, model, case.messages, 0.0, plain,
                           caps.get(case.id) if plain else None))
    return out


async def cold_compile(targets: dict[str, Any], metrics: Any, cs: list[Case],
                       model: str, repeat: bool) -> dict[str, Any]:
    """Each case on the engine's socket, one at a time, right after the engine started
    (grammar compiled now); with ``repeat`` the same again (cache hit; otherwise compare with
    the c=1 constrained engine waves). Returns the per-request engine queue/ttft medians and
    the answers seen."""
    rows: dict[str, list[dict[str, Any]]] = {"cold": [], "warm": []}
    answers: dict[str, bytes] = {}
    for which in ("cold", "warm") if repeat else ("cold",):
        for case in cs:
            before = await scrape(metrics)
            status, latency, tokens, raw = (await wave(
                targets["engine"], [payload(case, model, case.messages, 0.0, False)]))[1][0]
            d = delta(before, await scrape(metrics))
            answers.setdefault(case.id, raw)
            rows[which].append({"case": case.id, "status": status, "latency_s": latency,
                                "tokens": tokens, "queue_ms": d.per_request_ms(d.queue_s),
                                "ttft_ms": d.per_request_ms(d.ttft_s),
                                "prefill_ms": d.per_request_ms(d.prefill_s)})

    def med(which: str, key: str) -> float | None:
        vals = [r[key] for r in rows[which] if r[key] is not None]
        return round(statistics.median(vals), 3) if vals else None

    return {"rows": rows, "answers": answers,
            "summary": {w: {k: med(w, k) for k in ("queue_ms", "ttft_ms", "prefill_ms")}
                        for w in rows if rows[w]}}


def caps_of(rows: list[dict[str, Any]]) -> dict[str, int]:
    by: dict[str, list[int]] = {}
    for r in rows:
        if r["status"] == 200 and r["tokens"] > 0:
            by.setdefault(r["case"], []).append(r["tokens"])
    return {k: sorted(v)[len(v) // 2] for k, v in by.items()}


async def levels_run(targets: dict[str, Any], metrics: Any, cs: list[Case], model: str,
                     levels: list[int], rounds: int, caps: dict[str, int],
                     log: Any, waves: list[Wave], on_level: Any) -> list[Wave]:
    for c in levels:
        for r in range(rounds):
            for target, mode in rotation(r):
                before = await scrape(metrics)
                wall, res = await wave(targets[target], bodies(cs, model, c, mode, caps))
                try:
                    d = delta(before, await scrape(metrics))
                except ValueError:
                    d = None
                w = Wave(c, r, target, mode, round(wall, 4), [round(x[1], 4) for x in res],
                         [x[2] for x in res], [x[0] for x in res], d)
                waves.append(w)
                tps = w.tokens_per_s
                print(f"c={c} r={r} {target:9s} {mode:11s} wall={wall:6.2f}s "
                      f"tok/s={0 if tps is None else tps:6.1f} "
                      f"step_ms={d.decode_ms_per_step if d else None} load={load()}",
                      file=log, flush=True)
        on_level(waves)
    return waves


def xgrammar_costs(model_dir: Path, cs: list[Case], answers: dict[str, bytes],
                   reps: int = 5) -> list[dict[str, Any]]:
    """Compile (cache off / hit) and per-token mask fill for each case's JSON grammar, with the
    engine's xgrammar and the model's tokenizer, walking the engine's own answer."""
    import xgrammar as xgr
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    config = json.loads((model_dir / "config.json").read_text())
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=config["vocab_size"])
    out = []
    for case in cs:
        schema, text = _grammar_and_text(case, answers.get(case.id, b""))
        if schema is None:
            continue
        spec = json.dumps(schema)
        cold = []
        for _ in range(reps):
            compiler = xgr.GrammarCompiler(info, max_threads=8, cache_enabled=False)
            t0 = time.perf_counter()
            compiler.compile_json_schema(spec, any_whitespace=False, separators=(",", ":"))
            cold.append(time.perf_counter() - t0)
        cached = xgr.GrammarCompiler(info, max_threads=8, cache_enabled=True)
        ctx = cached.compile_json_schema(spec, any_whitespace=False, separators=(",", ":"))
        hits = []
        for _ in range(reps):
            t0 = time.perf_counter()
            cached.compile_json_schema(spec, any_whitespace=False, separators=(",", ":"))
            hits.append(time.perf_counter() - t0)
        fills, accepts, steps = [], [], 0
        if text:
            matcher = xgr.GrammarMatcher(ctx)
            bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
            for token in tok.encode(text, add_special_tokens=False):
                t0 = time.perf_counter()
                matcher.fill_next_token_bitmask(bitmask)
                t1 = time.perf_counter()
                ok = matcher.accept_token(token)
                t2 = time.perf_counter()
                if not ok:
                    break
                fills.append(t1 - t0)
                accepts.append(t2 - t1)
                steps += 1
        out.append({
            "case": case.id,
            "compile_cold_ms": round(1000 * statistics.median(cold), 3),
            "compile_cache_hit_ms": round(1000 * statistics.median(hits), 4),
            "steps_walked": steps,
            "fill_mask_ms_per_step": round(1000 * statistics.median(fills), 4) if fills
            else None,
            "accept_ms_per_step": round(1000 * statistics.median(accepts), 4) if accepts
            else None,
        })
    return out


def _grammar_and_text(case: Case, raw: bytes) -> tuple[dict[str, Any] | None, str]:
    """The JSON schema the engine enforces for one call/answer of ``case`` and the engine's
    answer serialised as the grammar writes it (compact separators)."""
    try:
        msg = json.loads(raw)["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        msg = {}
    if case.response_format is not None:
        schema = case.response_format["json_schema"]["schema"]
        return schema, msg.get("content") or ""
    if not case.tools:
        return None, ""
    schema = {"anyOf": [{"type": "object", "properties": {
        "name": {"const": t["function"]["name"]},
        "arguments": t["function"].get("parameters", {"type": "object"})},
        "required": ["name", "arguments"], "additionalProperties": False}
        for t in case.tools]}
    text = ""
    calls = msg.get("tool_calls") or []
    if calls:
        fn = calls[0]["function"]
        text = json.dumps({"name": fn["name"], "arguments": json.loads(fn["arguments"])},
                          separators=(",", ":"))
    return schema, text


def gateway_costs(cs: list[Case], model: str, answers: dict[str, bytes],
                  reps: int = 200) -> list[dict[str, Any]]:
    """The gateway's request and response checks, timed in this process (µs, medians)."""
    from appliance.gateway.chat.request_checks import check_chat_request
    from appliance.gateway.chat.response_checks import check_completion
    from appliance.gateway.schema.subset import SchemaCache
    from appliance.gateway.settings import GatewaySettings

    settings = GatewaySettings(upstream_url="http://127.0.0.1:9", served_model_name=model,
                               api_keys=["k" * 16], tools_enabled=True)
    out = []
    for case in cs:
        raw = json.dumps(payload(case, model, case.messages, 0.0, False)).encode()
        cold, warm, resp = [], [], []
        cache = SchemaCache()
        for _ in range(reps):
            t0 = time.perf_counter()
            check_chat_request(raw, settings, SchemaCache())
            cold.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            req = check_chat_request(raw, settings, cache)
            warm.append(time.perf_counter() - t0)
            answer = answers.get(case.id)
            if answer:
                t0 = time.perf_counter()
                try:
                    check_completion(answer, req, settings.max_tool_args_bytes)
                except Exception:  # noqa: BLE001 - a refused answer still costs its check
                    pass
                resp.append(time.perf_counter() - t0)
        out.append({"case": case.id,
                    "request_check_cold_us": round(1e6 * statistics.median(cold), 1),
                    "request_check_warm_us": round(1e6 * statistics.median(warm), 1),
                    "response_check_us": round(1e6 * statistics.median(resp), 1)
                    if resp else None})
    return out


async def measure(app: Any, api_key: str, model: str, levels: list[int], rounds: int,
                  log: Any, cs: list[Case], repeat: bool, save: Any) -> dict[str, Any]:
    engine = app.engine
    spec = engine.spec
    gw = Target("appliance", f"http://127.0.0.1:{app.port}/v1", api_key)
    eng = Target("engine", "http://localhost/v1", spec.api_key, uds=str(spec.socket_path))
    metrics_t = Target("metrics", "http://localhost", spec.api_key, uds=str(spec.socket_path))
    targets = {"appliance": gw.client(600.0), "engine": eng.client(600.0)}
    metrics = metrics_t.client(60.0)
    waves: list[Wave] = []
    try:
        t0 = time.monotonic()
        cold = await cold_compile(targets, metrics, cs, model, repeat)
        print(f"compile pass done in {time.monotonic() - t0:.1f} s: "
              f"{cold['summary']}", file=log, flush=True)
        answers = cold.pop("answers")
        caps = caps_of([r for rows in cold["rows"].values() for r in rows])

        def result() -> dict[str, Any]:
            rows = summarize(waves)
            return {"cold_compile": cold, "caps": caps, "levels": rows,
                    "gateway_minus_engine": gateway_share(rows),
                    "waves": [w.to_json() for w in waves], "_answers": answers}

        await levels_run(targets, metrics, cs, model, levels, rounds, caps, log, waves,
                         lambda _w: save(result()))
    finally:
        for t in (gw, eng, metrics_t):
            for c in t.clients:
                await c.aclose()
    return result()


def report(result: dict[str, Any]) -> str:
    lines = ["# The constraint's cost on the CPU demo", "",
             f"- command: `{result['command']}`",
             f"- load (1/5/15 min) before: {result.get('load_before')}; after: "
             f"{result.get('load_after', result.get('load_now'))}; {result['host']}; "
             f"complete: {result.get('complete')}",
             f"- created {result.get('created')}", "",
             "## Per level (medians over rounds; engine figures from its /metrics)", "",
             "| c | target | tok/s constrained | tok/s plain | ratio | tokens/answer c/p | "
             "decode ms/step c | p | step ratio | prefill ms c/p | queue ms c/p |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]

    def n(x: Any, f: str = "{:.2f}") -> str:
        return "–" if x is None else f.format(x)

    for r in result["levels"]:
        c, p = r.get("constrained", {}), r.get("plain", {})
        lines.append(
            f"| {r['concurrency']} | {r['target']} | {n(c.get('tokens_per_s'), '{:.1f}')} | "
            f"{n(p.get('tokens_per_s'), '{:.1f}')} | {n(r.get('tokens_per_s_ratio'))}× | "
            f"{n(c.get('mean_completion_tokens'), '{:.1f}')}/"
            f"{n(p.get('mean_completion_tokens'), '{:.1f}')} | "
            f"{n(c.get('decode_ms_per_step'), '{:.1f}')} | "
            f"{n(p.get('decode_ms_per_step'), '{:.1f}')} | {n(r.get('step_cost_ratio'))}× | "
            f"{n(c.get('prefill_ms'), '{:.0f}')}/{n(p.get('prefill_ms'), '{:.0f}')} | "
            f"{n(c.get('queue_ms'), '{:.0f}')}/{n(p.get('queue_ms'), '{:.0f}')} |")
    lines += ["", "## Gateway minus engine (median latency, same requests, same engine)", "",
              "| c | mode | ms |", "|---|---|---|"]
    for g in result["gateway_minus_engine"]:
        lines.append(f"| {g['concurrency']} | {g['mode']} | {g['gateway_minus_engine_p50_ms']} |")
    s = result["cold_compile"]["summary"]
    lines += ["", "## Grammar compile: first request of each schema (engine socket, one at a "
              "time, medians; compare with the c=1 engine constrained row above)", "",
              "| | queue ms | ttft ms | prefill ms |", "|---|---|---|---|"]
    for which, label in (("cold", "cold (compile)"), ("warm", "cache hit")):
        if which in s:
            lines.append(f"| {label} | {s[which]['queue_ms']} | {s[which]['ttft_ms']} | "
                         f"{s[which]['prefill_ms']} |")
    lines += ["", "## xgrammar in-process (same version and tokenizer)", "",
              "| case | compile cold ms | cache hit ms | mask fill ms/step | accept ms/step | "
              "steps |", "|---|---|---|---|---|---|"]
    for x in result.get("xgrammar", []):
        lines.append(f"| {x['case']} | {x['compile_cold_ms']} | {x['compile_cache_hit_ms']} | "
                     f"{x['fill_mask_ms_per_step']} | {x['accept_ms_per_step']} | "
                     f"{x['steps_walked']} |")
    lines += ["", "## Gateway checks in-process (µs, medians)", "",
              "| case | request check, cold schema cache | warm | response check |",
              "|---|---|---|---|"]
    for g in result.get("gateway_checks", []):
        lines.append(f"| {g['case']} | {g['request_check_cold_us']} | "
                     f"{g['request_check_warm_us']} | {g['response_check_us']} |")
    return "\n".join(lines) + "\n"


def in_process_only(path: Path, cs: list[Case]) -> int:
    from appliance.builtin.model import prepare

    result = json.loads(path.read_text())
    answers = {k: v.encode() for k, v in result.get("answers", {}).items()}
    cs = [c for c in cs if c.id in answers] or cs
    result["xgrammar"] = xgrammar_costs(prepare().model_dir, cs, answers, reps=3)
    result["gateway_checks"] = gateway_costs(cs, "appliance-model", answers)
    result["in_process_load"] = load()
    path.write_text(json.dumps(result, indent=2) + "\n")
    path.with_suffix(".md").write_text(report(result))
    print(report(result))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--levels", default="1,4,8,32")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("bench/results/tools/cost"))
    parser.add_argument("--cases", default=None,
                        help="comma list of standard-suite case ids (default: all singles)")
    parser.add_argument("--no-repeat", action="store_true",
                        help="compile pass: each case once (cold) only")
    parser.add_argument("--in-process-only", type=Path, default=None, metavar="COST_JSON",
                        help="no engine: add the in-process xgrammar and gateway-check timings "
                             "to an earlier cost.json (walking its answers) and rewrite cost.md")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    cs = cases(args.cases.split(",") if args.cases else None)
    if args.in_process_only is not None:
        return in_process_only(args.in_process_only, cs)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"command": "PYTHONPATH=. python bench/constraint_cost.py " + " ".join(
        sys.argv[1:]), "host": f"{os.cpu_count()} CPUs"}

    def save(result: dict[str, Any]) -> None:
        out = {**meta, **{k: v for k, v in result.items() if k != "_answers"},
               "answers": {k: v.decode("utf-8", "replace")
                           for k, v in result.get("_answers", {}).items()},
               "load_now": load(), "complete": False}
        (args.out / "cost.json").write_text(json.dumps(out, indent=2) + "\n")

    from appliance.builtin.model import prepare
    from appliance.config.policy import load_policy
    from appliance.serve import Appliance

    model = prepare()
    policy = load_policy(POLICY)
    api_key = secrets.token_urlsafe(32)
    app = Appliance(policy=policy, model_dir=model.model_dir, public_key=model.public_key,
                    api_keys=[api_key], host="127.0.0.1", port=0)
    meta["load_before"] = load()
    app.start()
    try:
        result = asyncio.run(measure(app, api_key, policy.model.served_name, levels,
                                     args.rounds, sys.stderr, cs, not args.no_repeat, save))
    finally:
        app.stop()
    answers = result.pop("_answers")
    result.update(meta, load_after=load(), complete=True,
                  created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    result["answers"] = {k: v.decode("utf-8", "replace") for k, v in answers.items()}
    (args.out / "cost.json").write_text(json.dumps(result, indent=2) + "\n")  # kept if the
    result["xgrammar"] = xgrammar_costs(model.model_dir, cs, answers, reps=3)  # rest fails
    result["gateway_checks"] = gateway_costs(cs, policy.model.served_name, answers)
    (args.out / "cost.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "cost.md").write_text(report(result))
    print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
