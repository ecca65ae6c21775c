"""Structure of ``appliance.gateway`` (issue 11): no import cycles inside the package, and
one route table that the app answers exactly as declared."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "appliance" / "gateway"


def _modules(root: Path, name: str) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``root`` (package ``name``)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = [name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def import_graph(root: Path, name: str) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports, from the source (``ast``):
    every import counts, including ones under ``if TYPE_CHECKING:`` and inside functions.
    ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to
    ``pkg``."""
    modules = _modules(root, name)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[:len(anchor) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                           for a in node.names]
            edges.update(t for t in targets if t in modules and t != module)
        graph[module] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (``[a, b, ..., a]``) or ``None`` if the graph is a DAG."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path = [start]
        stack = [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def test_gateway_imports_form_a_dag() -> None:
    """Issue 11: ``chat.py`` and ``app.py`` imported each other (under TYPE_CHECKING)."""
    graph = import_graph(PACKAGE, "appliance.gateway")
    assert "appliance.gateway.app" in graph and graph["appliance.gateway.app"]
    assert find_cycle(graph) is None, find_cycle(graph)


def test_cycle_finder_sees_type_checking_and_function_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .b import B\n")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import A\nB = 1\n")
    (pkg / "c.py").write_text("def f():\n    import pkg.a\n")
    graph = import_graph(pkg, "pkg")
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub"] == {"pkg.sub.b"}
    assert graph["pkg.c"] == {"pkg.a"}
    assert find_cycle(graph) in (["pkg.a", "pkg.sub.b", "pkg.a"],
                                 ["pkg.sub.b", "pkg.a", "pkg.sub.b"])
    (pkg / "sub" / "b.py").write_text("B = 1\n")
    assert find_cycle(import_graph(pkg, "pkg")) is None


@pytest.mark.parametrize("cycle", [["x", "y", "x"], ["x", "x"]])
def test_find_cycle_small(cycle: list[str]) -> None:
    graph = {n: set() for n in cycle}
    for a, b in zip(cycle, cycle[1:], strict=False):
        graph[a].add(b)
    assert find_cycle(graph) == cycle
