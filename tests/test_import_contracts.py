"""The layering of ``appliance/`` (issue 20) holds: ``lint-imports`` (import-linter) checks
the contracts in ``pyproject.toml`` ``[tool.importlinter]`` (scanner never imports appliance;
the appliance layers; no import cycles between siblings) on this checkout. A second test
shows the same contract types fail on a package that breaks them, so a pass means something.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUN = ("import sys\nfrom importlinter.cli import lint_imports_command\n"
       "sys.argv = ['lint-imports', '--no-cache', *sys.argv[1:]]\nlint_imports_command()\n")


def _lint(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run([sys.executable, "-c", RUN, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_the_import_contracts_are_kept() -> None:
    proc = _lint(REPO)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout and "3 kept" in proc.stdout


def test_the_contract_types_catch_an_upward_import_and_a_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    for sub in ("low", "high", "a", "b"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "x.py").write_text("def f():\n    import pkg.high\n")  # upward, in a def
    (pkg / "a" / "m.py").write_text("from typing import TYPE_CHECKING\n"
                                    "if TYPE_CHECKING:\n    from pkg.b import m\n")
    (pkg / "b" / "m.py").write_text("from pkg.a import m\n")
    (tmp_path / "contracts.toml").write_text(
        '[tool.importlinter]\nroot_packages = ["pkg"]\n\n'
        '[[tool.importlinter.contracts]]\nname = "layers"\ntype = "layers"\n'
        'containers = ["pkg"]\nlayers = ["high", "low"]\n\n'
        '[[tool.importlinter.contracts]]\nname = "cycles"\ntype = "acyclic_siblings"\n'
        'ancestors = ["pkg"]\n')
    proc = _lint(tmp_path, str(tmp_path / "contracts.toml"))
    assert proc.returncode == 1, proc.stdout
    assert "layers BROKEN" in proc.stdout and "cycles BROKEN" in proc.stdout
