"""Scanner benchmark: ours vs picklescan and modelaudit, side by side in one run.

Workloads (each tool runs as its own process; wall time and peak RSS from ``os.wait4``):

1. ``corpus``: the whole scanner corpus (tests/fixtures/corpus) in one invocation (copied);
2. ``safetensors``: one 2 GiB safetensors file (header-only for us) and a 64 MiB one;
3. ``torch``: one 2 GiB plain torch checkpoint (``torch.save`` zip of tensors);
4. ``hf``: a Hugging Face style model folder: two 256 MiB safetensors shards with their
   index, a 3 MB ``tokenizer.json`` (50k vocab, 50k merges), configs and a chat template;
5. ``fleet`` (issue 10): 20 copies of the corpus plus 3 copies of the built-in model folder
   (the prepared SmolLM2 folder when ``appliance prepare`` has cached it, else workload
   4; one real copy and two hard links to it), ~3,900 files, in one invocation: ours with
   its default ``--jobs`` (the CPUs idle at start), with ``--jobs 1``, and as users run
   it, ``appliance scan DIR`` (issue 30: the CLI's start-up counts). The fleet line
   gives the ratio of the minimum wall times over the rounds, and checks from our JSON
   report that every file of the fleet was scanned.

``--only fleet`` (comma-separated names) runs a subset. modelaudit (never one of the
project's dependencies: ``--modelaudit PATH``, ``$MODELAUDIT``, or ``modelaudit`` on
``PATH``; its absence is printed with the reason) runs once per workload (it takes
minutes), with ``--modelaudit-timeout``, and with its telemetry switched off
(``PROMPTFOO_DISABLE_TELEMETRY``).

Floors, in the same rounds (with the corpus workload): ``python -c pass``; ``import
jinja2`` plus parsing every chat template of the corpus (what any scanner that parses
templates with Jinja's own parser pays); ``import picklescan.scanner`` (what a picklescan
second opinion pays). Each is printed as a ratio to picklescan's corpus run.

Our packages (``scanner``, and ``appliance`` for ``appliance scan``) are byte-compiled first
(as ``scripts/install.sh`` and a wheel install do), so our runs do not include compiling the
sources when ``PYTHONDONTWRITEBYTECODE`` is set.

Also measures, in-process, our header-only time on the 2 GiB safetensors file, and our peak
RSS on a 64 MiB vs 2 GiB file (memory must be flat in file size).

Usage: ``.venv/bin/python bench/scan.py [--modelaudit PATH] [--rounds 3] [--keep DIR]
[--only fleet]``. Targets: fleet wall <= 1.0x picklescan (issue 10; picklescan reads only
the files it recognises, we read every file); 2 GiB safetensors header-only <= 0.1 s;
peak memory flat in file size. Issue 3's corpus target (<= 0.5x picklescan) is retired: on
a 2 MB corpus it measured interpreter start. Prints ratios; exits 0 (a benchmark reports,
it does not gate).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "fixtures" / "corpus" / "files"
GiB = 1 << 30


# Runs one measured command. Linux keeps a process's peak RSS across exec, and a child forked
# from this (large) benchmark process would start with our peak: so a small launcher forks
# the tool and reports the tool's wall time, peak RSS and CPU seconds (user + system of the
# tool and every descendant it waited for: our scan helpers) from its own wait4.
LAUNCHER = """
import os, signal, sys, time
timeout, argv = float(sys.argv[1]), sys.argv[2:]
start = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    try:
        os.execvp(argv[0], argv)
    finally:
        os._exit(127)
