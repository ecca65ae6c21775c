"""Model store benchmark: import, serve-start check, today's copy-and-hash, model_signing's
verify and the hashlib SHA-256 limit, side by side in one run (issue 8).

Workloads, generated and deleted again: 8 GiB in 4 files and 2 GiB in 1 file (plus a small
``config.json``), signed with a fresh P-256 key. Per workload, each measure is run
``--rounds`` times after one warm-up pass and the minimum wall time is kept:

* ``copy+hash``  — ``signing.verify_and_stage`` into a temporary folder: what every
  ``appliance serve`` did before the store (copy while hashing, then delete);
* ``import``     — ``store.import_model`` (verify while copying, fsync, shard record);
* ``serve check``— ``store.open_for_serve`` (fs-verity where available, else the parallel
  shard re-hash): the per-start cost now, with no copy and no extra disk. Measured twice:
  *warm* (the store's files read into the page cache before each round, as after an engine
  restart: the check is then CPU-bound, the case the hashlib limit describes) and *cold*
  (their clean pages dropped with ``posix_fadvise(DONTNEED)`` before each round: the bytes
  come from the disk). The page-cache residency of the store files before each measure is
  printed (util-linux ``fincore``; "?" when absent);
* ``read limit`` — the cold files read with no hashing (one thread per core, 16 MiB
  ``preadv``): the disk's limit, which bounds a cold check; the cold check's ratio is taken
  against ``min(limit, read limit)``;
* ``model_signing`` — ``model_signing`` 1.1.1 API verify (files/sha256, its defaults) in a
  separate Python given by ``--model-signing-python`` / ``$APPLIANCE_MODEL_SIGNING_PYTHON``
  (skipped when absent); the time of the verify call only, not the interpreter start;
* ``limit``      — hashlib SHA-256 of an in-memory 1 MiB buffer on one core for ~2 s, times
  the usable cores (``os.sched_getaffinity``); also the measured aggregate of one thread
  per core hashing at once.

Usage: ``.venv/bin/python bench/verify.py [--dir DIR] [--rounds 2] [--cases 8g4,2g1]``.
Targets: serve check (warm) >= 0.9x the limit without fs-verity (<= 0.1x copy+hash with it); no
extra disk per start. Prints GB/s (1e9 bytes/s) and ratios; exits 0 (it reports, not gates).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from appliance import signing, store  # noqa: E402
from appliance.signing import TrustedKey, TrustStore  # noqa: E402

GiB = 1 << 30
MiB = 1 << 20
CASES = {"8g4": (8 * GiB, 4), "2g1": (2 * GiB, 1), "smoke": (256 * MiB, 2)}

MS_VERIFY = """
import sys, time, model_signing
model, sig, key = sys.argv[1:4]
cfg = model_signing.verifying.Config().use_elliptic_key_verifier(public_key=key)
cfg.set_hashing_config(model_signing.hashing.Config().set_ignored_paths(paths=["model.sig"]))
t0 = time.perf_counter()
cfg.verify(model, sig)
print(time.perf_counter() - t0)
"""


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def sha256_one_core(seconds: float = 2.0) -> float:
    """Bytes/s of hashlib.sha256 over a 1 MiB in-memory buffer on one thread."""
    buf = os.urandom(MiB)
    hasher = hashlib.sha256()
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(64):
            hasher.update(buf)
        done += 64 * MiB
    return done / (time.perf_counter() - start)


def sha256_all_cores(seconds: float = 2.0) -> float:
    """Aggregate bytes/s of one hashing thread per usable core, running at once."""
    totals: list[float] = []
    barrier = threading.Barrier(cores())

    def run() -> None:
        barrier.wait()
        totals.append(sha256_one_core(seconds))

    threads = [threading.Thread(target=run) for _ in range(cores())]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(totals)


def generate(folder: Path, total: int, files: int) -> None:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "bench"}\n')
    block = bytearray(os.urandom(64 * MiB))
    per_file = total // files
    for index in range(files):
        name = f"model-{index + 1:05d}-of-{files:05d}.safetensors"
        with open(folder / name, "wb") as handle:
            for offset in range(0, per_file, len(block)):
                block[:16] = f"{index:08d}{offset // len(block):08d}".encode()
                handle.write(block[: min(len(block), per_file - offset)])


CPU: dict[str, float] = {}


def store_files(st: store.Store) -> list[Path]:
    """The data files of every stored version (plain files under ``<store>/<name>/``)."""
    return sorted(p for p in st.root.rglob("*") if p.is_file() and not p.is_symlink()
                  and p.stat().st_size >= MiB)


def residency(paths: list[Path]) -> float | None:
    """Fraction of the bytes of ``paths`` in the page cache (``fincore``), None if unknown."""
    tool = shutil.which("fincore")
    if tool is None or not paths:
        return None
    out = subprocess.run([tool, "--bytes", "--noheadings", "--raw", "-o", "RES,SIZE",
                          *map(str, paths)], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        return None
    pairs = [tuple(map(int, line.split())) for line in out.stdout.splitlines() if line.strip()]
    size = sum(total for _res, total in pairs)
    return sum(res for res, _total in pairs) / size if size else None


def drop_cache(paths: list[Path]) -> None:
    """Drop the clean page-cache pages of ``paths`` (no root needed; store files are
    fsynced at import, so every page is clean)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def read_all(paths: list[Path]) -> float:
    """Read every byte of ``paths`` with one thread per core (16 MiB ``preadv``, files split
    into 64 MiB slices); returns the wall seconds."""
    tasks = [(path, start, min(64 * MiB, path.stat().st_size - start))
             for path in paths for start in range(0, path.stat().st_size, 64 * MiB)]
    lock = threading.Lock()
    pending = iter(tasks)

    def run() -> None:
        view = memoryview(bytearray(16 * MiB))
        while True:
            with lock:
                task = next(pending, None)
            if task is None:
                return
            path, start, length = task
            fd = os.open(path, os.O_RDONLY)
            try:
                done = 0
                while done < length:
                    got = os.preadv(fd, [view[:min(16 * MiB, length - done)]], start + done)
                    if got <= 0:
                        break
                    done += got
            finally:
                os.close(fd)

    started = time.perf_counter()
    threads = [threading.Thread(target=run) for _ in range(cores())]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def cpu_seconds() -> float:
    """User+system CPU seconds of this process and its waited-for children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def best(rounds: int, run: Callable[[], float | tuple[float, float] | None],
         key: str = "") -> float | None:
    """One warm-up call, then the minimum of ``rounds`` calls (each returns seconds, or
    (seconds, CPU seconds) when it measures its own CPU). The CPU seconds of the fastest
    round are kept in ``CPU[key]``."""
    run()
    times: list[tuple[float, float]] = []
    for _ in range(rounds):
        c0 = cpu_seconds()
        result = run()
        if isinstance(result, tuple):
            times.append(result)
        elif result is not None:
            times.append((result, cpu_seconds() - c0))
    if not times:
        return None
    wall, cpu = min(times)
    CPU[key] = cpu
    return wall


def timed(func: Callable[[], object], after: Callable[[], object] | None = None,
          ) -> Callable[[], tuple[float, float]]:
    """Time ``func`` (wall and CPU seconds), then run ``after`` outside the measure."""
    def run() -> tuple[float, float]:
        c0 = cpu_seconds()
        start = time.perf_counter()
        func()
        elapsed = time.perf_counter() - start
        cpu = cpu_seconds() - c0
        if after is not None:
            after()
        return elapsed, cpu
    return run


def bench_case(work: Path, label: str, total: int, files: int, rounds: int,
               ms_python: str | None) -> dict[str, object]:
    src = work / f"src-{label}" / "model"
    generate(src, total, files)
    keys = work / f"keys-{label}"
    keys.mkdir()
    signing.keygen(keys / "k.pem", keys / "k.pub")
    t0 = time.perf_counter()
    signing.sign(src, keys / "k.pem")
    sign_s = time.perf_counter() - t0
    trust = TrustStore((TrustedKey("bench", keys / "k.pub", "P-256"),))
    size = sum(p.stat().st_size for p in src.iterdir() if p.name != "model.sig")
    stage = work / f"stage-{label}"
    copy_s = best(rounds, timed(lambda: signing.verify_and_stage(src, trust, stage),
                                lambda: signing.discard_stage(stage)), "copy_hash_s")
    st = store.Store(work / f"store-{label}")

    def drop() -> None:
        for digest in st.versions("bench"):
            state = st.read_state("bench")
            if state["current"] == digest:
                store.remove(st, store.Ref("bench"))
                return
            store.remove(st, store.Ref("bench", digest))

    import_s = best(rounds, timed(lambda: store.import_model(st, src, trust, name="bench"),
                                  drop), "import_s")
    store.import_model(st, src, trust, name="bench")
    files_in_store = store_files(st)
    one_core = sha256_one_core(1.5)  # the limit in the same minute as the check
    aggregate = sha256_all_cores(1.5)
    served: list[store.CheckedVersion] = []

    def check() -> None:
        served.append(store.open_for_serve(st, store.Ref("bench"), trust))

    read_all(files_in_store)
    warm_residency = residency(files_in_store)
    check_s = best(rounds, timed(check, lambda: read_all(files_in_store)), "serve_check_s")
    drop_cache(files_in_store)
    cold_residency = residency(files_in_store)
    cold_s = best(rounds, timed(check, lambda: drop_cache(files_in_store)), "serve_cold_s")
    read_s = best(rounds, timed(lambda: read_all(files_in_store),
                                lambda: drop_cache(files_in_store)), "read_cold_s")
    ms_s = None
    if ms_python:
        def ms() -> float | None:
            out = subprocess.run([ms_python, "-c", MS_VERIFY, str(src), str(src / "model.sig"),
                                  str(keys / "k.pub")], capture_output=True, text=True,
                                 timeout=900)
            if out.returncode != 0:
                print(f"model_signing verify failed: {out.stderr[-500:]}", file=sys.stderr)
                return None
            return float(out.stdout.strip().splitlines()[-1])
        ms_s = best(rounds, ms, "model_signing_s")
    shutil.rmtree(work / f"src-{label}")
    drop()
    shutil.rmtree(st.root, ignore_errors=True)
    return {"case": label, "bytes": size, "files": files, "sign_s": sign_s, "copy_hash_s": copy_s,
            "import_s": import_s, "serve_check_s": check_s, "serve_cold_s": cold_s,
            "read_cold_s": read_s, "residency": {"warm": warm_residency, "cold": cold_residency},
            "model_signing_s": ms_s,
            "check_method": served[-1].method if served else None,
            "limit": one_core * cores(), "aggregate": aggregate, "one_core": one_core,
            "cpu_s": {k: CPU.pop(k) for k in list(CPU)}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path, default=None, help="work folder (deleted after)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cases", default="8g4,2g1")
    parser.add_argument("--model-signing-python",
                        default=os.environ.get("APPLIANCE_MODEL_SIGNING_PYTHON"))
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    args = parser.parse_args()
    one = sha256_one_core()
    aggregate = sha256_all_cores()
    limit = one * cores()
    print(f"hashlib sha256: {one / 1e9:.2f} GB/s one core x {cores()} cores = "
          f"{limit / 1e9:.2f} GB/s limit; measured all cores at once {aggregate / 1e9:.2f} GB/s")
    results = []
    if args.dir is not None:
        Path(args.dir).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-verify-", dir=args.dir))
    try:
        for label in args.cases.split(","):
            total, files = CASES[label]
            results.append(bench_case(work, label, total, files, args.rounds,
                                      args.model_signing_python))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    one_after = sha256_one_core()
    print(f"hashlib sha256 one core after the run: {one_after / 1e9:.2f} GB/s")
    print("\nx limit = / (one core x usable cores); x agg = / (all cores hashing at once);"
          " both measured just before the serve check")
    print("GB/CPU-s = bytes per CPU second (model_signing: includes its interpreter start);"
          " x 1core = that / one core's hashlib rate")
    print(f"{'case':6} {'measure':30} {'s':>7} {'GB/s':>6} {'x limit':>8} {'x agg':>6} "
          f"{'x copy+hash':>11} {'GB/CPU-s':>8} {'x 1core':>7}")
    for row in results:
        size = float(row["bytes"])  # type: ignore[arg-type]
        limit = float(row["limit"])  # type: ignore[arg-type]
        agg = float(row["aggregate"])  # type: ignore[arg-type]
        res = row["residency"]
        assert isinstance(res, dict)
        shown = {k: "?" if v is None else f"{v:.0%}" for k, v in res.items()}
        read_s = row["read_cold_s"]
        read_rate = size / float(read_s) if read_s else None  # type: ignore[arg-type]
        print(f"{row['case']:6} {'limit: ' + format(limit / 1e9, '.2f') + ' GB/s, agg '}"
              f"{agg / 1e9:.2f} GB/s; cold read limit "
              f"{'?' if read_rate is None else format(read_rate / 1e9, '.2f')} GB/s; store "
              f"files in page cache: warm {shown['warm']}, cold {shown['cold']}")
        for key, name in (("copy_hash_s", "copy+hash"), ("import_s", "import"),
                          ("serve_check_s", f"serve check warm ({row['check_method']})"),
                          ("serve_cold_s", "serve check cold"),
                          ("read_cold_s", "read limit cold (no hash)"),
                          ("model_signing_s", "model_signing"), ("sign_s", "sign (1 run)")):
            seconds = row[key]
            if seconds is None:
                print(f"{row['case']:6} {name:30} {'skipped':>7}")
                continue
            rate = size / float(seconds)  # type: ignore[arg-type]
            copy = float(row["copy_hash_s"] or 0)  # type: ignore[arg-type]
            secs = float(seconds)  # type: ignore[arg-type]
            cpu = row["cpu_s"].get(key) if isinstance(row["cpu_s"], dict) else None
            per_cpu = size / cpu if cpu else 0.0
            one = float(row["one_core"])  # type: ignore[arg-type]
            print(f"{row['case']:6} {name:30} {secs:7.2f} {rate / 1e9:6.2f} "
                  f"{rate / limit:8.2f} {rate / agg:6.2f} {secs / copy if copy else 0:11.2f} "
                  f"{per_cpu / 1e9:8.2f} {per_cpu / one:7.2f}")
            if key == "serve_cold_s" and read_rate:
                bound = min(limit, read_rate)
                print(f"{row['case']:6} {'  cold x min(limit, read limit)':30} "
                      f"{rate / bound:7.2f}")
    if args.json:
        args.json.write_text(json.dumps({"sha256_one_core": one, "cores": cores(),
                                         "sha256_all_cores": aggregate, "cases": results},
                                        indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
