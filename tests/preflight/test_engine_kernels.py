"""The engine kernel probe (issue 19): vLLM picks the kernel library for the CPU and the probe
proves it loads, on AVX2, AVX-512 and AVX-512 BF16 hosts alike, and refuses where none fits.

The AVX2 path is exercised on any x86 host by making vLLM's own dispatch see an AVX2-only CPU
(``torch.cpu._is_avx512_supported`` false, torch's dispatch capped at AVX2): vLLM then loads
``vllm/_C_AVX2``, the library an AMD EPYC without AVX-512 gets (its instructions run on newer
CPUs too)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.errors import PreflightError
from appliance.preflight.kernels import (
    KERNEL_CODES,
    CpuIsa,
    KernelError,
    check_kernels,
    cpu_isa,
    probe_kernels,
)

ROOT = Path(__file__).resolve().parents[2]

# /proc/cpuinfo flags lines of the three host kinds (abridged to what matters, real order).
EPYC_AVX2 = "flags\t\t: fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi2 sha_ni\n"
SKX_AVX512 = "flags\t\t: fpu sse2 avx avx2 avx512f avx512dq avx512cd avx512bw avx512vl\n"
SPR_BF16 = ("flags\t\t: fpu avx avx2 avx512f avx512bw avx512_vnni avx512_bf16 amx_bf16 "
            "amx_tile amx_int8\n")
OLD_AVX = "processor\t: 0\nflags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 avx\n"


@pytest.mark.parametrize(("cpuinfo", "level"), [
    (EPYC_AVX2, "AVX2"), (SKX_AVX512, "AVX512"), (SPR_BF16, "AVX512_BF16+AMX"),
    (OLD_AVX, "none"), ("", "none"),
])
def test_cpu_isa_level_from_flags(cpuinfo: str, level: str) -> None:
    isa = cpu_isa(cpuinfo, machine="x86_64")
    assert isa.level == level
    assert isa.supported is (level != "none")


def test_non_x86_reports_the_machine_and_is_left_to_the_probe() -> None:
    isa = cpu_isa("flags : fp asimd", machine="aarch64")
    assert (isa.level, isa.supported) == ("aarch64", True)


def test_cpu_without_avx2_is_refused_before_any_child_runs() -> None:
    with pytest.raises(KernelError) as err:
        probe_kernels(python="/nonexistent/python", isa=cpu_isa(OLD_AVX, machine="x86_64"))
    assert err.value.code == "cpu_isa_unsupported"
    assert "AVX2" in err.value.message and err.value.fix


def _fake_python(tmp_path: Path, body: str) -> str:
    exe = tmp_path / "python"
    exe.write_text("#!/bin/sh\n" + body + "\n", encoding="utf-8")
    exe.chmod(0o755)
    return str(exe)


AVX2 = CpuIsa("x86_64", "AVX2", ("avx2",))


def test_sigill_in_the_child_is_a_refusal_naming_the_signal(tmp_path: Path) -> None:
    python = _fake_python(tmp_path, "kill -ILL $$")
    with pytest.raises(KernelError) as err:
        probe_kernels(python=python, isa=AVX2)
    assert err.value.code == "engine_kernels_crashed"
    assert "SIGILL" in err.value.message and "AVX2" in err.value.message


def test_child_error_exit_names_its_last_line(tmp_path: Path) -> None:
    python = _fake_python(tmp_path, "echo 'ImportError: libnuma.so.1: cannot open' >&2; exit 1")
    with pytest.raises(KernelError) as err:
        probe_kernels(python=python, isa=AVX2)
    assert err.value.code == "engine_kernels_crashed"
    assert "libnuma.so.1" in err.value.message


@pytest.mark.parametrize("printed", [
    '{"platform": "CpuPlatform", "torch_capability": "AVX2", "libraries": [], '
    '"op_registered": false}',
    '{"platform": "CpuPlatform", "torch_capability": "AVX2", "libraries": ["_C_AVX2"], '
    '"op_registered": false}',
    'not json', '',
])
def test_no_library_no_op_or_no_report_is_never_a_pass(tmp_path: Path, printed: str) -> None:
    python = _fake_python(tmp_path, f"cat <<'EOF'\n{printed}\nEOF")
    with pytest.raises(KernelError) as err:
        probe_kernels(python=python, isa=AVX2)
    assert err.value.code == "engine_kernels_missing"


def test_a_probe_that_hangs_is_a_timeout_refusal(tmp_path: Path) -> None:
    python = _fake_python(tmp_path, "exec sleep 30")
    with pytest.raises(KernelError) as err:
        probe_kernels(python=python, isa=AVX2, timeout_s=0.5)
    assert err.value.code == "engine_kernels_timeout"


def test_a_kernel_error_is_a_preflight_error_with_its_own_codes() -> None:
    assert issubclass(KernelError, PreflightError)
    assert set(KERNEL_CODES) == {"cpu_isa_unsupported", "engine_kernels_crashed",
                                 "engine_kernels_missing", "engine_kernels_timeout"}


def test_preflight_turns_a_probe_error_into_a_problem_and_skips_without_the_engine() -> None:
    def broken() -> object:
        raise KernelError("boom", code="engine_kernels_crashed", where="AVX2 CPU", fix="f")

    report, problems = check_kernels(("vllm", "torch"), probe=broken)  # type: ignore[arg-type]
    assert report is None and [p.code for p in problems] == ["engine_kernels_crashed"]
    assert check_kernels(("torch",), probe=broken) == (None, [])  # type: ignore[arg-type]


# --- the real engine: vLLM's own dispatch, on this host and as an AVX2-only host sees it ----

EXPECTED_LIBRARY = {"AVX2": "_C_AVX2", "AVX512": "_C_AVX512", "AVX512_BF16": "_C"}


def test_this_host_loads_the_library_vllm_picks_for_its_isa() -> None:
    report = probe_kernels()
    level = report.isa.level.removesuffix("+AMX")
    assert report.libraries == (EXPECTED_LIBRARY[level],)
    assert report.op_registered and report.platform == "CpuPlatform"


def test_an_avx2_only_host_loads_the_avx2_library(tmp_path: Path) -> None:
    # vLLM's import_kernels asks torch.cpu whether AVX-512 is there; say no, as an EPYC does.
    # (vLLM also asks for AMX and VNNI elsewhere; an EPYC without AVX-512 has neither.)
    (tmp_path / "sitecustomize.py").write_text(
        "import torch\n"
        "for name in ('_is_avx512_supported', '_is_avx512_bf16_supported',\n"
        "             '_is_amx_tile_supported', '_is_amx_fp16_supported', '_is_vnni_supported'):\n"
        "    setattr(torch.cpu, name, lambda: False)\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
           "ATEN_CPU_CAPABILITY": "avx2"}
    report = probe_kernels(env=env, isa=AVX2)
    assert report.libraries == ("_C_AVX2",)
    assert report.op_registered and report.torch_capability == "AVX2"


def test_appliance_check_prints_the_isa_level_and_the_kernel_library() -> None:
    done = subprocess.run([sys.executable, "-m", "appliance.cli", "check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if "engine kernels:" in x)
    assert re.search(r"cpu: x86_64 AVX(2|512)", line) and "vllm/_C" in line


# --- nothing in the project loads a kernel library by name or runs the `vllm` script ---------

def test_no_direct_kernel_import_and_no_vllm_console_script() -> None:
    sources = [ROOT / "Dockerfile", *sorted((ROOT / "scripts").glob("*.sh")),
               *sorted((ROOT / "systemd").iterdir()), *sorted((ROOT / "appliance").rglob("*.py"))]
    bad = re.compile(r"import vllm\._C|\bvllm\._C\w*\s*[,;\"']|bin/vllm\b|^\s*vllm serve\b",
                     re.M)
    offenders = [str(p.relative_to(ROOT)) for p in sources
                 if p.is_file() and bad.search(p.read_text(encoding="utf-8", errors="replace"))]
    assert offenders == []