signal.signal(signal.SIGALRM, lambda *_: os.killpg(pid, signal.SIGKILL))
signal.setitimer(signal.ITIMER_REAL, timeout)
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - start
print(wall, usage.ru_maxrss, os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime)
"""


Measured = tuple[float, int, int, float]  # wall s, peak RSS KiB, exit status, CPU s


def run_measured(argv: list[str], env: dict[str, str] | None = None,
                 timeout_s: float = 120.0) -> Measured:
    """Run ``argv``; return (wall seconds, peak RSS KiB, exit status, CPU seconds of the
    process tree). A run still going after ``timeout_s`` is killed and reported with status
    -9."""
    out = subprocess.run([sys.executable, "-S", "-c", LAUNCHER, str(timeout_s), *argv],
                         env=env or os.environ.copy(), capture_output=True, text=True,
                         check=True).stdout.split()
    return float(out[0]), int(out[1]), int(out[2]), float(out[3])


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


def write_hf_folder(folder: Path, shard_bytes: int) -> None:
    """A model folder laid out like a Hub download (sharded safetensors + tokenizer)."""
    folder.mkdir(parents=True)
    weight_map = {}
    for index in (1, 2):
        name = f"model-{index:05d}-of-00002.safetensors"
        write_safetensors(folder / name, shard_bytes)
        weight_map[f"w{index}"] = name
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 2 * shard_bytes}, "weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps(
        {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
         "num_hidden_layers": 30, "vocab_size": 49152, "torch_dtype": "bfloat16"}))
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": 1}))
    template = (REPO / "appliance" / "templates" / "hermes_chatml.jinja").read_text()
    (folder / "chat_template.jinja").write_text(template)
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "GPT2Tokenizer", "model_max_length": 8192,
         "chat_template": template}))
    vocab = {f"tok{i}\u0120x": i for i in range(50_000)}
    merges = [[f"t{i}", f"\u0120m{i}"] for i in range(50_000)]
    (folder / "tokenizer.json").write_text(json.dumps(
        {"version": "1.0", "added_tokens": [], "model": {"type": "BPE", "vocab": vocab,
                                                           "merges": merges}}))


def builtin_model_folder() -> Path | None:
    """The prepared built-in model folder, if ``appliance prepare`` cached one."""
    base = Path(os.environ.get("APPLIANCE_CACHE") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "appliance") / "models"
    found = sorted(p for p in base.glob("*") if (p / "config.json").is_file())
    return found[0] if found else None


def _link_copy(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, symlinks=True, copy_function=os.link)


def write_fleet(fleet: Path, corpus: Path, model: Path) -> int:
    """20 corpus copies + 3 model copies (one copy, two hard links to it); returns the
    file count."""
    fleet.mkdir(parents=True)
    for i in range(20):
        shutil.copytree(corpus, fleet / f"corpus{i:02d}", symlinks=True)
    # One real copy, then hard links between the fleet's own copies: a link into the
    # appliance cache would make the cached built-in model refused (hard_link_not_allowed).
    shutil.copytree(model, fleet / "model0", symlinks=True)
    for i in range(1, 3):
        _link_copy(fleet / "model0", fleet / f"model{i}")
    return sum(len(files) for _, _, files in os.walk(fleet))


def corpus_templates(corpus: Path) -> list[str]:
    """Every chat template in the corpus: ``*.jinja`` files and ``chat_template`` values of
    small JSON files (the forms the scanner reads, ``scanner.formats.text._templates``)."""
    from scanner.formats.text import _templates as chat_templates

    out = []
    for path in sorted(corpus.rglob("*")):
        if not path.is_file() or path.is_symlink() or path.stat().st_size > 1 << 20:
            continue
        if path.suffix == ".jinja":
            out.append(path.read_text(errors="replace"))
        elif path.suffix == ".json":
            try:
                value = json.loads(path.read_bytes()).get("chat_template")
            except (ValueError, AttributeError):
                continue
            out += [text for _, text in chat_templates("", value)]
    return out


FLOOR_JINJA = """import json, sys, jinja2, jinja2.ext
env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True,
                         extensions=[jinja2.ext.loopcontrols, jinja2.ext.do])
for text in json.load(open(sys.argv[1])):
    try:
        env.parse(text)
    except Exception:
        pass
"""


def floors(templates_file: Path) -> dict[str, list[str]]:
    """Processes that do only part of a scanner's job (see the module docstring)."""
    py = sys.executable
    return {"python -c pass": [py, "-c", "pass"],
            "import jinja2 + parse templates": [py, "-c", FLOOR_JINJA, str(templates_file)],
            "import picklescan.scanner": [py, "-c", "import picklescan.scanner"]}


