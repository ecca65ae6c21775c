"""The AVX2 path proven on an emulated AVX2-only CPU, not only by patching vLLM's dispatch
(issue 35).

``qemu-x86_64 -cpu Haswell-noTSX`` (Debian's ``qemu-user``) runs the harness
(``tests/preflight/emulated_cpu.py``) as a CPU without any AVX-512 instruction: an
instruction it lacks ends the process with SIGILL, so a pass proves the library vLLM's
dispatch picks (``vllm/_C_AVX2``) and the kernel ops the built-in model uses really run there
and give the reference results. Only the started process is emulated (a child runs
natively), so everything is checked in one process. Forcing the AVX-512 BF16 library
(``vllm/_C``) on the same emulated CPU must die with SIGILL, named in the failure.

The emulated tests take minutes (import of torch and vLLM alone ~40-75 s emulated), so they
run where ``APPLIANCE_EMULATED_CPU_TESTS=1`` (``.ci/run`` sets it after installing
qemu-user as root) and skip with the reason elsewhere; with it set, a missing
``qemu-x86_64`` fails. The native run of the same harness (below, always on) keeps the
harness and its references honest on every host.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import emulated_cpu as harness  # noqa: E402 - tests/preflight (this folder)

from appliance.preflight.kernels import (  # noqa: E402
    PROBE_SOURCE,
    CpuIsa,
    KernelError,
    probe_in_process,
    probe_kernels,
)

OPS = {f"{op}@{dtype}" for op in ("rms_norm", "fused_add_rms_norm", "silu_and_mul",
                                  "rotary_embedding", "attention")
       for dtype in ("bfloat16", "float32")}
LIBRARY = {"AVX2": "_C_AVX2", "AVX512": "_C_AVX512", "AVX512_BF16": "_C"}
EMULATED_TIMEOUT_S = 1200.0
X86 = platform.machine() in ("x86_64", "AMD64")


def _gate() -> None:
    if not X86:
        pytest.skip(f"the harness emulates x86-64 CPUs with this host's x86-64 engine; this "
                    f"host is {platform.machine()}")
    if os.environ.get("APPLIANCE_EMULATED_CPU_TESTS") != "1":
        pytest.skip("emulated-CPU tests take minutes: set APPLIANCE_EMULATED_CPU_TESTS=1 "
                    "(.ci/run does, after installing Debian's qemu-user)")
    if harness.qemu() is None:
        pytest.fail("APPLIANCE_EMULATED_CPU_TESTS=1 but qemu-x86_64 is not installed "
                    "(apt-get install qemu-user)")


def _check_run(outcome: harness.Outcome, library: str, level: str) -> None:
    """The preflight and ops steps ran to the end, with ``library`` loaded at ``level`` and
    every op within its tolerance (a later step's failure is its own test's)."""
    assert outcome.signal_name is None, outcome.explain()
    assert {"preflight", "ops"} <= set(outcome.results), outcome.explain()
    preflight, ops = outcome.results["preflight"], outcome.results["ops"]
    assert "error" not in preflight and "error" not in ops, outcome.explain()
    report = preflight["report"]
    assert report["libraries"] == [library], outcome.explain()
    assert report["op_registered"] is True and report["platform"] == "CpuPlatform"
    assert preflight["level"] == level, outcome.explain()
    assert set(ops["errors"]) == OPS and ops["failed"] == [], outcome.explain()


# --- always on: the same harness, natively ---------------------------------------------------

@pytest.mark.skipif(not X86, reason="vLLM's x86 kernel libraries")
def test_the_harness_passes_natively_with_the_library_for_this_hosts_level() -> None:
    outcome = harness.run("native", timeout_s=600, native=True)
    torch_step = outcome.results["torch"]
    level = ("AVX512_BF16" if torch_step["avx512_bf16"] else "AVX512") \
        if torch_step["avx512"] else "AVX2"
    _check_run(outcome, LIBRARY[level], level + ("+AMX" if torch_step["amx"] else ""))


def test_a_crash_is_reported_with_its_signal_and_step() -> None:
    # The host side's reading of what the harness printed: a step begun and never finished
    # is where the process died, the signal is named.
    outcome = harness.Outcome(cpu="Haswell-noTSX", returncode=-4, begun=["torch", "ops"],
                              results={"torch": {"step": "torch"}})
    assert outcome.failed_step == "ops"
    assert "died with SIGILL (illegal instruction" in outcome.explain()
    assert "'ops'" in outcome.explain() and "Haswell-noTSX" in outcome.explain()
    assert "exited with status 1" in harness.Outcome("max", 1).explain()


# --- the kernel probe, in this process and as the emulated CPU sees it ------------------------

def test_probe_in_process_failure_is_a_kernel_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import appliance.preflight.kernels as kernels

    monkeypatch.setattr(kernels, "PROBE_SOURCE", "raise OSError('libnuma.so.1: cannot open')")
    with pytest.raises(KernelError) as err:
        probe_in_process(isa=CpuIsa("x86_64", "AVX2", ("avx2",)))
    assert err.value.code == "engine_kernels_crashed" and "libnuma.so.1" in err.value.message
    monkeypatch.setattr(kernels, "PROBE_SOURCE", "print('not json')")
    with pytest.raises(KernelError) as err:
        probe_in_process(isa=CpuIsa("x86_64", "AVX2", ("avx2",)))
    assert err.value.code == "engine_kernels_missing"


@pytest.mark.parametrize(("dispatch", "capability", "level"), [
    ({"avx512": False, "avx512_bf16": False, "amx": False}, "AVX2", "AVX2"),
    ({"avx512": True, "avx512_bf16": False, "amx": False}, "AVX512", "AVX512"),
    ({"avx512": True, "avx512_bf16": True, "amx": True}, "AVX512", "AVX512_BF16+AMX"),
    (None, "AVX512", "AVX512_BF16"),  # an older probe: /proc/cpuinfo's level stands
])
def test_the_report_level_is_the_one_vllms_dispatch_saw(
        tmp_path: Path, dispatch: object, capability: str, level: str) -> None:
    # Under qemu-user /proc/cpuinfo is the host's (AVX-512 BF16 here) while the process runs
    # on an emulated AVX2 CPU: the report says what the process executes and shows both.
    data = {"platform": "CpuPlatform", "torch_capability": capability,
            "libraries": ["_C_AVX2"], "op_registered": True}
    if dispatch is not None:
        data["dispatch"] = dispatch
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(data)}\nEOF\n", encoding="utf-8")
    exe.chmod(0o755)
    host = CpuIsa("x86_64", "AVX512_BF16", ("avx2", "avx512f", "avx512_bf16"))
    report = probe_kernels(python=str(exe), isa=host)
    assert report.level == level and report.to_json()["isa"] == "AVX512_BF16"
    text = report.render()
    assert text.startswith(f"cpu: x86_64 {level}")
    assert ("/proc/cpuinfo says AVX512_BF16" in text) is (level != "AVX512_BF16")


def test_the_probe_source_asks_the_questions_vllms_dispatch_asks() -> None:
    for name in ("_is_avx512_supported", "_is_avx512_bf16_supported", "_is_amx_tile_supported",
                 "import_kernels()"):
        assert name in PROBE_SOURCE


# --- emulated (APPLIANCE_EMULATED_CPU_TESTS=1) -------------------------------------------------

DECODE_TOKENS = 4
"""Greedy tokens generated: the first from the prefill, then three decode steps."""


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _gate()
    return harness.build_tiny_model(tmp_path_factory.mktemp("emulated") / "tiny")


@pytest.fixture(scope="module")
def avx2_run(tiny_model: Path) -> harness.Outcome:
    """One emulated AVX2-only process: torch, preflight, ops, then the decode."""
    outcome = harness.run(harness.AVX2_ONLY, "--steps", "torch,preflight,ops,decode",
                          "--decode-model", str(tiny_model),
                          "--decode-tokens", str(DECODE_TOKENS), timeout_s=EMULATED_TIMEOUT_S)
    print(f"\nemulated {harness.AVX2_ONLY}: {outcome.seconds:.0f} s in all; steps: "
          + json.dumps({k: v.get("seconds") for k, v in outcome.results.items()}))
    return outcome


def test_avx2_only_cpu_loads_the_avx2_library_and_its_ops_match_the_references(
        avx2_run: harness.Outcome) -> None:
    torch_step = avx2_run.results.get("torch", {})
    assert torch_step.get("capability") == "AVX2", avx2_run.explain()
    assert torch_step.get("avx512") is False and torch_step.get("avx512_bf16") is False
    _check_run(avx2_run, "_C_AVX2", "AVX2")
    preflight = avx2_run.results["preflight"]
    assert preflight["report"]["torch_capability"] == "AVX2"
    assert preflight["text"].startswith("cpu: x86_64 AVX2")
    print(f"\n{preflight['text']}")


def test_avx2_only_cpu_greedy_decode_equals_the_native_run(
        avx2_run: harness.Outcome, tiny_model: Path) -> None:
    native = harness.run("native", "--steps", "decode", "--decode-model", str(tiny_model),
                         "--decode-tokens", str(DECODE_TOKENS), timeout_s=600, native=True)
    assert native.returncode == 0, native.explain()
    decode = avx2_run.results.get("decode", {})
    assert "error" not in decode and avx2_run.returncode == 0, avx2_run.explain()
    want = native.results["decode"]["tokens"]
    assert len(want) == DECODE_TOKENS and decode["tokens"] == want, avx2_run.explain()
    print(f"\nemulated decode: {decode['seconds']} s (engine load {decode['load_s']} s, "
          f"generate {decode['generate_s']} s); native: {native.results['decode']['seconds']} s")


def test_forcing_the_avx512_bf16_library_on_the_avx2_cpu_dies_with_sigill_named() -> None:
    # The negative check: break the dispatch (torch.cpu claims AVX-512 BF16, so vLLM loads
    # vllm/_C) and the emulated AVX2 CPU must kill the process with SIGILL, named by the
    # harness; a pass here would mean the emulation proves nothing.
    _gate()
    outcome = harness.run(harness.AVX2_ONLY, "--steps", "preflight", "--force-library", "_C",
                          timeout_s=EMULATED_TIMEOUT_S)
    print(f"\nemulated {harness.AVX2_ONLY}, forced vllm/_C: {outcome.seconds:.0f} s, "
          f"{outcome.signal_name}")
    assert outcome.signal_name == "SIGILL", outcome.explain()
    assert outcome.failed_step == "preflight"
    assert "died with SIGILL (illegal instruction" in outcome.explain()


@pytest.mark.parametrize(("cpu", "level"), [
    ("Skylake-Server-noTSX-IBRS", "AVX512"),  # AVX-512 without BF16 -> vllm/_C_AVX512
    ("Cooperlake", "AVX512_BF16"),            # AVX-512 with BF16 -> vllm/_C
])
def test_avx512_cpu_models_where_qemu_emulates_avx512(cpu: str, level: str) -> None:
    _gate()
    qemu = harness.qemu()
    assert qemu
    probe = subprocess.run([qemu, "-cpu", cpu, "/bin/true"], capture_output=True, text=True,
                           timeout=60, check=False)
    dropped = [x for x in probe.stderr.splitlines() if "avx512" in x]
    if dropped:
        version = subprocess.run([qemu, "--version"], capture_output=True, text=True,
                                 timeout=60, check=False).stdout.splitlines()[0]
        pytest.skip(f"{version}: its TCG does not emulate AVX-512, the {cpu} model runs as an "
                    f"AVX2 CPU ({dropped[0].strip()})")
    outcome = harness.run(cpu, timeout_s=EMULATED_TIMEOUT_S)
    _check_run(outcome, LIBRARY[level], level)
