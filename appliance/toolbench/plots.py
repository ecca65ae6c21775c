"""PNG plots of a report (matplotlib, imported lazily with the non-GUI ``Agg`` backend).

``plot(report, out_dir) -> [file names]`` writes:

- ``validity.png``: valid rate (95 % Wilson error bars) and silently-invalid rate vs
  concurrency; the baseline's valid rate dashed when the report has one;
- ``constraint_tax.png``: constrained / plain tokens/s vs concurrency (1.0 = no cost);
- ``latency_cdf.png``: the CDF of constrained request latency (s), one line per level.

Raises ``BenchError`` ``missing_dependency`` when matplotlib is not installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from appliance.toolbench.errors import BenchError


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise BenchError("matplotlib is not installed: no plots", code="missing_dependency",
                         fix="pip install matplotlib (the JSON and Markdown were written)") \
            from None
    return plt


def plot(report: dict[str, Any], out_dir: Path,
         baseline: dict[str, Any] | None = None) -> list[str]:
    plt = _pyplot()
    levels = report["levels"]
    conc = [lv["concurrency"] for lv in levels]
    names: list[str] = []
    label = report.get("label") or f"{report['model']} @ {report['base_url']}"

    fig, ax = plt.subplots(figsize=(6, 4))
    valid = [lv["summary"]["valid"] for lv in levels]
    xs = [c for c, v in zip(conc, valid, strict=True) if v["rate"] is not None]
    vs = [v for v in valid if v["rate"] is not None]
    ax.errorbar(xs, [100 * v["rate"] for v in vs],
                yerr=[[100 * (v["rate"] - v["low"]) for v in vs],
                      [100 * (v["high"] - v["rate"]) for v in vs]],
                marker="o", capsize=4, label=f"valid ({label})")
    silent = [lv["summary"]["silent_invalid"] for lv in levels]
    ax.plot(xs, [100 * s["rate"] for s in silent if s["rate"] is not None], marker="x",
            linestyle=":", label="silently invalid (HTTP 200)")
    if baseline is not None:
        bl = [(lv["concurrency"], lv["summary"]["valid"]["rate"]) for lv in baseline["levels"]
              if lv["summary"]["valid"]["rate"] is not None]
        ax.plot([c for c, _ in bl], [100 * r for _, r in bl], linestyle="--", marker="s",
                label="valid, baseline (" + (baseline.get("label") or
                                             f"{baseline['model']} @ {baseline['base_url']}")
                      + ")")
    ax.set_xscale("log", base=2)
    ax.set_xticks(conc, [str(c) for c in conc])
    ax.set_ylim(-3, 103)
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel("% of answers")
    ax.set_title("Tool-call validity vs concurrency (95 % Wilson)")
    ax.legend(fontsize=7, loc="center left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_dir / "validity.png", dpi=90)
    plt.close(fig)
    names.append("validity.png")

    ratios = [(c, lv["summary"]["constraint_ratio"]) for c, lv in zip(conc, levels, strict=True)
              if lv["summary"]["constraint_ratio"] is not None]
    if ratios:
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot([c for c, _ in ratios], [r for _, r in ratios], marker="o")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(conc, [str(c) for c in conc])
        ax.set_xlabel("concurrent requests")
        ax.set_ylabel("constrained / plain tokens/s")
        ax.set_title("Constraint tax (same prompts, with and without constraints)")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(out_dir / "constraint_tax.png", dpi=90)
        plt.close(fig)
        names.append("constraint_tax.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    for lv in levels:
        lat = sorted(r["latency_s"] for r in lv["records"]
                     if r["phase"] == "constrained" and r["http_status"] is not None)
        if lat:
            ax.step(lat, [(i + 1) / len(lat) for i in range(len(lat))], where="post",
                    label=f"concurrency {lv['concurrency']}")
    ax.set_xlabel("latency (s)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("Latency CDF, constrained requests")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_dir / "latency_cdf.png", dpi=90)
    plt.close(fig)
    names.append("latency_cdf.png")
    return names


def plot_accuracy(report: dict[str, Any], out_dir: Path) -> str:
    """``accuracy_validity.png``: accuracy vs validity (95 % Wilson bars on both axes), one
    marker per target and category at the first concurrency level; the diagonal is
    "every valid answer right"."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 5))
    targets = [(report.get("label") or report["base_url"], report["levels"])]
    if report.get("compare"):
        targets.append((report["compare"].get("label") or report["compare"]["base_url"],
                        report["compare"]["levels"]))
    markers = "osD^vP*X"
    for t, (label, levels) in enumerate(targets):
        cats = (levels[0]["summary"].get("by_category") or {}) if levels else {}
        for i, (cat, m) in enumerate(cats.items()):
            v, a = m["valid"], m["accuracy"]
            if v["rate"] is None or a["rate"] is None:
                continue
            ax.errorbar([100 * v["rate"]], [100 * a["rate"]],
                        xerr=[[100 * (v["rate"] - v["low"])], [100 * (v["high"] - v["rate"])]],
                        yerr=[[100 * (a["rate"] - a["low"])], [100 * (a["high"] - a["rate"])]],
                        marker=markers[i % len(markers)], color=f"C{t}", capsize=3,
                        linestyle="none", label=f"{label}: {cat}")
    ax.plot([0, 100], [0, 100], color="grey", linewidth=0.8, linestyle="--")
    ax.set_xlim(-3, 103)
    ax.set_ylim(-3, 103)
    ax.set_xlabel("valid (% of answers)")
    ax.set_ylabel("accurate, AST match (% of answers)")
    ax.set_title("Accuracy vs validity per target and category (95 % Wilson)")
    ax.legend(fontsize=6, loc="upper left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_dir / "accuracy_validity.png", dpi=90)
    plt.close(fig)
    return "accuracy_validity.png"
