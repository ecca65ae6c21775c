"""The report: ``summarize`` a level, ``to_json`` a run, ``markdown``, ``compare`` to a baseline.

Report JSON (``schema_version`` 1)::

    {"schema_version": 1, "tool": "appliance bench tools", "created": ISO-8601 UTC,
     "base_url": str, "label": str, "model": str, "suite": {"name", "sha256", "cases": [id]},
     "repeat": int, "temperature": float, "complete": bool,
     "error": null | {"code", "message", "at", "fix"},  (a Diagnostic's JSON form)
     "levels": [{"concurrency": int, "summary": SUMMARY, "wall_s": {phase: s},
                 "chains": [...], "records": [...]}],
     "baseline": null | {"file": str, "regressions": int, "rows": [ROW]}}

SUMMARY: ``answers``; ``valid``, ``correct``, ``silent_invalid`` as ``Rate`` dicts
(k, n, rate, low, high; 95 % Wilson); ``truncated``, ``refused``, ``errors`` (counts); ``reasons``
({reason: count} of answers not valid); ``by_case`` ({id: {valid, n}}); ``chained``
({"10": {"predicted": {rate, low, high}, "measured": Rate | null}, "50": …});
``latency_s`` ({p50, p99}, constrained answers with an HTTP status); ``mean_in_flight``
(constrained single requests in flight on average: their summed latency / the phase's wall
time); ``tokens_per_s``
({constrained, plain}: the single-request cases; chains run in their own phase, see
``runner``); ``constraint_ratio`` (constrained / plain tokens/s, null without a plain phase
or without single-request cases); ``constraint_tax`` (1 − ratio).

A regression (``compare``): for ``valid`` and ``correct`` at each concurrency level present in
both reports, and for the accuracy of each category both summaries hold (``accuracy[simple]``
...), the baseline's rate lies above the current run's 95 % interval.

Accuracy suites add ``by_category`` to SUMMARY and a ``--compare`` run adds ``compare``
(:mod:`appliance.toolbench.categories`; null otherwise).
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from appliance.toolbench.categories import by_category
from appliance.toolbench.categories import markdown as category_markdown
from appliance.toolbench.errors import BenchError
from appliance.toolbench.runner import BenchRun, LevelResult, Record
from appliance.toolbench.stats import Rate, chained, percentile
from appliance.toolbench.suite import Suite

CHAIN_KS = (10, 50)
SCHEMA_VERSION = 1
GATED = ("valid", "correct")


def _known(suite: Suite) -> set[str]:
    return {c.id for c in suite.cases
            if c.kind == "chain" or {"calls", "no_call", "content", "ast"} & set(c.expect)}


def summarize(level: LevelResult, suite: Suite) -> dict[str, Any]:
    recs = [r for r in level.records if r.phase == "constrained"]
    plain = [r for r in level.records if r.phase == "plain"]
    n = len(recs)
    outcomes = Counter(r.outcome for r in recs)
    valid = Rate.of(outcomes["valid"], n)
    known = _known(suite)
    known_recs = [r for r in recs if r.case in known]
    by_case: dict[str, dict[str, int]] = {}
    for r in recs:
        entry = by_case.setdefault(r.case, {"valid": 0, "n": 0})
        entry["n"] += 1
        entry["valid"] += r.outcome == "valid"
    chains: dict[str, Any] = {}
    for k in CHAIN_KS:
        runs = [c for c in level.chains if c.steps >= k and c.stop_reason != "aborted"]
        chains[str(k)] = {
            "predicted": chained(valid, k),
            "measured": Rate.of(sum(c.steps_ok >= k for c in runs), len(runs)).to_json()
            if runs else None,
        }
    latencies = [r.latency_s for r in recs if r.http_status is not None]
    wall = level.wall_s.get("constrained")
    in_flight = round(sum(r.latency_s for r in recs if r.kind != "chain") / wall, 2) \
        if wall else None

    def tps(rows: list[Record], phase: str) -> float | None:
        wall = level.wall_s.get(phase)
        if not wall or not rows:
            return None
        return round(sum(r.completion_tokens for r in rows if r.http_status == 200) / wall, 3)

    singles = [r for r in recs if r.kind != "chain"]  # chains: own phase, no plain twin
    constrained_tps, plain_tps = tps(singles, "constrained"), tps(plain, "plain")
    ratio = (round(constrained_tps / plain_tps, 4)
             if constrained_tps is not None and plain_tps else None)
    return {
        "answers": n,
        "valid": valid.to_json(),
        "correct": Rate.of(sum(r.correct is True for r in known_recs), len(known_recs)).to_json(),
        "silent_invalid": Rate.of(outcomes["invalid"], n).to_json(),
        "truncated": outcomes["truncated"],
        "refused": outcomes["refused"],
        "errors": outcomes["error"],
        "reasons": dict(Counter(r.reason or r.outcome for r in recs if r.outcome != "valid")
                        .most_common()),
        "by_case": by_case,
        "chained": chains,
        "latency_s": {"p50": percentile(latencies, 50), "p99": percentile(latencies, 99)},
        "mean_in_flight": in_flight,
        "tokens_per_s": {"constrained": constrained_tps, "plain": plain_tps},
        "constraint_ratio": ratio,
        "constraint_tax": round(1 - ratio, 4) if ratio is not None else None,
        "by_category": by_category(level.records, suite),
    }


def to_json(run: BenchRun) -> dict[str, Any]:
    err = run.error
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "appliance bench tools",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "base_url": run.base_url,
        "label": run.label or run.base_url,
        "model": run.model,
        "suite": {"name": run.suite.name, "sha256": run.suite.sha256,
                  "cases": [c.id for c in run.suite.cases]},
        "repeat": run.repeat,
        "temperature": run.temperature,
        "complete": run.complete,
        "error": None if err is None else err.diagnostic.to_json(),
        "levels": [{**lvl.to_json(), "summary": summarize(lvl, run.suite)}
                   for lvl in run.levels],
        "baseline": None,
        "compare": None,
    }


def load_report(path: Path) -> dict[str, Any]:
    """A report written by this tool; ``BenchError`` ``baseline_invalid`` otherwise."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BenchError(f"cannot read the baseline report: {exc}", code="baseline_invalid",
                         where=str(path), fix="pass a report.json written by this tool") \
            from None
    levels = data.get("levels") if isinstance(data, dict) else None
    if (not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION
            or not isinstance(levels, list) or not all(
                isinstance(lv, dict) and isinstance(lv.get("concurrency"), int)
                and isinstance(lv.get("summary"), dict)
                and all(isinstance(lv["summary"].get(m), dict) for m in GATED)
                for lv in levels)):
        raise BenchError("not a report of appliance bench tools (schema_version 1)",
                         code="baseline_invalid", where=str(path),
                         fix="pass a report.json written by this tool")
    return data


