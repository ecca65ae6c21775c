"""Build step: ship ``policies/`` (the source of truth, kept at the top level) inside the
wheel as ``appliance/data/`` so every command works from a plain wheel install in any
working directory (``appliance.resources`` finds it). Everything else is in pyproject.toml."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

POLICIES = Path(__file__).resolve().parent / "policies"
SHIPPED = ("*.toml", "*.json", "*.yml")


class BuildPyWithPolicies(build_py):  # type: ignore[misc]
    """``build_py`` plus a copy of ``policies/*.toml|*.json|*.yml`` to ``appliance/data/``."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "appliance" / "data"
        target.mkdir(parents=True, exist_ok=True)
        for pattern in SHIPPED:
            for source in sorted(POLICIES.glob(pattern)):
                shutil.copyfile(source, target / source.name)


setup(cmdclass={"build_py": BuildPyWithPolicies})
