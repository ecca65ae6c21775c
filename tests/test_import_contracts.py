"""The layering of ``appliance/`` (issue 20) and ``scanner/`` holds: ``lint-imports``
(import-linter) checks the contracts in ``pyproject.toml`` ``[tool.importlinter]`` (scanner
never imports appliance; the appliance, gateway and scanner layers; appliance uses the
scanner only through its public modules; no import cycles between siblings) on this
checkout. A second test shows the same contract types fail on a package that breaks them,
so a pass means something; a third that the layer contracts name every package (issue 32:
``audit/`` and ``convert/`` were in none).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
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
    assert "0 broken" in proc.stdout and "7 kept" in proc.stdout


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
    (pkg / "low" / "_inner.py").write_text("")
    (pkg / "high" / "y.py").write_text("from pkg.low import _inner\n")  # past the surface
    (tmp_path / "contracts.toml").write_text(
        '[tool.importlinter]\nroot_packages = ["pkg"]\n\n'
        '[[tool.importlinter.contracts]]\nname = "layers"\ntype = "layers"\n'
        'containers = ["pkg"]\nlayers = ["high", "low"]\n\n'
        '[[tool.importlinter.contracts]]\nname = "cycles"\ntype = "acyclic_siblings"\n'
        'ancestors = ["pkg"]\n\n'
        '[[tool.importlinter.contracts]]\nname = "surface"\ntype = "forbidden"\n'
        'source_modules = ["pkg.high"]\nforbidden_modules = ["pkg.low._inner"]\n'
        'allow_indirect_imports = "True"\n')
    proc = _lint(tmp_path, str(tmp_path / "contracts.toml"))
    assert proc.returncode == 1, proc.stdout
    assert "layers BROKEN" in proc.stdout and "cycles BROKEN" in proc.stdout
    assert "surface BROKEN" in proc.stdout


def _contract(contract_id: str) -> dict[str, object]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    found = [c for c in config["contracts"] if c.get("id") == contract_id]
    assert len(found) == 1, contract_id
    return found[0]


def _named(contract_id: str) -> set[str]:
    layers = _contract(contract_id)["layers"]
    assert isinstance(layers, list)
    return {name.strip() for layer in layers for name in layer.replace(":", "|").split("|")}


def _children(folder: Path) -> set[str]:
    """The modules and packages directly in ``folder`` (``__init__`` excluded)."""
    return {p.stem for p in folder.glob("*.py") if p.stem != "__init__"} | {
        p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}


def test_the_layer_contracts_name_every_package_and_module() -> None:
    """Each module and package of ``appliance/``, ``appliance/gateway/`` and ``scanner/`` is
    in its layer contract, or in the short list of those deliberately in none (a layer
    contract says nothing about a module it does not name, so a new package would
    otherwise be unchecked)."""
    outside = {
        "appliance-layers": set(),
        # GatewaySettings: read by every layer, holds the settings types of the lower ones
        "gateway-layers": {"settings"},
        "scanner-layers": set(),
    }
    folders = {"appliance-layers": REPO / "appliance",
               "gateway-layers": REPO / "appliance" / "gateway",
               "scanner-layers": REPO / "scanner"}
    for contract_id, folder in folders.items():
        missing = _children(folder) - _named(contract_id) - outside[contract_id]
        assert not missing, f"{contract_id} names none of {sorted(missing)}"
        stale = _named(contract_id) - _children(folder)
        assert not stale, f"{contract_id} names {sorted(stale)}, which do not exist"


def test_appliance_reaches_the_scanner_only_through_its_public_modules() -> None:
    """The forbidden contract lists every scanner package that is not public, so a new
    scanner layer is closed to ``appliance`` until it is named public here."""
    contract = _contract("scanner-public-surface")
    public = {"api", "readers", "diagnostic", "cli", "__main__"}
    forbidden = contract["forbidden_modules"]
    assert isinstance(forbidden, list)
    closed = {name.removeprefix("scanner.") for name in forbidden}
    assert closed == _children(REPO / "scanner") - public
