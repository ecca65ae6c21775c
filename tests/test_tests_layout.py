"""``tests/`` mirrors the source (issue 32): the tests of ``appliance/<package>/`` live in
``tests/<package>/``, the scanner's in ``tests/scanner/<layer>/``, tests of ``appliance``'s
top-level modules (``errors``, ``error_codes``, ``atomic_file``, ``owasp``) and repo-wide
checks at the top of ``tests/``; the other folders are named below with what they hold. A
catch-all folder (the old ``tests/appliance/``) or a folder named for no package fails here.

Test folders have no ``__init__.py``, so pytest imports each test module by its file name
(``prepend`` import mode): two test files with one name in two folders would break
collection of the whole suite, and this test names them first."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
# Folders of tests/ that are not named for a package, and what each holds.
NOT_PACKAGES = {
    "bench": "the benchmark scripts' own logic (bench/)",
    "deploy": "deployment: bundle, systemd units, container (systemd/, Dockerfile, scripts/)",
    "e2e": "the whole appliance with the real CPU engine",
    "fixtures": "model artifacts under test (never collected)",
    "monitoring": "the shipped Prometheus rules and dashboard",
}
# appliance packages whose behaviour is tested only through other folders' tests.
TESTED_ELSEWHERE = {
    "builtin": "the built-in model and demo: tests/e2e (real engine) and tests/deploy",
}


def _packages(root: Path) -> set[str]:
    return {p.parent.name for p in root.glob("*/__init__.py")}


def test_every_test_folder_is_a_package_or_named() -> None:
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    packages = _packages(REPO / "appliance") | {"scanner"}
    assert not (TESTS / "appliance").exists(), "tests/appliance/ is split by package"
    assert folders - packages - set(NOT_PACKAGES) == set()


def test_every_package_has_its_test_folder() -> None:
    missing = _packages(REPO / "appliance") - set(TESTED_ELSEWHERE)
    missing = {name for name in missing if not (TESTS / name).is_dir()}
    assert missing == set(), f"add tests/<package>/ for {sorted(missing)}"
    layers = {name for name in _packages(REPO / "scanner")
              if not (TESTS / "scanner" / name).is_dir()}
    assert layers == set(), f"add tests/scanner/<layer>/ for {sorted(layers)}"


def test_test_module_names_are_unique() -> None:
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        parts = path.relative_to(TESTS).parts
        if "fixtures" in parts or path.name == "conftest.py":
            continue
        by_name[path.stem].append(str(path.relative_to(REPO)))
    assert {name: paths for name, paths in by_name.items() if len(paths) > 1} == {}
