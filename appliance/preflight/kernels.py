"""Which compiled kernel library the engine loads on this CPU, proved by loading it.

vLLM's CPU build ships one kernel library per instruction-set level and picks one at start
(``CpuPlatform.import_kernels()`` in ``vllm/platforms/cpu.py``): ``vllm/_C`` (AVX-512 with
BF16/VNNI/AMX) when ``torch.cpu._is_avx512_supported()`` and ``_is_avx512_bf16_supported()``,
``vllm/_C_AVX512`` with AVX-512 but no BF16, else ``vllm/_C_AVX2``. Importing ``vllm._C``
directly dies with SIGILL on an AVX2-only CPU (vLLM issues #18660, #32554), so nothing here
names a library: the probe asks vLLM's own platform code to load its kernels and reports which
library the process then has mapped, and that a kernel op it registers (``torch.ops._C.rms_norm``)
exists.

The probe runs in a child interpreter (:data:`PROBE_SOURCE`): a library built for instructions
this CPU lacks kills that child with SIGILL, which becomes a refusal here, never a crash of the
caller. Fail closed: a child that crashes, times out, prints nothing readable or loads no
library is a :class:`KernelError`, never a pass.

``python -m appliance.preflight.kernels [--json]`` prints the report (exit 0) or the error
(exit 1); ``scripts/install.sh`` and the Dockerfile run it as their engine check. As a
preflight rule (:func:`check_kernels`, registered in :data:`appliance.preflight.RULES`) it
runs once per process when the policy requires ``vllm``.

Shapes: :func:`cpu_isa` -> :class:`CpuIsa`; :func:`probe_kernels` (a child) and
:func:`probe_in_process` (this process, for an emulated CPU) -> :class:`KernelReport`
(raises :class:`KernelError`); :func:`check_kernels` -> ``(KernelReport | None,
[Problem])``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import platform
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from appliance.errors import PreflightError
from appliance.preflight.problem import Problem
from scanner.diagnostic import CodeRegistry

KERNEL_CODES = CodeRegistry("engine kernels", {
    "cpu_isa_unsupported": "the CPU lacks the instruction set every engine kernel library needs",
    "engine_kernels_crashed": "loading the engine's kernel library killed the process",
    "engine_kernels_missing": "the engine loaded no kernel library, or its ops are not registered",
    "engine_kernels_timeout": "the engine's kernel probe did not finish in time",
})
"""Codes of :class:`KernelError` (preflight reports them as its problems)."""


class KernelError(PreflightError):
    """The engine's kernels cannot run here; ``code`` from :data:`KERNEL_CODES`."""

    code = "engine_kernels_missing"
    registry: ClassVar[CodeRegistry] = KERNEL_CODES

PROBE_TIMEOUT_S = 180.0
"""Seconds the child may take (import of torch + vLLM: ~3 s here, minutes on a cold disk)."""

PROBE_OP = "rms_norm"
"""A kernel every vLLM kernel library registers under ``torch.ops._C``."""

# The child: vLLM picks and loads its kernels; the mapped library file names say which one.
# Reads /proc/self/maps (Linux), the loader's own record of what it mapped. "dispatch": the
# torch.cpu answers vLLM's dispatch asks (CPUID and the OS-enabled register state, as this
# process executes), which can differ from /proc/cpuinfo (the host kernel's view: under
# user-mode emulation such as qemu-user it is the host's, not the emulated CPU's).
PROBE_SOURCE = r"""
import json, re, sys
import torch
from vllm.platforms import current_platform

def mapped():
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            text = maps.read()
    except OSError:
        return []
    return sorted(set(re.findall(r"/vllm/(_C[A-Za-z0-9_]*)\.[^/\s]*\.so$", text, re.M)))

def asks(name):
    answer = getattr(torch.cpu, name, None)
    return bool(answer()) if callable(answer) else False

before = mapped()
current_platform.import_kernels()
after = mapped()
ops = torch.ops._C
print(json.dumps({
    "platform": type(current_platform).__name__,
    "torch_capability": torch.backends.cpu.get_cpu_capability(),
    "dispatch": {"avx512": asks("_is_avx512_supported"),
                 "avx512_bf16": asks("_is_avx512_bf16_supported"),
                 "amx": asks("_is_amx_tile_supported")},
    "libraries": [name for name in after if name not in before] or after,
    "op_registered": hasattr(ops, "OP"),
}))
""".replace("OP", PROBE_OP)


@dataclass(frozen=True)
class CpuIsa:
    """The CPU's instruction-set level as vLLM's CPU kernels see it.

    ``machine``: ``platform.machine()`` (``x86_64``, ``aarch64``, ...); ``level``: ``AVX2``,
    ``AVX512``, ``AVX512_BF16`` (x86; ``+AMX`` appended when AMX tiles are present), ``none``
    (x86 without AVX2) or the machine name elsewhere; ``flags``: the relevant
    ``/proc/cpuinfo`` flags that were found.
    """

    machine: str
    level: str
    flags: tuple[str, ...]

    @property
    def supported(self) -> bool:
        """vLLM's x86 CPU build needs AVX2 at least (vLLM issue #13662)."""
        return self.level != "none"

    def render(self) -> str:
        shown = " ".join(self.flags) or "no relevant flags"
        return f"{self.machine} {self.level} ({shown})"


