"""The scanner's layout (issue 10, "Layout"): layers, no import cycles, and a new format is
one module plus one registry line.

The import graph is read from the source with ``ast`` (nothing is imported to build it):
every ``import``/``from ... import`` anywhere in a module, function-level imports included,
except those under ``if TYPE_CHECKING:`` (they never run). ``from pkg import name`` is an
edge to ``pkg.name`` when that is a module, else to ``pkg``.
"""

from __future__ import annotations

import ast
import functools
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


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """scanner module -> the scanner modules (and other top-level packages) it imports."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[name] = _imports(tree, name, path.name == "__init__.py")
        graph[name] |= _imported_by_name(tree)
    return graph


def _imported_by_name(tree: ast.Module) -> set[str]:
    """The registry imports format modules by name (``MODULES = ("scanner.formats.x", ...)``):
    those are edges too."""
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "MODULES" for t in targets):
                value = node.value
                if isinstance(value, ast.Tuple):
                    return {e.value for e in value.elts if isinstance(e, ast.Constant)
                            and isinstance(e.value, str) and e.value in MODULES}
    return set()


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


def test_the_registry_edges_are_in_the_graph() -> None:
    from scanner.scan.registry import MODULES as REGISTERED

    assert set(REGISTERED) <= import_graph()["scanner.scan.registry"]


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


# -- the format registry: a new format is one module plus one registry line ---------------

def _declares_specs(path: Path) -> bool:
    tree = ast.parse(path.read_text(), str(path))
    return any(isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
        isinstance(t, ast.Name) and t.id == "SPECS"
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))
        for node in tree.body)


def test_every_module_declaring_specs_is_registered_and_nothing_else() -> None:
    from scanner.scan.registry import MODULES

    declaring = {m for m, p in MODULES_BY_LAYER("formats") if _declares_specs(p)}
    assert declaring == set(MODULES)
    assert len(MODULES) == len(set(MODULES))


def MODULES_BY_LAYER(layer: str) -> list[tuple[str, Path]]:  # noqa: N802 - reads as a table
    return [(m, p) for m, p in MODULES.items() if m.startswith(f"scanner.{layer}.")]


def test_registry_specs_are_unique_and_their_analyzers_resolve() -> None:
    from scanner.core.spec import Format
    from scanner.scan.dispatch import analyzer_for
    from scanner.scan.registry import BY_FORMAT, SPECS

    assert len(BY_FORMAT) == len(SPECS)
    for spec in SPECS:
        assert isinstance(spec.format, Format) and spec.format is Format(str(spec.format))
        assert callable(analyzer_for(spec.format))
        assert spec.magic or spec.probes or spec.format in ("text", "unknown", "empty"), (
            f"{spec.format}: nothing can sniff it")


def test_every_magic_number_sniffs_as_its_format() -> None:
    from scanner.core.model import BytesBlob
    from scanner.scan.registry import SPECS
    from scanner.scan.sniff import sniff

    for spec in SPECS:
        for magic in spec.magic:
            assert sniff(BytesBlob("blob", magic + b"\x00" * 600)) == spec.format, magic


def test_magic_constants_are_defined_once() -> None:
    """Each registered magic number is a bytes literal in exactly one scanner module (the
    format's own); the sniffer and the analyzer share it."""
    from scanner.scan.registry import SPECS

    literals = {m: {n.value for n in ast.walk(ast.parse(p.read_text()))
                    if isinstance(n, ast.Constant) and isinstance(n.value, bytes)}
                for m, p in MODULES.items()}
    for spec in SPECS:
        for magic in spec.magic:
            holders = [m for m, found in literals.items() if magic in found]
            assert len(holders) <= 1, (magic, holders)


# What the scan layer may import from the format layer: the registry reads format modules
# by name; the folder rules use three helpers (strict JSON of sharded indexes, the static
# Python analysis of auto_map classes, the Keras config analysis of the JSON files Keras
# loads from a model folder by name).
_SCAN_MAY_IMPORT = {
    "scanner.scan.folder": {"scanner.formats.text", "scanner.formats.pysource",
                            "scanner.formats.keras"},
}


@pytest.mark.parametrize("module", ["scanner.scan.sniff", "scanner.scan.dispatch",
                                    "scanner.scan.folder", "scanner.scan.walk",
                                    "scanner.scan.memo", "scanner.scan.parallel"])
def test_the_scan_layer_names_no_format(module: str) -> None:
    """Sniffer, dispatcher and folder rules read the registry only: they import no format
    module (beyond the three folder helpers) and never spell a format's name."""
    deps = import_graph()[module]
    formats = {d for d in deps if d.startswith("scanner.formats")}
    assert formats <= _SCAN_MAY_IMPORT.get(module, set())
    tree = ast.parse(MODULES[module].read_text())
    named = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Name) and n.func.id == "Format"]
    assert named == []