MODELAUDIT_VENV = REPO / ".cache" / "modelaudit-venv"  # where the install hint below puts it
MODELAUDIT_ENV = {"PROMPTFOO_DISABLE_TELEMETRY": "1", "NO_ANALYTICS": "1"}  # no phoning home


def find_modelaudit(given: str | None) -> tuple[str | None, str]:
    """(path of the modelaudit executable, or None; how it was found or why it is absent).
    ``--modelaudit PATH``, then ``$MODELAUDIT``, then ``modelaudit`` on ``PATH``, beside
    this interpreter, or in ``MODELAUDIT_VENV``. It is never one of the project's
    dependencies: install it in a venv
    of its own (``python3 -m venv .cache/modelaudit-venv && .cache/modelaudit-venv/bin/pip
    install modelaudit``, from the repository root)."""
    bindir = Path(sys.executable).parent
    for source, path in (("--modelaudit", given), ("$MODELAUDIT", os.environ.get("MODELAUDIT")),
                         ("PATH", shutil.which("modelaudit")),
                         ("venv", str(bindir / "modelaudit")),
                         ("its own venv", str(MODELAUDIT_VENV / "bin" / "modelaudit"))):
        if path and Path(path).is_file() and os.access(path, os.X_OK):
            return path, f"{path} (from {source})"
        if path and source in ("--modelaudit", "$MODELAUDIT"):
            return None, f"{source} names {path!r}, which is not an executable file"
    return None, ("not installed: give --modelaudit PATH or $MODELAUDIT (install it in its own "
                  "venv: python3 -m venv .cache/modelaudit-venv && "
                  ".cache/modelaudit-venv/bin/pip install modelaudit)")


def tools(modelaudit: str | None) -> dict[str, list[str]]:
    bindir = Path(sys.executable).parent
    out = {"ours": [sys.executable, "-m", "scanner", "--format", "json", "--quiet"],
           "picklescan": [str(bindir / "picklescan"), "-p"]}
    if modelaudit is not None:
        out["modelaudit"] = [modelaudit, "scan", "--no-cache", "--format", "json", "-q"]
    return out


# ``appliance scan``, the command users run on a fleet (issue 30): the CLI beside this
# interpreter (installed with the project)
APPLIANCE_SCAN = [str(Path(sys.executable).parent / "appliance"), "scan", "--format", "json",
                  "--quiet"]


def fleet_files_scanned(fleet: Path, env: dict[str, str]) -> int:
    """``files_scanned`` of our JSON report on ``fleet`` (one untimed run)."""
    out = subprocess.run([sys.executable, "-m", "scanner", "--format", "json", "--quiet",
                          str(fleet)], capture_output=True, text=True, env=env, cwd=REPO)
    return int(json.loads(out.stdout)["summary"]["files_scanned"])


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


INPROCESS = {
    "ours": "from scanner.api import scan_paths as scan\nrun = lambda p: scan([p])\n",
    "picklescan": "from picklescan.scanner import scan_directory_path as run\n",
}
TIMED = """import sys, time
t = time.perf_counter(); run(sys.argv[1]); first = time.perf_counter() - t
t = time.perf_counter(); run(sys.argv[1]); again = time.perf_counter() - t
print("RESULT", first, again)
"""


def inprocess_seconds(tool: str, folder: Path, env: dict[str, str]) -> tuple[float, float]:
    """(first scan, repeated scan) seconds of ``folder`` inside one process, after the
    tool's top-level import: interpreter start and that import are excluded; our first
    scan still includes the analyzers (jinja2, picklescan) it imports on first use."""
    out = subprocess.run([sys.executable, "-c", INPROCESS[tool] + TIMED, str(folder)],
                         capture_output=True, text=True, check=True, env=env, cwd=REPO)
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")][-1].split()
    return float(line[1]), float(line[2])


