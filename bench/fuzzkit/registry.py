"""The registry of fuzzed formats: one row per format, its generator module and whether
its malicious-to-clean oracle applies on this tree. A new format is one generator module
plus one row here.

The YAML row judges malicious-to-clean only when the scanner's format registry has a YAML
config format (the YAML/Hydra analyser lands separately); until then YAML cases are
checked for crashes and hangs only, and ``judged`` says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scanner.scan.registry import BY_FORMAT

from . import pickles, safetensors, tars, yamls, zips
from .draw import Draw
from .oracle import Case


@dataclass(frozen=True)
class Fuzzer:
    name: str
    generate: Callable[[Draw], Case]
    judged: str | None  # None: malicious-to-clean is judged; else why it is not


def yaml_format() -> str | None:
    """The scanner's YAML config format, if its registry declares one."""
    for fmt in BY_FORMAT:
        if "yaml" in str(fmt).lower() or "hydra" in str(fmt).lower():
            return str(fmt)
    return None


_NO_YAML = None if yaml_format() else (
    "the scanner's registry has no YAML config format: YAML is checked for crashes and "
    "hangs only")

FORMATS: dict[str, Fuzzer] = {f.name: f for f in (
    Fuzzer("pickle", pickles.generate, None),
    Fuzzer("safetensors", safetensors.generate, None),
    Fuzzer("zip", zips.generate, None),
    Fuzzer("tar", tars.generate, None),
    Fuzzer("yaml", yamls.generate, _NO_YAML),
)}
