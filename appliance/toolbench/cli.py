"""``appliance bench``: ``tools`` (the benchmark) and ``raw-vllm`` (the comparison engine).

``register(sub)`` adds the group to the ``appliance`` parser (the one hook in
``appliance/cli/``). ``appliance bench tools`` exits 0 (done, no regression), 1 (a
regression against ``--baseline`` beyond the 95 % interval), 2 (no verdict: an error, printed
as ``error[<code>]`` with the fix; the partial report is still written).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from appliance.resources import policy_path
from appliance.toolbench.errors import BenchError

SPAWN_KINDS = ("appliance", "raw-vllm", "raw-vllm-unconstrained")


def parse_levels(text: str) -> list[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        levels = []
    if not levels or any(not 1 <= c <= 1024 for c in levels):
        raise BenchError(f"--concurrency {text!r} is not a comma list of integers 1..1024",
                         code="bad_argument", where="--concurrency",
                         fix="e.g. --concurrency 1,8,32")
    return levels


def read_key(path: Path) -> str:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BenchError(f"cannot read the API key file: {exc}", code="bad_argument",
                         where=str(path), fix="pass a readable file with the key on a line") \
            from None
    keys = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    if not keys:
        raise BenchError("the API key file holds no key", code="bad_argument", where=str(path),
                         fix="write the key on the first non-comment line")
    return keys[0]


def _summary_lines(report: dict[str, Any]) -> list[str]:
    lines = []
    for lv in report["levels"]:
        m = lv["summary"]
        v, ratio = m["valid"], m["constraint_ratio"]
        rate = "–" if v["rate"] is None else (
            f"{100 * v['rate']:.1f} % [{100 * v['low']:.1f}-{100 * v['high']:.1f}]")
        p50 = m["latency_s"]["p50"]
        lines.append(
            f"concurrency={lv['concurrency']} answers={m['answers']} valid={rate} "
            f"silently_invalid={m['silent_invalid']['k']} truncated={m['truncated']} "
            f"refused={m['refused']} "
            f"errors={m['errors']} p50_s={'–' if p50 is None else f'{p50:.2f}'} "
            f"constrained/plain={'–' if ratio is None else f'{ratio:.2f}'}")
    return lines


async def _bench(args: argparse.Namespace, base_url: str, api_key: str,
                 model: str | None, other: tuple[str, str, str | None] | None = None) -> int:
    """Run the bench on one target, or with ``other`` (base_url, key, model) paired on two."""
    from appliance.toolbench import report as rep
    from appliance.toolbench.client import Endpoint
    from appliance.toolbench.runner import BenchRun, planned_requests, run_bench
    from appliance.toolbench.suite import load_suite

    levels = parse_levels(args.concurrency)
    suite = load_suite(args.suite)
    if args.repeat < 1:
        raise BenchError("--repeat must be at least 1", code="bad_argument", where="--repeat",
                         fix="e.g. --repeat 3")
    baseline = rep.load_report(args.baseline) if args.baseline else None
    out_dir: Path = args.output
    endpoint = Endpoint(base_url, api_key, timeout_s=args.timeout)
    second = Endpoint(other[0], other[1], timeout_s=args.timeout) if other else None
    other_run: BenchRun | None = None
    try:
        model = await endpoint.preflight(model)
        run = BenchRun(base_url, model, suite, args.repeat, args.temperature,
                       label=args.label or args.spawn)
        plain = not args.no_plain and second is None
        if second is not None and other is not None:
            other_run = BenchRun(other[0], await second.preflight(other[2]), suite,
                                 args.repeat, args.temperature,
                                 label=args.compare_label or args.compare)

        def save(current: BenchRun) -> None:
            rep.write(rep.to_json(current), out_dir, [])

        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        total = sum(planned_requests(suite, args.repeat, plain, c) for c in levels) * (
            2 if second is not None else 1)
        with Progress("[progress.description]{task.description}", BarColumn(),
                      MofNCompleteColumn(), TimeElapsedColumn(),
                      console=Console(stderr=True), disable=args.quiet) as progress:
            task = progress.add_task(f"bench {suite.name} on {model}", total=total)
            if second is not None and other_run is not None:
                from appliance.toolbench.categories import compare_block
                from appliance.toolbench.compare import Target, run_paired

                def save_both(runs: list[BenchRun]) -> None:
                    """Both reports, the first with the pairs so far (kept on Ctrl-C)."""
                    mine, theirs = rep.to_json(runs[0]), rep.to_json(runs[1])
                    rep.write(theirs, out_dir / "compare", [])
                    mine["compare"] = compare_block(mine, theirs, suite, "compare/report.json")
                    rep.write(mine, out_dir, [])

                await run_paired(
                    [Target(endpoint, run, _unconstrained(args.spawn, args.unconstrained)),
                     Target(second, other_run,
                            _unconstrained(args.compare, args.compare_unconstrained))],
                    levels, advance=lambda: progress.advance(task), on_level=save_both)
            else:
                await run_bench(endpoint, run, levels, plain,
                                advance=lambda: progress.advance(task), on_level=save,
                                unconstrained=_unconstrained(args.spawn, args.unconstrained),
                                warmup=not args.no_warmup)
    finally:
        await endpoint.close()
        if second is not None:
            await second.close()
    report = rep.to_json(run)
    if other_run is not None:
        from appliance.toolbench.categories import compare_block

        other_report = rep.to_json(other_run)
        rep.write(other_report, out_dir / "compare", [])
        report["compare"] = compare_block(report, other_report, suite, "compare/report.json")
    if baseline is not None:
        report["baseline"] = rep.compare(report, baseline, str(args.baseline))
    plots: list[str] = []
    if not args.no_plots and report["levels"]:
        try:
            from appliance.toolbench.plots import plot

            plots = plot(report, out_dir, baseline)
            if report.get("compare") or any(c.category for c in suite.cases):
                from appliance.toolbench.plots import plot_accuracy

                plots.append(plot_accuracy(report, out_dir))
        except BenchError as exc:
            print(exc.diagnostics(), file=sys.stderr)
    json_path, md_path = rep.write(report, out_dir, plots)
    for line in _summary_lines(report):
        print(line)
    from appliance.toolbench.categories import summary_lines

    for line in summary_lines(report):
        print(line)
    print(f"report={json_path}")
    print(f"markdown={md_path}")
    if run.error is not None:
        print(run.error.diagnostics(), file=sys.stderr)
        print(f"partial results kept in {json_path}", file=sys.stderr)
        return run.error.exit_status
    if report["baseline"] and report["baseline"]["regressions"]:
        for row in report["baseline"]["rows"]:
            if row["regression"]:
                print(f"regression: concurrency={row['concurrency']} {row['metric']} "
                      f"{100 * row['current']:.1f} % (95 % up to {100 * row['high']:.1f} %) < "
                      f"baseline {100 * row['baseline']:.1f} %", file=sys.stderr)
        return 1
    return 0


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def cmd_tools(args: argparse.Namespace) -> int:
    """SIGTERM (a CI timeout, ``kill``) and an inherited-ignored SIGINT act like Ctrl-C while
    it runs, so the partial report is written and a spawned target is stopped, not orphaned."""
    import signal

    old = {s: signal.signal(s, _interrupt) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        return _cmd_tools(args)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _unconstrained(target: str | None, flag: bool) -> bool:
    return flag or target == "raw-vllm-unconstrained"


def _cmd_tools(args: argparse.Namespace) -> int:
    import contextlib

    if not args.spawn:
        _need_target(args)  # before a --compare target is started
    with contextlib.ExitStack() as stack:
        other: tuple[str, str, str | None] | None = None
        if args.compare is not None:
            if args.compare in SPAWN_KINDS:
                from appliance.toolbench.raw_vllm import spawned

                url, key, name = stack.enter_context(spawned(args.compare, args.policy))
                other = (url, key, args.compare_model or name)
            elif args.compare_api_key_file is None:
                raise BenchError("--compare URL needs --compare-api-key-file",
                                 code="bad_argument", where="--compare",
                                 fix=f"or name a target to start: {', '.join(SPAWN_KINDS)}")
            else:
                other = (args.compare, read_key(args.compare_api_key_file), args.compare_model)
        if args.spawn:
            from appliance.toolbench.raw_vllm import spawned

            base_url, api_key, model = stack.enter_context(spawned(args.spawn, args.policy))
            return asyncio.run(_bench(args, base_url, api_key, args.model or model, other))
        return _cmd_one(args, other)


def _need_target(args: argparse.Namespace) -> None:
    if not args.base_url or args.api_key_file is None:
        raise BenchError("--base-url and --api-key-file are required (or --spawn)",
                         code="bad_argument", where="--base-url",
                         fix="e.g. --base-url http://127.0.0.1:8000/v1 --api-key-file key.txt")


def _cmd_one(args: argparse.Namespace, other: tuple[str, str, str | None] | None) -> int:
    _need_target(args)
    return asyncio.run(_bench(args, args.base_url, read_key(args.api_key_file), args.model,
                              other))


def cmd_raw_vllm(args: argparse.Namespace) -> int:
    import signal
    import threading

    from appliance.toolbench.raw_vllm import spawned

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with spawned("raw-vllm", args.policy) as (base_url, api_key, model):
        print(f"base_url={base_url}", flush=True)
        print(f"api_key={api_key}", flush=True)
        print(f"model={model}", flush=True)
        try:
            stop.wait()
        except KeyboardInterrupt:
            pass
    return 0


def register(sub: Any) -> None:
    """Add ``bench tools`` and ``bench raw-vllm`` to the ``appliance`` subparsers.

    ``--policy`` defaults to the shipped ``cpu-demo.toml`` (``appliance.resources``: the
    wheel's ``appliance/data/``, else a checkout's ``policies/``)."""
    demo_policy = policy_path("cpu-demo.toml")
    bench = sub.add_parser("bench", help="benchmarks against OpenAI endpoints")
    group = bench.add_subparsers(dest="bench_command", required=True)
    p = group.add_parser("tools", help="tool-call reliability benchmark (JSON, Markdown, PNG)")
    p.add_argument("--base-url", default=None, help="OpenAI API root, e.g. http://host:8000/v1")
    p.add_argument("--api-key-file", type=Path, default=None, help="file with the API key")
    p.add_argument("--model", default=None, help="model name (default: first in GET /models)")
    p.add_argument("--concurrency", default="1,8,32", help="comma list of levels (1,8,32)")
    p.add_argument("--suite", default="standard",
                   help="built-in suite (smoke, standard, accuracy, accuracy-mini) or a JSON "
                        "suite file")
    p.add_argument("--repeat", type=int, default=3,
                   help="rounds per level (3); a round runs the suite ceil(concurrency / cases) "
                        "times, so that the level's concurrency is reached")
    p.add_argument("--baseline", type=Path, default=None,
                   help="earlier report.json; exit 1 on a regression beyond the 95 %% interval")
    p.add_argument("--output", type=Path, default=Path("bench-tools-report"),
                   help="directory for report.json, report.md and the PNGs")
    p.add_argument("--temperature", type=float, default=0.7, help="sampling temperature (0.7)")
    p.add_argument("--timeout", type=float, default=120.0, help="per-request timeout, s (120)")
    p.add_argument("--label", default=None,
                   help="name of the target in the report and plots (default: the URL)")
    p.add_argument("--no-plain", action="store_true",
                   help="skip the unconstrained twin (no constraint tax)")
    p.add_argument("--no-warmup", action="store_true",
                   help="skip compiling each case's grammar before the first level (then the "
                        "first constrained phase also pays the cold compiles)")
    p.add_argument("--no-plots", action="store_true", help="write no PNGs")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--spawn", choices=SPAWN_KINDS, default=None,
                   help="start the target on the built-in model here (loopback) and stop it "
                        "after; instead of --base-url/--api-key-file (raw-vllm-unconstrained: "
                        "the raw engine sent tool_choice auto and no response_format)")
    p.add_argument("--unconstrained", action="store_true",
                   help="send every tool case with tool_choice auto and no response_format")
    p.add_argument("--compare", default=None, metavar="TARGET",
                   help="a second target in the same run, paired case by case: "
                        f"{', '.join(SPAWN_KINDS)} (started here) or an API root URL")
    p.add_argument("--compare-api-key-file", type=Path, default=None,
                   help="API key file of a --compare URL")
    p.add_argument("--compare-model", default=None, help="model name on the --compare target")
    p.add_argument("--compare-label", default=None, help="name of the --compare target")
    p.add_argument("--compare-unconstrained", action="store_true",
                   help="the --compare target gets tool_choice auto and no response_format")
    p.add_argument("--policy", type=Path, default=demo_policy,
                   help="policy for --spawn (default: the shipped cpu-demo.toml)")
    p.set_defaults(func=cmd_tools, parser=p)
    p = group.add_parser("raw-vllm", help="serve the built-in model on raw vLLM (no guarantees)")
    p.add_argument("--policy", type=Path, default=demo_policy,
                   help="engine settings (default: the shipped cpu-demo.toml)")
    p.set_defaults(func=cmd_raw_vllm, parser=p)