RELEVANT_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")


def cpu_isa(cpuinfo: str | None = None, machine: str | None = None) -> CpuIsa:
    """The level from ``/proc/cpuinfo``'s first ``flags`` line (``cpuinfo``: its text, read
    when omitted; an unreadable file counts as no flags, so x86 is then refused)."""
    arch = machine or platform.machine()
    if arch not in ("x86_64", "AMD64", "i686", "i386"):
        return CpuIsa(arch, arch, ())
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            flags = set(value.split())
            break
    found = tuple(f for f in RELEVANT_FLAGS if f in flags)
    if "avx512f" in flags:
        level = "AVX512_BF16" if "avx512_bf16" in flags else "AVX512"
    elif "avx2" in flags:
        level = "AVX2"
    else:
        level = "none"
    if "amx_tile" in flags and level != "none":
        level += "+AMX"
    return CpuIsa(arch, level, found)


@dataclass(frozen=True)
class KernelReport:
    """What the probe found: ``libraries`` the kernel library file stems vLLM loaded
    (``_C``, ``_C_AVX512``, ``_C_AVX2``), ``op_registered`` whether ``torch.ops._C.<PROBE_OP>``
    exists, ``torch_capability`` torch's own dispatch level (``AVX2``, ``AVX512``, ...),
    ``dispatch_level`` the level vLLM's kernel dispatch saw in the probing process (same names
    as :attr:`CpuIsa.level`; empty when the probe did not say, and on non-x86)."""

    isa: CpuIsa
    platform: str
    torch_capability: str
    libraries: tuple[str, ...]
    op_registered: bool
    dispatch_level: str = ""

    @property
    def level(self) -> str:
        """The CPU level as executed (:attr:`dispatch_level`), else ``/proc/cpuinfo``'s."""
        return self.dispatch_level or self.isa.level

    def render(self) -> str:
        libs = ", ".join(f"vllm/{name}" for name in self.libraries)
        cpu = self.isa.render()
        if self.level != self.isa.level:
            cpu = (f"{self.isa.machine} {self.level} as executed (/proc/cpuinfo says "
                   f"{self.isa.level}: {' '.join(self.isa.flags) or 'no relevant flags'})")
        return (f"cpu: {cpu}; torch dispatch {self.torch_capability}; "
                f"engine kernels: {libs} ({self.platform}, torch.ops._C.{PROBE_OP} registered)")

    def to_json(self) -> dict[str, object]:
        return {"machine": self.isa.machine, "isa": self.isa.level, "flags": list(self.isa.flags),
                "dispatch_level": self.dispatch_level,
                "platform": self.platform, "torch_capability": self.torch_capability,
                "libraries": list(self.libraries), "op_registered": self.op_registered}


def _dispatch_level(dispatch: object, torch_capability: str, isa: CpuIsa) -> str:
    """The level from the probe's ``dispatch`` answers (x86 only; ``""`` when absent)."""
    if not isinstance(dispatch, dict) or isa.machine not in ("x86_64", "AMD64", "i686", "i386"):
        return ""
    if dispatch.get("avx512") is True:
        level = "AVX512_BF16" if dispatch.get("avx512_bf16") is True else "AVX512"
    else:
        level = "AVX2" if torch_capability.startswith("AVX") else "none"
    return level + "+AMX" if dispatch.get("amx") is True and level != "none" else level


_FIX = ("reinstall the pinned engine stack (bash scripts/install.sh); on a CPU without AVX2 run "
        "the GPU build on a GPU host instead")


def probe_kernels(python: str | None = None, env: Mapping[str, str] | None = None,
                  timeout_s: float = PROBE_TIMEOUT_S, isa: CpuIsa | None = None) -> KernelReport:
    """Load the engine's kernels in a child ``python`` (default: this interpreter) and report.

    Raises :class:`KernelError`: ``cpu_isa_unsupported`` (x86 without AVX2; no child is run),
    ``engine_kernels_crashed`` (the child died: signal or error, its last stderr line named),
    ``engine_kernels_timeout``, ``engine_kernels_missing`` (no library mapped, op absent, or
    output not understood).
    """
    found = isa or cpu_isa()
    if not found.supported:
        raise KernelError(
            f"this {found.machine} CPU has no AVX2; vLLM's CPU kernels need AVX2 or AVX-512",
            code="cpu_isa_unsupported", where="/proc/cpuinfo flags",
            fix="run on a CPU with AVX2 (x86-64-v3) or later, or serve with the GPU build")
    argv = [python or sys.executable, "-c", PROBE_SOURCE]
    try:
        done = subprocess.run(  # noqa: S603 - fixed argv, no shell, our own probe source
            argv, capture_output=True, text=True, timeout=timeout_s,
            env=None if env is None else dict(env), stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        raise KernelError(
            f"the kernel probe did not finish within {timeout_s:.0f} s",
            code="engine_kernels_timeout",
            where=f"{found.level} CPU", fix="check the disk and the engine install; " + _FIX
        ) from None
    except OSError as exc:
        raise KernelError(f"cannot run {argv[0]}: {exc.strerror}",
                             code="engine_kernels_missing", where=argv[0], fix=_FIX) from None
    if done.returncode != 0:
        raise KernelError(_death(done.returncode, done.stderr, found),
                             code="engine_kernels_crashed", where=f"{found.level} CPU", fix=_FIX)
    return _report(done.stdout, found)


def _death(returncode: int, stderr: str, isa: CpuIsa) -> str:
    last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "")
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        why = (" (illegal instruction: a kernel library built for a newer CPU than this "
               f"{isa.level} one was loaded)" if name == "SIGILL" else "")
        return f"loading the engine's kernels killed the probe with {name}{why}"
    return f"loading the engine's kernels failed (exit {returncode}): {last[:300] or 'no output'}"