DEMO_FORMAT = '''
from scanner.core.model import Severity, Verdict
from scanner.core.rules import rule
from scanner.core.spec import Format, FormatSpec, Probe

DEMO_SEEN = rule("demo.seen", Verdict.POLICY, Severity.LOW, "demo format", "none")
MAGIC = b"DEMO\\x00\\x01"
DEMO, DEMO_TEXT = Format("demo"), Format("demo-text")


def analyze_demo(ctx, blob):
    return [DEMO_SEEN.finding(blob.name, "demo content", blob.read_at(0, 6).hex())]


SPECS = (
    FormatSpec(DEMO, analyze_demo, order=20, magic=(MAGIC,), claims=(".demo",)),
    FormatSpec(DEMO_TEXT, analyze_demo, binary=False,
               probes=(Probe(205, lambda h: (h.text or "").startswith("demo:"), text=True),)),
)
'''

DEMO_RUN = r'''
import importlib.util, json, sys, types
demo = types.ModuleType("demo_format")
exec(sys.argv[1], demo.__dict__)
sys.modules["demo_format"] = demo
spec = importlib.util.find_spec("scanner.scan.registry")
source = spec.loader.get_source("scanner.scan.registry")
line = '    "scanner.formats.text",\n'
assert source.count(line) == 1
source = source.replace(line, line + '    "demo_format",\n')  # the one registry line
registry = importlib.util.module_from_spec(spec)
sys.modules["scanner.scan.registry"] = registry
exec(compile(source, spec.origin, "exec"), registry.__dict__)
from scanner.api import scan_paths
report = scan_paths([sys.argv[2]])
print(json.dumps(sorted((f.path, f.rule_id) for t in report.targets for f in t.findings)))
'''


def test_a_new_format_is_one_module_plus_one_registry_line(tmp_path: Path) -> None:
    """A format module written here (magic, a text probe, a claimed suffix) plus one line
    added to the registry's MODULES: the sniffer, the dispatcher and the folder rules all
    pick it up, in a fresh interpreter (nothing else edited)."""
    import json
    import subprocess
    import sys

    (tmp_path / "a.bin").write_bytes(b"DEMO\x00\x01" + b"\x00" * 32)
    (tmp_path / "b.txt").write_text("demo: hello\n")
    (tmp_path / "c.demo").write_text("plain text under the demo name\n")
    (tmp_path / "d.txt").write_text("plain text\n")
    out = subprocess.run([sys.executable, "-c", DEMO_RUN, DEMO_FORMAT, str(tmp_path)],
                         capture_output=True, text=True, timeout=120, check=True)
    found = {tuple(x) for x in json.loads(out.stdout)}
    assert ("a.bin", "demo.seen") in found  # magic -> dispatch to its analyzer
    assert ("b.txt", "demo.seen") in found  # text probe
    assert ("c.demo", "format.extension_mismatch") in found  # claimed suffix (folder rule)
    # plain text no format claims: not analysed, so not clean (and nothing else)
    assert {rule for path, rule in found if path == "d.txt"} == {"format.not_analysed"}