# Where a fleet scan's time goes, phase by phase, in one fresh process per round (CPU
# seconds, ``time.process_time``; what a loaded machine distorts least): ``imports`` =
# ``import scanner.cli`` (the format registry included); ``analyzers`` = what analyzers
# import on first use (the pickle machine, jinja2, picklescan); ``io`` = a bare walk of the
# same folder doing what every scan must (list, open, fstat, read and SHA-256 of each file
# of at most 1 MiB, close; regular files by the listing's type, no lstat, as a sequential
# scan does since issue 30), nothing else; ``analysis`` = our first sequential scan minus
# ``io`` (sniffing, analyzers, memo replays, folder rules, findings); ``report`` = the JSON
# report; ``rescan`` = the same scan again in that process (every file a memo hit: not a
# phase of a user's scan, which scans once; it shows the per-file cost of a fleet's copies).
BREAKDOWN = """import gc, hashlib, json, os, stat, sys, time
clock = time.process_time
t0 = clock()
gc.disable()
import scanner.cli
from scanner.core.lazy import defer
for name in ("http", "http.client"):
    defer(name)
gc.freeze(); gc.enable()
t1 = clock()
from scanner.scan.dispatch import load_all_rules
load_all_rules()
import picklescan.scanner
t2 = clock()
root = sys.argv[1]
def bare():
    stack = [os.open(root, os.O_RDONLY | os.O_DIRECTORY)]
    while stack:
        fd = stack.pop()
        for entry in sorted(os.scandir(fd), key=lambda e: e.name):
            name = entry.name
            if entry.is_file(follow_symlinks=False):
                f = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
                size = os.fstat(f).st_size
                if size <= 1 << 20:
                    hashlib.sha256(os.pread(f, size, 0)).digest()
                os.close(f)
                continue
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                stack.append(os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd))
            elif stat.S_ISREG(st.st_mode):
                f = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
                size = os.fstat(f).st_size
                if size <= 1 << 20:
                    hashlib.sha256(os.pread(f, size, 0)).digest()
                os.close(f)
        os.close(fd)
from scanner.api import scan_paths
from scanner.core.context import Limits
from scanner.report import render
t3 = clock(); bare(); t4 = clock()
report = scan_paths([root], Limits(), None, 1); t5 = clock()
render(report, "json"); t6 = clock()
scan_paths([root], Limits(), None, 1); t7 = clock()
print("RESULT", json.dumps({"imports": t1 - t0, "analyzers": t2 - t1, "io": t4 - t3,
                            "scan": t5 - t4, "report": t6 - t5, "rescan": t7 - t6}))
"""


def breakdown(folder: Path, env: dict[str, str], rounds: int) -> dict[str, float]:
    """Minimum CPU seconds of each phase of a sequential scan of ``folder`` over
    ``rounds`` fresh processes (``BREAKDOWN``), plus ``start`` (``python -c pass``)."""
    best: dict[str, float] = {}
    for _ in range(rounds):
        out = subprocess.run([sys.executable, "-c", BREAKDOWN, str(folder)], capture_output=True,
                             text=True, check=True, env=env, cwd=REPO).stdout
        line = [x for x in out.splitlines() if x.startswith("RESULT ")][-1]
        for key, value in json.loads(line[len("RESULT "):]).items():
            best[key] = min(best.get(key, value), value)
        best["start"] = min(best.get("start", 1e9), run_measured([sys.executable, "-c", "pass"],
                                                                  env)[3])
    best["analysis"] = best["scan"] - best["io"]
    return best


WORKLOADS = ("corpus", "safetensors", "torch", "hf", "fleet")