def _report(stdout: str, isa: CpuIsa) -> KernelReport:
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    try:
        data = json.loads(line)
        capability = str(data["torch_capability"])
        report = KernelReport(
            isa=isa, platform=str(data["platform"]), torch_capability=capability,
            libraries=tuple(str(name) for name in data["libraries"]),
            op_registered=data["op_registered"] is True,
            dispatch_level=_dispatch_level(data.get("dispatch"), capability, isa))
    except (ValueError, KeyError, TypeError):
        raise KernelError("the kernel probe printed no report", code="engine_kernels_missing",
                             where="probe output", fix=_FIX) from None
    if not report.libraries or not report.op_registered:
        what = ("no vllm/_C* library was loaded" if not report.libraries else
                f"torch.ops._C.{PROBE_OP} is not registered after loading "
                + ", ".join(report.libraries))
        raise KernelError(f"the engine's kernels did not load on this {isa.level} CPU: {what}",
                             code="engine_kernels_missing", where=f"{isa.level} CPU", fix=_FIX)
    return report


def probe_in_process(isa: CpuIsa | None = None) -> KernelReport:
    """:data:`PROBE_SOURCE` run in this process, not a child: for a process whose CPU is
    emulated (``qemu-x86_64 -cpu Haswell-noTSX`` emulates only the process it starts; a child
    it spawns runs natively). A library built for instructions the CPU lacks kills *this*
    process with SIGILL, so only a harness that runs in a process of its own calls this; the
    appliance itself uses :func:`probe_kernels`. Raises :class:`KernelError` as it does
    (an exception in the probe is ``engine_kernels_crashed``)."""
    found = isa or cpu_isa()
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            # Our own constant source, the one the child runs (no input reaches it).
            exec(compile(PROBE_SOURCE, "<kernel probe>", "exec"), {"__name__": "__probe__"})  # noqa: S102
    except Exception as exc:  # noqa: BLE001 - any failure of the probe is a refusal
        raise KernelError(f"loading the engine's kernels failed: {type(exc).__name__}: {exc}",
                          code="engine_kernels_crashed", where=f"{found.level} CPU",
                          fix=_FIX) from None
    return _report(out.getvalue(), found)


ENGINE_PACKAGE = "vllm"
"""The policy package whose presence in ``preflight.packages`` turns the kernel rule on."""

_probed: list[KernelReport] = []


def probe_once() -> KernelReport:
    """:func:`probe_kernels`, run once per process (the CPU and the installed engine do not
    change under a running appliance); an error is not remembered."""
    if not _probed:
        _probed.append(probe_kernels())
    return _probed[0]


def check_kernels(packages: tuple[str, ...], probe: Callable[[], KernelReport] = probe_once,
                  ) -> tuple[KernelReport | None, list[Problem]]:
    """The preflight rule: when the policy requires the engine (``vllm`` in ``packages``)
    and it is installed (a missing one is the package rule's ``package_missing``), the CPU's
    instruction-set level and the kernel library vLLM loads on it, or the problem (CPU
    without AVX2, a library that crashes or registers no ops). ``(None, [])`` otherwise."""
    if ENGINE_PACKAGE not in packages or importlib.util.find_spec(ENGINE_PACKAGE) is None:
        return None, []
    try:
        return probe(), []
    except KernelError as exc:
        return None, [Problem(exc.code, exc.where or "engine kernels", exc.message,
                              "vLLM CPU kernel dispatch, CpuPlatform.import_kernels",
                              exc.fix or "reinstall the engine stack")]


def main(argv: list[str] | None = None) -> int:
    """``python -m appliance.preflight.kernels [--json]``: 0 and the report, or 1 and the error."""
    args = sys.argv[1:] if argv is None else argv
    try:
        report = probe_kernels()
    except KernelError as exc:
        print(exc.diagnostics(), file=sys.stderr)
        return 1
    print(json.dumps(report.to_json()) if "--json" in args else report.render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