def compare(current: dict[str, Any], baseline: dict[str, Any], source: str) -> dict[str, Any]:
    """Rows per (concurrency, metric) present in both; ``regression`` when the baseline rate is
    above the current 95 % interval."""
    base = {lv["concurrency"]: lv["summary"] for lv in baseline["levels"]}
    rows: list[dict[str, Any]] = []
    for lv in current["levels"]:
        c = lv["concurrency"]
        if c not in base:
            continue
        for metric in GATED:
            cur, old = lv["summary"][metric], base[c][metric]
            if cur.get("rate") is None or old.get("rate") is None:
                continue
            rows.append({
                "concurrency": c, "metric": metric, "baseline": old["rate"],
                "current": cur["rate"], "low": cur["low"], "high": cur["high"],
                "difference": round(cur["rate"] - old["rate"], 4),
                "regression": bool(old["rate"] > cur["high"]),
            })
        old_cats = base[c].get("by_category") or {}
        for cat, m in (lv["summary"].get("by_category") or {}).items():
            cur, old = m["accuracy"], (old_cats.get(cat) or {}).get("accuracy") or {}
            if cur.get("rate") is None or old.get("rate") is None:
                continue
            rows.append({
                "concurrency": c, "metric": f"accuracy[{cat}]", "baseline": old["rate"],
                "current": cur["rate"], "low": cur["low"], "high": cur["high"],
                "difference": round(cur["rate"] - old["rate"], 4),
                "regression": bool(old["rate"] > cur["high"]),
            })
    if baseline.get("suite", {}).get("sha256") != current["suite"]["sha256"]:
        note = "baseline ran a different suite (sha256 differs): rates are not comparable"
    else:
        note = None
    return {"file": source, "model": baseline.get("model"), "base_url": baseline.get("base_url"),
            "label": baseline.get("label") or baseline.get("base_url"),
            "note": note, "regressions": sum(r["regression"] for r in rows), "rows": rows}


def _pct(rate: dict[str, Any] | None) -> str:
    if not rate or rate.get("rate") is None:
        return "–"
    return f"{100 * rate['rate']:.1f} % [{100 * rate['low']:.1f}–{100 * rate['high']:.1f}]"


def _num(value: float | None, fmt: str = "{:.2f}") -> str:
    return "–" if value is None else fmt.format(value)


