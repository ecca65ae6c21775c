"""``appliance convert`` speed and memory (issue 25): a generated torch zip checkpoint is
converted to safetensors and compared with copying the same file in the same run.

Workload (generated in a child process with ``torch.save``, deleted again): ``--size-mib``
MiB (default 2048) of float32 tensors of ``--tensor-mib`` MiB each (default 128), one of
them stored transposed (a non-contiguous view: the strided path), plus small tensors.
Source pages are warm in the page cache for all three measures (round 0 runs each once,
untimed); then each round runs, in turn:

* ``copy`` — read the file into a 16 MiB buffer and write it to a new file on the same
  filesystem, then fsync;
* ``cp``   — the same copy done by the kernel with ``copy_file_range`` (what coreutils
  ``cp`` 9.x does), then fsync. On ext4 (no reflinks) the kernel still copies every byte
  through the page cache; on a filesystem with reflinks it would share extents instead,
  which the printout names (``st_blocks`` of the copy not allocated) so the figure can be
  discounted there;
* ``convert`` — ``appliance.convert.convert`` in a child process (interpreter start not
  timed; the time of the call: scanner gate, pickle, source SHA-256, in-kernel copy or
  read/write of each tensor, per-tensor SHA-256, fsync, the output scan, rename). Its
  peak RSS (``wait4``) is the child's maximum resident set, interpreter and imports
  included.

The disk's copy rate of a round is the faster of ``copy`` and ``cp`` in that round; the
ratio of a round is convert's rate over it. Printed: each round, min / median / max of
the ratios, the CPU seconds of each measure (the copies: this process; convert: the call,
all its threads, from ``time.process_time`` in the child), the load average before and
after, and the peak RSS against the largest tensor.

Targets: convert >= 0.8x the copy rate; peak RSS < 2x the largest tensor.
``--baseline DIR`` also runs the converter of another source tree in every round (after
this tree's), e.g. a ``git worktree`` of the commit before a change.

Usage: ``python bench/convert.py [--dir DIR] [--size-mib 2048] [--rounds 3] [--dtype bf16]
[--baseline DIR]``.
Prints MB/s (1e6 bytes/s); exits 0 (it reports, not gates).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 16 << 20

_MAKE = """
import sys, torch
size_mib, tensor_mib, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
n = tensor_mib * (1 << 20) // 4
side = int(n ** 0.5)
count = max(1, size_mib // tensor_mib)
state = {}
g = torch.Generator().manual_seed(0)
for i in range(count):
    t = torch.randn(side, n // side, generator=g)
    state[f"layers.{i}.weight"] = t.t() if i == 1 else t
state["norm.weight"] = torch.ones(4096)
state["step"] = torch.tensor(3)
torch.save(state, path)
"""

_CONVERT = """
import json, sys, time
import appliance.convert
from appliance.convert import convert
t0, c0 = time.monotonic(), time.process_time()
r = convert(sys.argv[1], sys.argv[2], dtype=sys.argv[3])
print(json.dumps({"seconds": time.monotonic() - t0, "cpu": time.process_time() - c0,
                  "bytes": r.nbytes, "tensors": r.tensors, "shards": r.shards,
                  "module": appliance.convert.__file__}))
"""


def _run_child(code: str, *args: str, tree: Path = ROOT) -> tuple[str, int, float]:
    """Run ``python -c code args`` with ``tree`` first on the import path; (stdout, peak
    RSS bytes, CPU seconds of that child)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # cwd: ``python -c`` puts the working folder first on the path, before PYTHONPATH.
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                            env=env, text=True, cwd=tree)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"child failed ({proc.returncode})")
    return out, usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime


