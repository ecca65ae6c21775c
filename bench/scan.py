"""Scanner benchmark: ours vs picklescan and modelaudit, side by side in one run.

Workloads (each tool runs as its own process; wall time and peak RSS from ``os.wait4``):

1. the whole shared corpus folder in one invocation (copied, recipe cases excluded);
2. one 2 GiB safetensors file (header-only for us);
3. one 2 GiB plain torch checkpoint (``torch.save`` zip of tensors).

Also measures, in-process, our header-only time on the 2 GiB safetensors file, and our peak
RSS on a 64 MiB vs 2 GiB file (memory must be flat in file size).

Usage: ``.venv/bin/python bench/scan.py [--modelaudit PATH] [--rounds 3] [--keep DIR]``.
Targets (issue #3): corpus wall <= 0.5x picklescan; 2 GiB safetensors header-only <= 0.1 s;
peak memory flat in file size. Prints ratios; exits 0 (a benchmark reports, it does not gate).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus" / "files"
GiB = 1 << 30


def run_measured(argv: list[str], env: dict[str, str] | None = None,
                 timeout_s: float = 120.0) -> tuple[float, int, int]:
    """Run ``argv``; return (wall seconds, peak RSS KiB, exit status). A run still going
    after ``timeout_s`` is killed and reported with status -9 and wall = timeout."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, env=env or os.environ.copy(),
                            start_new_session=True)
    timer = threading.Timer(timeout_s, lambda: os.killpg(proc.pid, signal.SIGKILL))
    timer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss, proc.returncode


def write_safetensors(path: Path, nbytes: int) -> None:
    """A valid F32 safetensors file of ``nbytes`` data, written for real (not sparse)."""
    count = nbytes // 4
    header = json.dumps({"w": {"dtype": "F32", "shape": [count],
                               "data_offsets": [0, count * 4]}}).encode()
    header += b" " * (-len(header) % 8)
    chunk = b"\x00" * (64 << 20)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(header)) + header)
        left = count * 4
        while left:
            fh.write(chunk[: min(left, len(chunk))])
            left -= min(left, len(chunk))


def write_torch_checkpoint(path: Path, nbytes: int) -> None:
    code = ("import sys, torch\n"
            "n = int(sys.argv[2]) // 4 // 8\n"
            "torch.save({f'layer{i}.weight': torch.zeros(n) for i in range(8)}, sys.argv[1])\n")
    subprocess.run([sys.executable, "-c", code, str(path), str(nbytes)], check=True)


def tools(modelaudit: str | None) -> dict[str, list[str]]:
    bindir = Path(sys.executable).parent
    out = {"ours": [sys.executable, "-m", "scanner", "--format", "json", "--quiet"],
           "picklescan": [str(bindir / "picklescan"), "-p"]}
    audit = modelaudit or shutil.which("modelaudit") or str(bindir / "modelaudit")
    if Path(audit).exists():
        out["modelaudit"] = [audit, "scan", "--no-cache", "--format", "json", "-q"]
    return out


def header_only_seconds(path: Path, rounds: int) -> float:
    code = ("import sys, time\nfrom scanner.api import scan_paths\n"
            "t = time.perf_counter(); r = scan_paths([sys.argv[1]])\n"
            "print(time.perf_counter() - t, r.targets[0].verdict.label)\n")
    times = []
    for _ in range(rounds):
        out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                             text=True, check=True, cwd=REPO).stdout.split()
        times.append(float(out[0]))
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--modelaudit", default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="work folder to reuse")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per tool run")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="scan-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "corpus"
    if not corpus.exists():
        shutil.copytree(CORPUS, corpus, symlinks=True)
    st_big, st_small, pt_big = work / "big.safetensors", work / "small.safetensors", work / "big.pt"
    if not st_big.exists():
        write_safetensors(st_big, 2 * GiB)
    if not st_small.exists():
        write_safetensors(st_small, 64 << 20)
    if not pt_big.exists():
        write_torch_checkpoint(pt_big, 2 * GiB)

    runners = tools(args.modelaudit)
    workloads = {"corpus folder": corpus, "2 GiB safetensors": st_big,
                 "2 GiB torch checkpoint": pt_big, "64 MiB safetensors": st_small}
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    results: dict[tuple[str, str], list[tuple[float, int, int]]] = {}
    for _ in range(args.rounds):  # alternate tools within each round so drift hits all alike
        for label, target in workloads.items():
            for name, argv in runners.items():
                if any(r[2] == -9 for r in results.get((label, name), [])):
                    continue  # timed out once: do not burn another timeout
                wall, rss, code = run_measured(argv + [str(target)], env, args.timeout)
                results.setdefault((label, name), []).append((wall, rss, code))

    print(f"{'workload':24} {'tool':11} {'wall s (median)':>16} {'peak RSS MiB':>13} exit")
    summary: dict[tuple[str, str], tuple[float, float]] = {}
    for (label, name), rows in results.items():
        wall = statistics.median(r[0] for r in rows)
        rss = max(r[1] for r in rows) / 1024
        summary[(label, name)] = (wall, rss)
        codes = sorted({r[2] for r in rows})
        note = " (killed: timeout)" if -9 in codes else ""
        print(f"{label:24} {name:11} {wall:16.3f} {rss:13.1f} {codes}{note}")
    print()
    for label in workloads:
        ours = summary[(label, "ours")]
        for peer in runners:
            if peer == "ours":
                continue
            other = summary[(label, peer)]
            print(f"{label:24} ours/{peer:10} wall {ours[0] / other[0]:5.2f}x   "
                  f"peak RSS {ours[1] / other[1]:5.2f}x")
    header = header_only_seconds(st_big, args.rounds)
    flat = summary[("2 GiB safetensors", "ours")][1] / summary[("64 MiB safetensors", "ours")][1]
    print(f"\n2 GiB safetensors, header-only scan in-process: {header:.4f} s "
          f"({header / 0.1:.2f}x of the 0.1 s limit)")
    print(f"our peak RSS, 2 GiB vs 64 MiB safetensors: {flat:.2f}x (flat = 1.0)")
    print(f"work folder: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