def markdown(report: dict[str, Any], plots: list[str]) -> str:
    """The human report (GitHub Markdown); ``plots`` are PNG file names beside it."""
    s = report["suite"]
    out = [
        "# Tool-call reliability benchmark",
        "",
        f"- target **{report.get('label') or report['base_url']}**: endpoint "
        f"`{report['base_url']}`, model `{report['model']}`",
        f"- suite `{s['name']}` (sha256 `{s['sha256'][:16]}…`, {len(s['cases'])} cases), "
        f"repeat {report['repeat']}, temperature {report['temperature']}",
        f"- created {report['created']}; complete: **{report['complete']}**",
    ]
    if report["error"]:
        e = report["error"]
        out += ["", f"**Stopped early:** `error[{e['code']}]` {e['message']} "
                    f"(fix: {e['fix']}). The numbers below are the partial results."]
    out += ["", "Valid = schema-valid tool call / JSON with the right function and a complete "
            "answer (what an agent needs to go on); correct = valid and the known arguments "
            "match; silently invalid = HTTP 200 with an answer that is not valid and not marked "
            "as cut; truncated = HTTP 200 with finish_reason length (any answer, text "
            "included); refused = "
            "an error status (the endpoint said it failed). Intervals: 95 % Wilson.", "",
            "| concurrency (mean in flight) | answers | valid | correct | silently invalid "
            "| truncated | refused | errors | p50 s | p99 s | tok/s constrained | tok/s plain "
            "| constrained / plain |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for lv in report["levels"]:
        m = lv["summary"]
        out.append(
            f"| {lv['concurrency']} ({_num(m.get('mean_in_flight'), '{:.1f}')}) | "
            f"{m['answers']} | {_pct(m['valid'])} | "
            f"{_pct(m['correct'])} | {_pct(m['silent_invalid'])} | {m.get('truncated', 0)} | "
            f"{m['refused']} | "
            f"{m['errors']} | {_num(m['latency_s']['p50'])} | {_num(m['latency_s']['p99'])} | "
            f"{_num(m['tokens_per_s']['constrained'], '{:.1f}')} | "
            f"{_num(m['tokens_per_s']['plain'], '{:.1f}')} | "
            f"{_num(m['constraint_ratio'], '{:.2f}×')} |")
    out += ["", "## Chained success (an agent loop of K calls all valid)", "",
            "| concurrency | K | predicted from per-call rate | measured (agent-loop chains) |",
            "|---|---|---|---|"]
    for lv in report["levels"]:
        for k, ch in lv["summary"]["chained"].items():
            out.append(f"| {lv['concurrency']} | {k} | {_pct(ch['predicted'])} | "
                       f"{_pct(ch['measured']) if ch['measured'] else 'no chain of this length'}"
                       f" |")
    out += ["", "## Failures by reason", ""]
    for lv in report["levels"]:
        reasons = lv["summary"]["reasons"]
        text = ", ".join(f"`{k}` {v}" for k, v in reasons.items()) if reasons else "none"
        out.append(f"- concurrency {lv['concurrency']}: {text}")
    out += ["", "## Valid answers by case", "",
            "| case | " + " | ".join(f"c={lv['concurrency']}" for lv in report["levels"]) + " |",
            "|---|" + "---|" * len(report["levels"])]
    for cid in s["cases"]:
        cells = []
        for lv in report["levels"]:
            e = lv["summary"]["by_case"].get(cid)
            cells.append(f"{e['valid']}/{e['n']}" if e else "–")
        out.append(f"| {cid} | " + " | ".join(cells) + " |")
    out += category_markdown(report)
    base = report.get("baseline")
    if base:
        out += ["", f"## Against the baseline `{base['file']}`", "",
                f"Baseline: **{base.get('label') or base['base_url']}** (`{base['base_url']}`), "
                f"model `{base['model']}`. "
                f"Regressions: **{base['regressions']}**"
                + (f" ({base['note']})" if base["note"] else "") + ".", "",
                "| concurrency | metric | baseline | current [95 %] | difference | regression |",
                "|---|---|---|---|---|---|"]
        for r in base["rows"]:
            out.append(
                f"| {r['concurrency']} | {r['metric']} | {100 * r['baseline']:.1f} % | "
                f"{100 * r['current']:.1f} % [{100 * r['low']:.1f}–{100 * r['high']:.1f}] | "
                f"{100 * r['difference']:+.1f} pt | {'**yes**' if r['regression'] else 'no'} |")
    if plots:
        out += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    return "\n".join(out) + "\n"


def write(report: dict[str, Any], out_dir: Path, plots: list[str]) -> tuple[Path, Path]:
    """Write ``report.json`` and ``report.md`` (atomically: a reader never sees half a file)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = (out_dir / "report.json", out_dir / "report.md")
    for path, text in zip(paths, (json.dumps(report, indent=1) + "\n",
                                  markdown(report, plots)), strict=True):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    return paths


def resummarize(data: dict[str, Any], suite: Suite) -> dict[str, Any]:
    """Recompute every level's summary of a report from its raw records (after a change in
    how outcomes are classified: a record judged ``truncated`` becomes outcome ``truncated``).
    Raises ``BenchError`` ``baseline_invalid`` when ``suite`` is not the one that ran."""
    from dataclasses import asdict

    from appliance.toolbench.runner import ChainRun

    if data.get("suite", {}).get("sha256") != suite.sha256:
        raise BenchError("the report ran a different suite", code="baseline_invalid",
                         fix="pass the suite the report names")
    for lv in data["levels"]:
        recs = [Record(**r) for r in lv["records"]]
        for rec in recs:
            if rec.outcome == "invalid" and rec.reason == "truncated":
                rec.outcome = "truncated"
        level = LevelResult(lv["concurrency"], recs, [ChainRun(**c) for c in lv["chains"]],
                            dict(lv["wall_s"]))
        lv["records"] = [asdict(r) for r in recs]
        lv["summary"] = summarize(level, suite)
    return data
