"""The scanner's layout (issue 10, "Layout"): layers, no import cycles, and a new format is
one module plus one registry line.

The import graph is read from the source with ``ast`` (nothing is imported to build it):
every ``import``/``from ... import`` anywhere in a module, function-level imports included,
except those under ``if TYPE_CHECKING:`` (they never run). ``from pkg import name`` is an
edge to ``pkg.name`` when that is a module, else to ``pkg``.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "scanner"
LAYERS = {"core": 0, "formats": 1, "scan": 2}  # a layer imports only layers at or below it


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    out: set[str] = set()
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and _type_checking_only(node):
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module if is_package else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.add(full if full in MODULES else base)
        todo.extend(ast.iter_child_nodes(node))
    return out


def import_graph() -> dict[str, set[str]]:
    """scanner module -> the scanner modules (and other top-level packages) it imports."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[name] = _imports(tree, name, path.name == "__init__.py")
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_the_scanner_import_graph_is_a_dag() -> None:
    cycle = _cycle(import_graph())
    assert cycle is None, f"import cycle: {' -> '.join(cycle or [])}"


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "os"}, "b": set()}) is None


def test_scanner_never_imports_appliance() -> None:
    offenders = {m: sorted(i for i in deps if i.split(".")[0] == "appliance")
                 for m, deps in import_graph().items()}
    assert {m: d for m, d in offenders.items() if d} == {}


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.get(parts[1]) if len(parts) > 1 else None


def test_layers_import_only_downwards() -> None:
    """core imports no other scanner layer; formats import core only; scan imports both;
    nothing below the public modules (api, cli, report) imports them."""
    bad = []
    for module, deps in import_graph().items():
        mine = _layer(module)
        if mine is None:
            continue
        for dep in deps:
            if not dep.startswith("scanner"):
                continue
            theirs = _layer(dep)
            if theirs is None and dep != "scanner":
                bad.append(f"{module} -> {dep} (public layer)")
            elif theirs is not None and theirs > mine:
                bad.append(f"{module} -> {dep}")
    assert bad == []


def test_every_scanner_module_imports() -> None:
    for name in MODULES:
        if name.endswith("__main__"):
            continue
        importlib.import_module(name)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("scanner.")))
def test_no_flat_underscore_modules_left(module: str) -> None:
    """Private modules live in layer folders now (scanner/_x.py is gone); only the report
    writers keep their underscore names."""
    leaf = module.rsplit(".", 1)[-1]
    assert not leaf.startswith("_") or module.startswith("scanner.report.") or leaf in (
        "__main__",)