def _copy(src: Path, dst: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of a chunked copy with fsync."""
    t0, c0 = time.monotonic(), time.process_time()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    fin = os.open(src, os.O_RDONLY)
    fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        pos = 0
        while True:
            n = os.preadv(fin, [view], pos)
            if n <= 0:
                break
            done = 0
            while done < n:
                done += os.write(fout, view[done:n])
            pos += n
        os.fsync(fout)
    finally:
        os.close(fin)
        os.close(fout)
    return time.monotonic() - t0, time.process_time() - c0


def _cp(src: Path, dst: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of an in-kernel copy (``copy_file_range``) with fsync."""
    t0, c0 = time.monotonic(), time.process_time()
    fin = os.open(src, os.O_RDONLY)
    fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        size, pos = os.fstat(fin).st_size, 0
        while pos < size:
            n = os.copy_file_range(fin, fout, size - pos)
            if n <= 0:
                break
            pos += n
        os.fsync(fout)
    finally:
        os.close(fin)
        os.close(fout)
    return time.monotonic() - t0, time.process_time() - c0


def _shared(path: Path) -> bool:
    """Whether ``path`` has fewer blocks allocated than its size needs (extents shared
    by a reflink copy, or holes)."""
    st = path.stat()
    return st.st_blocks * 512 < st.st_size - (1 << 20)


def _load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def _stats(values: list[float]) -> str:
    return (f"min {min(values):.2f} / median {statistics.median(values):.2f} / "
            f"max {max(values):.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", type=Path, default=None, help="work folder (default: a temp dir)")
    ap.add_argument("--size-mib", type=int, default=2048)
    ap.add_argument("--tensor-mib", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtype", default="keep", help="convert's --dtype (default keep)")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="another source tree (e.g. a git worktree of an older commit) whose "
                         "converter also runs in every round, after this tree's")
    args = ap.parse_args()
    if args.dir is not None and not Path(args.dir).is_dir():
        ap.error(f"--dir {args.dir}: not an existing folder (create it first)")
    work = Path(tempfile.mkdtemp(prefix="convert-bench-", dir=args.dir)).resolve()
    if args.baseline is not None:
        args.baseline = args.baseline.resolve()
    try:
        src = work / "pytorch_model.bin"
        _run_child(_MAKE, str(args.size_mib), str(args.tensor_mib), str(src))
        size = src.stat().st_size
        rows: list[dict[str, float]] = []
        rss, shared = 0, False
        info: dict[str, object] = {}
        print(f"load average at start {_load()} on {len(os.sched_getaffinity(0))} CPUs",
              flush=True)
        for round_ in range(args.rounds + 1):  # round 0 warms the cache and the imports
            row: dict[str, float] = {"load": os.getloadavg()[0]}
            for name, fn in (("copy", _copy), ("cp", _cp)):
                dst = work / f"{name}.bin"
                row[name], row[f"{name}_cpu"] = fn(src, dst)
                shared = shared or (name == "cp" and _shared(dst))
                dst.unlink()
            out = work / "out"
            for name, tree in (("convert", ROOT), ("baseline", args.baseline)):
                if tree is None:
                    continue
                text, peak, _ = _run_child(_CONVERT, str(src), str(out), args.dtype, tree=tree)
                info = json.loads(text)
                if info["module"] != str(tree / "appliance" / "convert" / "__init__.py"):
                    raise SystemExit(f"{name} imported {info['module']}, not from {tree}")
                shutil.rmtree(out)
                row[name] = float(info["seconds"])  # type: ignore[arg-type]
                row[f"{name}_cpu"] = float(info["cpu"])  # type: ignore[arg-type]
                if round_ and name == "convert":
                    rss = max(rss, peak)
                elif round_:
                    row["baseline_rss"] = peak
            row["ratio"] = min(row["copy"], row["cp"]) / row["convert"]
            if not round_:
                continue
            rows.append(row)
            print(f"round {round_}: load {row['load']:.2f}  copy {row['copy']:.2f} s "
                  f"({row['copy_cpu']:.2f} CPU s)  cp {row['cp']:.2f} s ({row['cp_cpu']:.2f})  "
                  f"convert {row['convert']:.2f} s ({row['convert_cpu']:.2f})  "
                  f"ratio {row['ratio']:.2f}x" + (
                      f"  baseline {row['baseline']:.2f} s ({row['baseline_cpu']:.2f}) "
                      f"ratio {min(row['copy'], row['cp']) / row['baseline']:.2f}x"
                      if args.baseline else ""), flush=True)
        largest = args.tensor_mib << 20
        gib = size / 2**30
        print(f"checkpoint {size / 2**20:,.0f} MiB, {info['tensors']} tensors, largest "
              f"{args.tensor_mib} MiB, --dtype {args.dtype}; output {info['shards']}, "
              f"{int(info['bytes']) / 2**20:,.0f} MiB")  # type: ignore[call-overload]
        for name in ("copy", "cp", "convert", *(["baseline"] if args.baseline else [])):
            best = min(r[name] for r in rows)
            print(f"{name:8s} best {best:6.2f} s {size / best / 1e6:7.0f} MB/s   "
                  f"CPU s per GiB {_stats([r[f'{name}_cpu'] / gib for r in rows])}")
        if shared:
            print("note: the cp copy shares extents (reflink): it did not copy the bytes")
        print(f"ratio convert / faster copy, per round: {_stats([r['ratio'] for r in rows])} "
              f"(target >= 0.8x); vs copy only: "
              f"{_stats([r['copy'] / r['convert'] for r in rows])}")
        if args.baseline:
            print(f"baseline ratio per round: "
                  f"{_stats([min(r['copy'], r['cp']) / r['baseline'] for r in rows])}; "
                  f"peak RSS {max(r['baseline_rss'] for r in rows) / 2**20:,.0f} MiB")
        print(f"load average at end {_load()}")
        print(f"peak RSS {rss / 2**20:,.0f} MiB = {rss / largest:.2f}x the largest tensor "
              f"(target < 2x): {'met' if rss < 2 * largest else 'NOT met'}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
