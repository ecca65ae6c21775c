"""``appliance convert`` speed and memory (issue 25): a generated torch zip checkpoint is
converted to safetensors and compared with copying the same file in the same run.

Workload (generated in a child process with ``torch.save``, deleted again): ``--size-mib``
MiB (default 2048) of float32 tensors of ``--tensor-mib`` MiB each (default 128), one of
them stored transposed (a non-contiguous view: the strided path), plus small tensors.
Source pages are warm in the page cache for both measures (each is run once before it is
timed); each measure is run ``--rounds`` times and the fastest kept:

* ``copy``    — read the file and write a new one in 16 MiB chunks, then fsync: the disk's
  copy rate for this file;
* ``convert`` — ``appliance.convert.convert`` in a child process (interpreter start not
  timed; the time of the call: scanner gate, pickle, per-tensor SHA-256, source SHA-256,
  writes, fsync, the output scan, rename). Its peak RSS (``wait4``) is the child's maximum
  resident set, interpreter and imports included.

Also printed: the CPU seconds of each (the copy: this process; convert: the child) and the
load average, since the converter does two SHA-256 passes the copy does not (the source
files for the record, each tensor's output bytes), about 1 CPU second per GiB each with
SHA-NI: on a loaded machine convert is CPU-bound where the copy is not.

Targets: convert >= 0.8x the copy rate; peak RSS < 2x the largest tensor.
Usage: ``.venv/bin/python bench/convert.py [--dir DIR] [--size-mib 2048] [--rounds 2]``.
Prints MB/s (1e6 bytes/s), the ratio and the RSS; exits 0 (it reports, not gates).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
from appliance.convert import convert
t0 = time.monotonic()
r = convert(sys.argv[1], sys.argv[2])
print(json.dumps({"seconds": time.monotonic() - t0, "bytes": r.nbytes, "tensors": r.tensors,
                  "shards": r.shards}))
"""


def _run_child(code: str, *args: str) -> tuple[str, int, float]:
    """Run ``python -c code args``; (stdout, peak RSS bytes, CPU seconds of that child)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                            env=env, text=True)
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", type=Path, default=None, help="work folder (default: a temp dir)")
    ap.add_argument("--size-mib", type=int, default=2048)
    ap.add_argument("--tensor-mib", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="convert-bench-", dir=args.dir))
    try:
        src = work / "pytorch_model.bin"
        _run_child(_MAKE, str(args.size_mib), str(args.tensor_mib), str(src))
        size = src.stat().st_size
        copies, converts, rss = [], [], 0
        cpu_copy, cpu_conv = [], []
        info: dict[str, object] = {}
        for round_ in range(args.rounds + 1):  # round 0 warms the cache and the imports
            dst = work / "copy.bin"
            seconds, cpu = _copy(src, dst)
            dst.unlink()
            out = work / "out"
            text, peak, cpu_child = _run_child(_CONVERT, str(src), str(out))
            info = json.loads(text)
            shutil.rmtree(out)
            if round_:
                copies.append(seconds)
                converts.append(float(info["seconds"]))  # type: ignore[arg-type]
                rss = max(rss, peak)
                cpu_copy.append(cpu)
                cpu_conv.append(cpu_child)
        largest = args.tensor_mib << 20
        copy_rate = size / min(copies) / 1e6
        conv_rate = size / min(converts) / 1e6
        print(f"checkpoint {size / 2**20:,.0f} MiB, {info['tensors']} tensors, largest "
              f"{args.tensor_mib} MiB; output {info['shards']}")
        print(f"copy     {min(copies):7.2f} s  {copy_rate:8.0f} MB/s   (rounds: "
              f"{', '.join(f'{s:.2f}' for s in copies)})")
        print(f"convert  {min(converts):7.2f} s  {conv_rate:8.0f} MB/s   (rounds: "
              f"{', '.join(f'{s:.2f}' for s in converts)})")
        print(f"CPU seconds: copy {min(cpu_copy):.2f}, convert {min(cpu_conv):.2f} (child, "
              f"imports included); load average {os.getloadavg()[0]:.1f} on "
              f"{len(os.sched_getaffinity(0))} CPUs")
        ratio = conv_rate / copy_rate
        print(f"ratio convert/copy {ratio:.2f}x (target >= 0.8x): "
              f"{'met' if ratio >= 0.8 else 'NOT met'}")
        print(f"peak RSS {rss / 2**20:,.0f} MiB = {rss / largest:.2f}x the largest tensor "
              f"(target < 2x): {'met' if rss < 2 * largest else 'NOT met'}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
