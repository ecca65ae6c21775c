"""Accuracy by category, and the paired comparison of two targets (``--compare``).

``by_category(records, suite) -> {category: CAT}`` for suites whose cases carry a
``category`` (the accuracy suites), plus ``"all"``; over a level's constrained answers::

    CAT = {"answers": int, "valid": Rate, "accuracy": Rate,
           "wrong_calls": Rate | None,   # irrelevance answers that called a tool (else None)
           "ast_reasons": {reason: count},           # why answers were not accurate
           "latency_s": {mean, low, high, p50},      # 95 % percentile bootstrap of the mean
           "completion_tokens": {mean, low, high}}

Rates are ``stats.Rate`` dicts (95 % Wilson). Accuracy counts an answer right when
``Record.correct`` is true (the AST match of :mod:`appliance.toolbench.ast_match`); an error
or refused answer is not accurate.

``compare_block(report, other, suite, file) -> COMPARE`` pairs two reports' answers by (case,
repeat, first step) at each concurrency level present in both::

    COMPARE = {"file": str, "label", "base_url", "model",
               "levels": [{"concurrency", "summary": {"by_category": ...} (the other target),
                           "paired": {category: PAIR}}]}
    PAIR = {"pairs": int, "accuracy": FLIPS, "valid": FLIPS}
    FLIPS = {"both": int, "first_only": int, "second_only": int, "neither": int,
             "difference": {difference, low, high},  # first − second, paired Wald 95 %
             "mcnemar_p": float,                      # exact two-sided
             "first_only_cases": [id, ...], "second_only_cases": [id, ...]}

"first" is the report's own target, "second" the ``--compare`` one.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from appliance.toolbench.runner import Record
from appliance.toolbench.stats import (
    Rate,
    bootstrap_mean,
    mcnemar_exact,
    paired_difference,
    percentile,
)
from appliance.toolbench.suite import Suite

ALL = "all"


def categories_of(suite: Suite) -> dict[str, str]:
    return {c.id: c.category for c in suite.cases if c.category}


def _stats(recs: list[Record], irrelevance: bool) -> dict[str, Any]:
    n = len(recs)
    lat = [r.latency_s for r in recs if r.http_status is not None]
    toks = [float(r.completion_tokens) for r in recs if r.http_status == 200]
    return {
        "answers": n,
        "valid": Rate.of(sum(r.outcome == "valid" for r in recs), n).to_json(),
        "accuracy": Rate.of(sum(r.correct is True for r in recs), n).to_json(),
        "wrong_calls": Rate.of(sum(r.ast_reason == "call_on_irrelevance" for r in recs),
                               n).to_json() if irrelevance else None,
        "ast_reasons": dict(Counter(r.ast_reason for r in recs if r.ast_reason).most_common()),
        "latency_s": {**bootstrap_mean(lat), "p50": percentile(lat, 50)},
        "completion_tokens": bootstrap_mean(toks),
    }


def by_category(records: list[Record], suite: Suite) -> dict[str, Any] | None:
    """Per category (and ``all``) of the constrained answers; ``None`` without categories."""
    cats = categories_of(suite)
    if not cats:
        return None
    recs = [r for r in records if r.phase == "constrained" and r.case in cats]
    out: dict[str, Any] = {}
    for cat in sorted(set(cats.values())):
        mine = [r for r in recs if cats[r.case] == cat]
        out[cat] = _stats(mine, cat == "irrelevance")
    out[ALL] = _stats(recs, False)
    return out


def _flips(pairs: list[tuple[str, bool, bool]]) -> dict[str, Any]:
    both = sum(a and b for _, a, b in pairs)
    first = [cid for cid, a, b in pairs if a and not b]
    second = [cid for cid, a, b in pairs if b and not a]
    return {"both": both, "first_only": len(first), "second_only": len(second),
            "neither": len(pairs) - both - len(first) - len(second),
            "difference": paired_difference(len(first), len(second), len(pairs)),
            "mcnemar_p": round(mcnemar_exact(len(first), len(second)), 6),
            "first_only_cases": sorted(set(first)), "second_only_cases": sorted(set(second))}


def paired(first: list[dict[str, Any]], second: list[dict[str, Any]],
           suite: Suite) -> dict[str, Any]:
    """Pair two levels' records (report JSON rows) by (case, repeat) at step 1."""
    cats = categories_of(suite)

    def key(rows: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
        return {(r["case"], r["repeat"]): r for r in rows
                if r["phase"] == "constrained" and r["step"] == 1}

    a, b = key(first), key(second)
    common = sorted(set(a) & set(b))
    groups: dict[str, list[tuple[str, int]]] = {ALL: common}
    for k in common:
        groups.setdefault(cats.get(k[0], "uncategorised"), []).append(k)
    out: dict[str, Any] = {}
    for cat, keys in sorted(groups.items()):
        out[cat] = {
            "pairs": len(keys),
            "accuracy": _flips([(k[0], a[k]["correct"] is True, b[k]["correct"] is True)
                                for k in keys]),
            "valid": _flips([(k[0], a[k]["outcome"] == "valid", b[k]["outcome"] == "valid")
                             for k in keys]),
        }
    return out


def compare_block(report: dict[str, Any], other: dict[str, Any], suite: Suite,
                  file: str) -> dict[str, Any]:
    mine = {lv["concurrency"]: lv for lv in report["levels"]}
    levels = []
    for lv in other["levels"]:
        c = lv["concurrency"]
        if c not in mine:
            continue
        levels.append({"concurrency": c, "summary": lv["summary"],
                       "paired": paired(mine[c]["records"], lv["records"], suite)})
    return {"file": file, "label": other.get("label"), "base_url": other["base_url"],
            "model": other["model"], "complete": other["complete"], "levels": levels}


def _pct(rate: dict[str, Any] | None) -> str:
    if not rate or rate.get("rate") is None:
        return "–"
    return f"{100 * rate['rate']:.1f} % [{100 * rate['low']:.1f}–{100 * rate['high']:.1f}]"


def _mean(d: dict[str, Any], fmt: str) -> str:
    if d.get("mean") is None:
        return "–"
    return f"{fmt.format(d['mean'])} [{fmt.format(d['low'])}–{fmt.format(d['high'])}]"


def category_rows(label: str, concurrency: int, cats: dict[str, Any]) -> list[str]:
    rows = []
    for cat, m in cats.items():
        rows.append(f"| {label} | {concurrency} | {cat} | {m['answers']} | {_pct(m['valid'])} | "
                    f"{_pct(m['accuracy'])} | {_pct(m['wrong_calls'])} | "
                    f"{_mean(m['latency_s'], '{:.2f}')} | "
                    f"{_mean(m['completion_tokens'], '{:.1f}')} |")
    return rows


def markdown(report: dict[str, Any]) -> list[str]:
    """The accuracy and comparison sections of ``report.md`` (empty without categories)."""
    targets = [(report.get("label") or report["base_url"], report["levels"])]
    cmp = report.get("compare")
    if cmp:
        targets.append((cmp.get("label") or cmp["base_url"], cmp["levels"]))
    rows: list[str] = []
    for label, levels in targets:
        for lv in levels:
            cats = lv["summary"].get("by_category")
            if cats:
                rows += category_rows(label, lv["concurrency"], cats)
    if not rows:
        return []
    out = ["", "## Accuracy by category (AST match, BFCL rules)", "",
           "Accuracy = the calls match the expected calls (function, required and known "
           "arguments, values under the type and string rules of "
           "`appliance/toolbench/ast_match.py`); irrelevance cases are right with no call. "
           "Wrong calls = irrelevance answers that called a tool. Latency and completion "
           "tokens: mean [95 % bootstrap].", "",
           "| target | concurrency | category | answers | valid | accuracy | wrong calls | "
           "latency s | completion tokens |", "|---|---|---|---|---|---|---|---|---|", *rows]
    if cmp:
        first = report.get("label") or report["base_url"]
        second = cmp.get("label") or cmp["base_url"]
        out += ["", f"## Paired: {first} (first) vs {second} (second), case by case", "",
                "Each case's answer of one target paired with its twin of the other (same "
                "case and repeat, sent at the same moment). Difference = first − second, "
                "paired 95 % interval; McNemar exact p on the discordant pairs.", "",
                "| concurrency | category | metric | pairs | both | first only | second only | "
                "neither | difference [95 %] | McNemar p |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        flipped: list[str] = []
        for lv in cmp["levels"]:
            for cat, p in lv["paired"].items():
                for metric in ("accuracy", "valid"):
                    f = p[metric]
                    d = f["difference"]
                    diff = "–" if d["difference"] is None else (
                        f"{100 * d['difference']:+.1f} pt [{100 * d['low']:+.1f}, "
                        f"{100 * d['high']:+.1f}]")
                    out.append(f"| {lv['concurrency']} | {cat} | {metric} | {p['pairs']} | "
                               f"{f['both']} | {f['first_only']} | {f['second_only']} | "
                               f"{f['neither']} | {diff} | {f['mcnemar_p']:.3g} |")
            acc = lv["paired"].get(ALL, {}).get("accuracy")
            if acc:
                flipped.append(f"- concurrency {lv['concurrency']}: right only on {first}: "
                               f"{', '.join(acc['first_only_cases']) or 'none'}; right only "
                               f"on {second}: {', '.join(acc['second_only_cases']) or 'none'}")
        out += ["", "Flipped cases (accuracy):", "", *flipped]
    return out


def summary_lines(report: dict[str, Any]) -> list[str]:
    """One line per target, level and category for the terminal."""
    targets = [(report.get("label") or report["base_url"], report["levels"])]
    if report.get("compare"):
        targets.append((report["compare"].get("label") or report["compare"]["base_url"],
                        report["compare"]["levels"]))
    lines = []
    for label, levels in targets:
        for lv in levels:
            for cat, m in (lv["summary"].get("by_category") or {}).items():
                acc, val = m["accuracy"], m["valid"]
                wrong = m["wrong_calls"]
                lines.append(
                    f"target={label} concurrency={lv['concurrency']} category={cat} "
                    f"answers={m['answers']} valid={_pct(val)} accuracy={_pct(acc)}"
                    + (f" wrong_calls={_pct(wrong)}" if wrong else ""))
    for lv in (report.get("compare") or {}).get("levels", []):
        acc = lv["paired"].get(ALL, {}).get("accuracy")
        if acc:
            lines.append(f"paired concurrency={lv['concurrency']} accuracy: first_only="
                         f"{acc['first_only']} second_only={acc['second_only']} "
                         f"mcnemar_p={acc['mcnemar_p']:.3g}")
    return lines
