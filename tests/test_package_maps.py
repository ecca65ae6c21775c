"""The package maps name every package (issue 32: ``audit/`` and ``convert/`` were missing
from ``appliance/__init__.py``, ``appliance/error_codes.py`` and ``docs/development.md``).

* ``appliance/__init__.py``'s layout names each package of ``appliance/`` (as ``name/``)
  and each top-level module (as ``name``);
* ``docs/development.md`` names each package of ``appliance/`` and each gateway subpackage
  (as ``name/`` / ``gateway/name/``);
* ``appliance/gateway/__init__.py``'s layout names each gateway subpackage and module, and
  each gateway subpackage's ``__init__`` maps every module in it;
* ``appliance/error_codes.py``'s table has a row for every registry in ``REGISTRIES``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
APPLIANCE = REPO / "appliance"
GATEWAY = APPLIANCE / "gateway"


def _packages(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if (p / "__init__.py").is_file())


def _modules(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")


def _docstring(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text()))
    assert doc, f"{path} has no docstring"
    return doc


def _map_lines(doc: str) -> set[str]:
    """First words of the indented lines of a docstring's literal blocks (``name  what``)."""
    return {m.group(1) for m in re.finditer(r"^ {4}(\S+)\s", doc, re.M)}


def test_the_appliance_map_names_every_package_and_module() -> None:
    named = _map_lines(_docstring(APPLIANCE / "__init__.py"))
    doc = _docstring(APPLIANCE / "__init__.py")
    for package in _packages(APPLIANCE):
        assert f"{package}/" in named, f"appliance/__init__.py does not map {package}/"
    for module in _modules(APPLIANCE):
        assert module in named or re.search(rf"\b{module}:", doc), (
            f"appliance/__init__.py does not map {module}")


def test_development_doc_names_every_package() -> None:
    text = (REPO / "docs" / "development.md").read_text()
    for package in _packages(APPLIANCE):
        assert f"`{package}/`" in text, f"docs/development.md does not name {package}/"
    for package in _packages(GATEWAY):
        assert f"`gateway/{package}/`" in text, (
            f"docs/development.md does not name gateway/{package}/")


def test_the_gateway_map_names_every_subpackage_and_module() -> None:
    named = _map_lines(_docstring(GATEWAY / "__init__.py"))
    for package in _packages(GATEWAY):
        assert f"{package}/" in named, f"appliance/gateway/__init__.py does not map {package}/"
    for module in _modules(GATEWAY):
        assert module in named, f"appliance/gateway/__init__.py does not map {module}"


@pytest.mark.parametrize("package", _packages(GATEWAY))
def test_each_gateway_subpackage_maps_its_modules(package: str) -> None:
    named = _map_lines(_docstring(GATEWAY / package / "__init__.py"))
    missing = set(_modules(GATEWAY / package)) - named
    assert not missing, f"appliance/gateway/{package}/__init__.py does not map {missing}"


def test_the_error_code_table_names_every_registry() -> None:
    """Each registry in ``REGISTRIES`` has its row (first column: its title) in the table."""
    from appliance.error_codes import REGISTRIES

    rows = {m.group(1) for m in re.finditer(r"^``([^`]+)``\s", _docstring(
        APPLIANCE / "error_codes.py"), re.M)}
    missing = {registry.title for registry in REGISTRIES} - rows
    assert not missing, f"appliance/error_codes.py's table has no row for {sorted(missing)}"


def test_the_gateway_top_level_holds_at_most_ten_modules() -> None:
    """Issue 32: 36 modules side by side were not a layout; the rest lives in subpackages."""
    top = sorted(p.name for p in GATEWAY.glob("*.py"))
    assert len(top) <= 10, top