def _ratio(value: float) -> str:
    return f"{value:5.2f}x" if value >= 0.01 else f"{value:.1e}x"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modelaudit", default=None,
                        help="modelaudit executable (default: $MODELAUDIT, then PATH)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="work folder to reuse")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per tool run")
    parser.add_argument("--modelaudit-timeout", type=float, default=900.0,
                        help="seconds for modelaudit's one run per workload")
    parser.add_argument("--only", default=",".join(WORKLOADS),
                        help=f"comma-separated workloads to run ({', '.join(WORKLOADS)})")
    args = parser.parse_args()
    only = set(args.only.split(","))
    if only - set(WORKLOADS):
        parser.error(f"unknown workload(s): {', '.join(sorted(only - set(WORKLOADS)))}")
    work = args.keep or Path(tempfile.mkdtemp(prefix="scan-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "corpus"
    if not corpus.exists():
        shutil.copytree(CORPUS, corpus, symlinks=True)
    st_big, st_small, pt_big = work / "big.safetensors", work / "small.safetensors", work / "big.pt"
    workloads: dict[str, Path] = {}
    if "corpus" in only:
        workloads["corpus folder"] = corpus
    if "safetensors" in only:
        if not st_big.exists():
            write_safetensors(st_big, 2 * GiB)
        if not st_small.exists():
            write_safetensors(st_small, 64 << 20)
        workloads["2 GiB safetensors"] = st_big
        workloads["64 MiB safetensors"] = st_small
    if "torch" in only:
        if not pt_big.exists():
            write_torch_checkpoint(pt_big, 2 * GiB)
        workloads["2 GiB torch checkpoint"] = pt_big
    hf = work / "hf-model"
    builtin = builtin_model_folder()
    if ("hf" in only or ("fleet" in only and builtin is None)) and not hf.exists():
        write_hf_folder(hf, 256 << 20)
    if "hf" in only:
        workloads["HF model folder"] = hf
    fleet = work / "fleet"
    fleet_files = 0
    if "fleet" in only:
        if not fleet.exists():
            write_fleet(fleet, corpus, builtin or hf)
        fleet_files = sum(len(files) for _, _, files in os.walk(fleet))
        workloads[f"fleet ({fleet_files} files)"] = fleet
    templates_file = work / "templates.json"
    templates_file.write_text(json.dumps(corpus_templates(corpus)))
    subprocess.run([sys.executable, "-m", "compileall", "-q", "scanner", "appliance"], cwd=REPO,
                   check=True, stdout=subprocess.DEVNULL)

    modelaudit, found = find_modelaudit(args.modelaudit)
    print(f"modelaudit: {found}")
    runners = tools(modelaudit)
    if "fleet" in only:  # our sequential path too, so the parallel gain is visible
        runners["ours -j1"] = runners["ours"] + ["--jobs", "1"]
        # and the command users run (issue 30): the appliance CLI's scan
        runners["appliance scan"] = APPLIANCE_SCAN
    floor_runs = floors(templates_file) if "corpus" in only else {}
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    audit_env = {**env, **MODELAUDIT_ENV}
    results: dict[tuple[str, str], list[Measured]] = {}
    inproc: dict[str, list[tuple[float, float]]] = {}
    for round_no in range(args.rounds):  # alternate tools in each round: drift hits all alike
        for label, target in workloads.items():
            for name, argv in runners.items():
                if name in ("ours -j1", "appliance scan") and not label.startswith("fleet"):
                    continue
                if name == "modelaudit" and round_no:
                    continue  # minutes per workload: one run
                if any(r[2] == -9 for r in results.get((label, name), [])):
                    continue  # timed out once: do not burn another timeout
                slow = name == "modelaudit"
                results.setdefault((label, name), []).append(run_measured(
                    argv + [str(target)], audit_env if slow else env,
                    args.modelaudit_timeout if slow else args.timeout))
        for name, argv in floor_runs.items():
            results.setdefault(("floor", name), []).append(run_measured(argv, env))
        if "corpus" in only:
            for name in INPROCESS:
                inproc.setdefault(name, []).append(inprocess_seconds(name, corpus, env))

    print(f"{'workload':24} {'tool':14} {'wall s min':>10} {'median':>8} {'CPU s min':>10} "
          f"{'median':>8} {'peak RSS MiB':>13} exit")
    summary: dict[tuple[str, str], tuple[float, float, float, float, float]] = {}
    for (label, name), rows in results.items():
        wall = min(r[0] for r in rows)
        median = statistics.median(r[0] for r in rows)
        cpu = min(r[3] for r in rows)
        cpu_median = statistics.median(r[3] for r in rows)
        rss = max(r[1] for r in rows) / 1024
        summary[(label, name)] = (wall, rss, median, cpu, cpu_median)
        codes = sorted({r[2] for r in rows})
        note = " (killed: timeout)" if -9 in codes else ""
        print(f"{label:24} {name:14} {wall:10.3f} {median:8.3f} {cpu:10.3f} {cpu_median:8.3f} "
              f"{rss:13.1f} {codes}{note}")
    print()
    if floor_runs:
        picklescan_corpus = summary[("corpus folder", "picklescan")][0]
        for name in floor_runs:
            wall = summary[("floor", name)][0]
            print(f"{'floor':24} {name:32} {wall / picklescan_corpus:5.2f}x picklescan's "
                  "corpus run")
    if inproc:
        first = {name: statistics.median(r[0] for r in rows) for name, rows in inproc.items()}
        again = {name: statistics.median(r[1] for r in rows) for name, rows in inproc.items()}
        print(f"{'corpus, in-process':24} first scan ours {first['ours']:.3f} s vs picklescan "
              f"{first['picklescan']:.3f} s: {first['ours'] / first['picklescan']:5.2f}x; "
              f"repeated scan {again['ours']:.3f} s vs {again['picklescan']:.3f} s: "
              f"{again['ours'] / again['picklescan']:5.2f}x")
    print()
    for label in workloads:
        for ours in ("ours", "ours -j1", "appliance scan"):
            if (label, ours) not in summary:
                continue
            mine = summary[(label, ours)]
            for peer in ("picklescan", "modelaudit"):
                if (label, peer) not in summary:
                    continue
                other = summary[(label, peer)]
                timed_out = any(r[2] == -9 for r in results[(label, peer)])
                print(f"{label:24} {ours}/{peer:10} wall min {_ratio(mine[0] / other[0])} "
                      f"(median {_ratio(mine[2] / other[2])})   CPU min "
                      f"{_ratio(mine[3] / other[3])} (median {_ratio(mine[4] / other[4])})"
                      f"   peak RSS {_ratio(mine[1] / other[1])}"
                      + (f"  ({peer} killed at {other[0]:.0f} s)" if timed_out else ""))
    if "fleet" in only:
        label = f"fleet ({fleet_files} files)"
        ours_s, pks_s = summary[(label, "ours")][0], summary[(label, "picklescan")][0]
        scanned = fleet_files_scanned(fleet, env)
        print(f"\nfleet: ours {ours_s:.3f} s vs picklescan {pks_s:.3f} s (min of "
              f"{args.rounds} rounds): {ours_s / pks_s:.2f}x (target <= 1.0x); every file "
              f"scanned: {scanned} of {fleet_files} "
              f"({'yes' if scanned == fleet_files else 'NO'})")
        cli_s = summary[(label, "appliance scan")][0]
        print(f"fleet: appliance scan {cli_s:.3f} s vs picklescan {pks_s:.3f} s (min of "
              f"{args.rounds} rounds, as users run it): {cli_s / pks_s:.2f}x (target <= 1.0x)")
        cpu = {name: summary[(label, name)][3]
               for name in ("ours", "ours -j1", "appliance scan", "picklescan")}
        print(f"fleet: CPU s (user + system, process tree; min): ours {cpu['ours']:.3f}, "
              f"ours -j1 {cpu['ours -j1']:.3f}, appliance scan {cpu['appliance scan']:.3f}, "
              f"picklescan {cpu['picklescan']:.3f}")
        parts = breakdown(fleet, env, args.rounds)
        print("fleet: where our CPU time goes (s, min of " f"{args.rounds} fresh processes, "
              "sequential): " + ", ".join(f"{k} {parts[k]:.3f}" for k in (
                  "start", "imports", "analyzers", "io", "analysis", "report", "rescan")))
        if (label, "modelaudit") in summary:
            audit = summary[(label, "modelaudit")]
            codes = {r[2] for r in results[(label, "modelaudit")]}
            print(f"fleet: modelaudit {audit[0]:.1f} s, one run ({audit[0] / ours_s:.0f}x ours)"
                  + (" (killed: timeout)" if -9 in codes else f", exit {sorted(codes)}"))
        else:
            print(f"fleet: modelaudit skipped: {found}")
    if "safetensors" in only:
        header = header_only_seconds(st_big, args.rounds)
        flat = (summary[("2 GiB safetensors", "ours")][1]
                / summary[("64 MiB safetensors", "ours")][1])
        print(f"\n2 GiB safetensors, header-only scan in-process: {header:.4f} s "
              f"({header / 0.1:.2f}x of the 0.1 s limit)")
        print(f"our peak RSS, 2 GiB vs 64 MiB safetensors: {flat:.2f}x (flat = 1.0)")
    print(f"work folder: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
