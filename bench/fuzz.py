"""Fuzzing campaign for the scanner (issue 30): generated and mutated pickles, safetensors
headers, zip and tar archives and YAML configs, each scanned as a user scans a file
(``scanner.api.scan_target`` on a file named as loaders expect), judged by three oracles
(``bench/fuzzkit/oracle.py``):

- crash: the scan raised, gave no verdict or reported ``scanner.internal_error``;
- hang: it ran past the per-file limit (``--limit`` seconds, the scanner's own
  ``seconds_per_target``), or the scanner's deadline fired on a small input;
- missed: it said ``clean`` where an independent reference (``pickletools.genops``,
  ``zipfile``, ``tarfile``, PyYAML's safe parser; nothing executed) finds code a loader
  would still run (``known_gap``: the same, in the one gap this tree is known to have,
  a text-looking pickle in a file ``torch.load`` reads by name; see the oracle).

Case ``i`` of a run is generated from ``random.Random(f"{seed}:{format}:{i}")``, so any
case can be regenerated (``--start i --cases 1``). Failing inputs are saved under
``--save`` (default ``bench/results/fuzz/failures/``) as ``<format>/<kind>-<i>-<name>``
with an ``index.jsonl`` line each (format, case, seed label, kind, detail).

Run (one format at a time on a shared machine)::

    nice -n 10 .venv/bin/python bench/fuzz.py --format pickle --cases 100000
    .venv/bin/python bench/fuzz.py --format all --cases 2000          # quick look
    .venv/bin/python bench/fuzz.py --replay saved-file --name model.pkl

Nothing from a case is ever unpickled, imported or executed.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzzkit.draw import RandomDraw  # noqa: E402 - after the path insert above
from fuzzkit.oracle import Case, run_case  # noqa: E402
from fuzzkit.registry import FORMATS  # noqa: E402

from scanner.core.context import Limits  # noqa: E402

DEFAULT_SAVE = Path(__file__).resolve().parent / "results" / "fuzz" / "failures"


def campaign(fmt: str, cases: int, seed: str, start: int, limit: float, save: Path,
             workdir: str, quiet: bool) -> dict[str, Any]:
    """Run ``cases`` cases of one format; returns the summary printed and saved."""
    fuzzer = FORMATS[fmt]
    limits = Limits(seconds_per_target=limit)
    kinds: collections.Counter[str] = collections.Counter()
    verdicts: collections.Counter[str] = collections.Counter()
    seeds: collections.Counter[str] = collections.Counter()
    slowest = 0.0
    began = time.monotonic()
    last = began
    cpu0 = time.process_time()
    for i in range(start, start + cases):
        case = fuzzer.generate(RandomDraw(f"{seed}:{fmt}:{i}"))
        outcome = run_case(case, workdir, limits, judge=fuzzer.judged is None)
        kinds[outcome.kind] += 1
        verdicts[str(outcome.verdict)] += 1
        seeds[case.seed.split(":", 1)[0]] += 1
        slowest = max(slowest, outcome.seconds)
        if outcome.kind != "ok":
            where = save / fmt
            where.mkdir(parents=True, exist_ok=True)
            path = where / f"{outcome.kind}-{i}-{case.name}"
            path.write_bytes(case.data)
            with open(where / "index.jsonl", "a") as index:
                index.write(json.dumps({"format": fmt, "case": i, "seed": seed,
                                        "label": case.seed, "name": case.name,
                                        "kind": outcome.kind, "detail": outcome.detail,
                                        "verdict": outcome.verdict, "file": path.name}) + "\n")
            print(f"{fmt} case {i} ({case.seed}, {case.name}): {outcome.kind}: "
                  f"{outcome.detail}", flush=True)
        now = time.monotonic()
        if not quiet and now - last > 30:
            done = i - start + 1
            print(f"  {fmt}: {done}/{cases} cases, {done / (now - began):.0f}/s, "
                  f"{dict(kinds)}", flush=True)
            last = now
    wall = time.monotonic() - began
    return {"format": fmt, "cases": cases, "start": start, "seed": seed,
            "per_file_limit_s": limit, "wall_s": round(wall, 1),
            "cpu_s": round(time.process_time() - cpu0, 1),
            "cases_per_s": round(cases / wall, 1) if wall else None,
            "crash": kinds["crash"], "hang": kinds["hang"], "missed": kinds["missed"],
            "known_gap": kinds["known"],
            "ok": kinds["ok"], "slowest_case_s": round(slowest, 3),
            "verdicts": dict(verdicts), "sources": dict(seeds),
            "missed_judged": fuzzer.judged is None, "not_judged_because": fuzzer.judged,
            "load_before": os.getloadavg()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--format", default="all",
                        help=f"one of {', '.join(FORMATS)}, or all (default)")
    parser.add_argument("--cases", type=int, default=10_000, help="cases per format")
    parser.add_argument("--start", type=int, default=0, help="first case number")
    parser.add_argument("--seed", default="fuzz30", help="run seed (default fuzz30)")
    parser.add_argument("--limit", type=float, default=10.0,
                        help="per-file limit in seconds (Limits.seconds_per_target)")
    parser.add_argument("--save", type=Path, default=DEFAULT_SAVE,
                        help="where failing inputs are saved")
    parser.add_argument("--json", type=Path, help="append each format's summary here")
    parser.add_argument("--replay", type=Path, help="scan one saved input and classify it")
    parser.add_argument("--name", help="file name for --replay (the loader is picked by it)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm")
                               else None)
    try:
        if args.replay is not None:
            case = Case(args.name or args.replay.name, args.replay.read_bytes(), "replay")
            outcome = run_case(case, workdir, Limits(seconds_per_target=args.limit))
            print(json.dumps(outcome.__dict__))
            return 0 if outcome.kind == "ok" else 1
        names = list(FORMATS) if args.format == "all" else args.format.split(",")
        failed = 0
        for fmt in names:
            summary = campaign(fmt, args.cases, args.seed, args.start, args.limit, args.save,
                               workdir, args.quiet)
            print(json.dumps(summary), flush=True)
            if args.json is not None:
                with open(args.json, "a") as out:
                    out.write(json.dumps(summary) + "\n")
            failed += int(summary["crash"]) + int(summary["hang"]) + int(summary["missed"])
        return 1 if failed else 0
    finally:
        for leftover in os.listdir(workdir):
            os.unlink(os.path.join(workdir, leftover))
        os.rmdir(workdir)


if __name__ == "__main__":
    sys.exit(main())
