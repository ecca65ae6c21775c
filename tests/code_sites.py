"""Find every error-code literal in the source with ``ast`` (for test_error_codes.py).

A *code site* is a string literal that becomes an error code:

- the ``code`` argument (keyword, or positional at the ``code`` parameter's index) of a call
  to a class or function that takes a ``code`` parameter (``GatewayError(400, "x", …)``,
  ``GatewayError.of("x", …)``: a classmethod constructor ``of`` belongs to its class,
  ``store_error(msg, "x", …)``, ``Problem("x", …)``, ``Diagnostic("x", …)``), and of any
  call given ``code=`` / ``*_code=`` as a keyword; every literal inside the expression counts
  (``"a" if ok else "b"``);
- a class attribute ``code = "x"`` (the default of an error class);
- the default value of a ``code`` parameter (``def _bad(…, code="invalid_parameter")``).

Each site is attributed to the error class it ends up in (``GatewayError``, ``StoreError``
…): directly, or through a helper whose ``code`` parameter is passed on to a class
(followed to a fixed point). Codes built with an f-string are reported as dynamic.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("appliance", "scanner")


@dataclass(frozen=True)
class Site:
    """One code literal: ``target`` is the callable (or class) it is passed to."""

    code: str | None  # None: built at run time (f-string); ``expr`` has its source
    target: str
    path: str
    line: int
    expr: str = ""


def _is_code_param(name: str) -> bool:
    return name == "code" or name.endswith("_code")


def _owner_of(func: ast.expr) -> str | None:
    """``Cls`` for a call of the classmethod constructor ``Cls.of(...)``, else ``None``."""
    if (isinstance(func, ast.Attribute) and func.attr == "of"
            and isinstance(func.value, ast.Name)):
        return func.value.id
    return None


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> list[str]:
    names = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    return names[1:] if method and names and names[0] in ("self", "cls") else names


def _dataclass_fields(cls: ast.ClassDef) -> list[str]:
    return [s.target.id for s in cls.body
            if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]


class _Module:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.rel = str(path.relative_to(REPO))
        self.tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        self.defined = {n.name for n in ast.walk(self.tree)
                        if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}
        self.imports: dict[str, tuple[str, str]] = {}  # local name -> (module rel, name)
        package = self.rel.rsplit("/", 1)[0].replace("/", ".")
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = (base, alias.name)


def _module_file(dotted: str) -> str | None:
    path = REPO / dotted.replace(".", "/")
    for cand in (path.with_suffix(".py"), path / "__init__.py"):
        if cand.is_file():
            return str(cand.relative_to(REPO))
    return None


def _modules() -> list[_Module]:
    return [_Module(p) for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))]


class Index:
    """Callables that take a code, their parameter positions, classes and bases. Names are
    qualified ``path:name`` (a call is resolved in its module, then through its imports,
    then by a unique name anywhere)."""

    def __init__(self, modules: list[_Module]) -> None:
        self.modules = {m.rel: m for m in modules}
        self.by_name: dict[str, set[str]] = {}
        for mod in modules:
            for name in mod.defined:
                self.by_name.setdefault(name, set()).add(f"{mod.rel}:{name}")
        self.positions: dict[str, dict[str, int]] = {}  # callable -> {param: index}
        self.bases: dict[str, list[str]] = {}
        self.forwards: dict[str, set[str]] = {}  # helper -> callables its code goes to
        self.defaults: list[Site] = []
        self._constants: dict[str, dict[str, list[ast.expr]]] = {}
        for mod in modules:
            for node in ast.walk(mod.tree):
                if isinstance(node, ast.ClassDef):
                    self._class(mod, node)
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self._function(mod, node)

    def module_constants(self, mod: _Module) -> dict[str, list[ast.expr]]:
        if mod.rel not in self._constants:
            self._constants[mod.rel] = _assignments(mod.tree)
        return self._constants[mod.rel]

    def resolve(self, mod: _Module, name: str, depth: int = 0) -> str | None:
        """Qualified name of ``name`` as seen from ``mod``; ``None`` if not in the source."""
        if name in mod.defined:
            return f"{mod.rel}:{name}"
        if name in mod.imports and depth < 8:
            dotted, real = mod.imports[name]
            target = _module_file(dotted)
            if target in self.modules:
                return self.resolve(self.modules[target], real, depth + 1)
        found = self.by_name.get(name, set())
        return next(iter(found)) if len(found) == 1 else None

    def _take(self, qual: str, params: list[str]) -> None:
        found = {p: i for i, p in enumerate(params) if _is_code_param(p)}
        if found:
            self.positions.setdefault(qual, {}).update(found)

    def _class(self, mod: _Module, node: ast.ClassDef) -> None:
        qual = f"{mod.rel}:{node.name}"
        self.bases[qual] = [q for q in (self.resolve(mod, b) for b in
                                        (_name(x) for x in node.bases) if b) if q]
        for stmt in node.body:
            if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], ast.Name)
                    and stmt.targets[0].id == "code"
                    and isinstance(stmt.value, ast.Constant)
                    and isinstance(stmt.value.value, str)):
                self.defaults.append(Site(stmt.value.value, qual, mod.rel, stmt.lineno))
            if isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__":
                self._take(qual, _params(stmt, method=True))
        if any(_name(d.func if isinstance(d, ast.Call) else d) == "dataclass"
               for d in node.decorator_list):
            self._take(qual, _dataclass_fields(node))

    def _function(self, mod: _Module, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if fn.name == "__init__":
            return
        qual = f"{mod.rel}:{fn.name}"
        params = _params(fn, method=True)
        self._take(qual, params)
        args = fn.args.posonlyargs + fn.args.args
        defaults = fn.args.defaults
        for arg, default in zip(args[len(args) - len(defaults):], defaults, strict=True):
            if (_is_code_param(arg.arg) and isinstance(default, ast.Constant)
                    and isinstance(default.value, str)):
                self.defaults.append(Site(default.value, qual, mod.rel, default.lineno))
        code_params = {p for p in params if _is_code_param(p)}
        if not code_params:
            return
        for call in ast.walk(fn):
            if isinstance(call, ast.Call) and (name := _owner_of(call.func) or _name(call.func)):
                exprs = [kw.value for kw in call.keywords if kw.arg and _is_code_param(kw.arg)]
                exprs += list(call.args)
                target = self.resolve(mod, name)
                if target and any(isinstance(e, ast.Name) and e.id in code_params
                                  for e in exprs):
                    self.forwards.setdefault(qual, set()).add(target)

    def classes_of(self, target: str) -> set[str]:
        """The classes a code passed to ``target`` ends up in (``target`` itself for a
        class; followed through helpers)."""
        seen, todo, out = set(), [target], set()
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in self.bases:
                out.add(name)
            todo.extend(self.forwards.get(name, ()))
        return out

    def lineage(self, cls: str) -> list[str]:
        """``cls`` and its base classes found in the source, nearest first."""
        out: list[str] = []
        todo = [cls]
        while todo:
            name = todo.pop(0)
            if name not in out:
                out.append(name)
                todo.extend(self.bases.get(name, ()))
        return out


def _assignments(scope: ast.AST) -> dict[str, list[ast.expr]]:
    """``name -> [assigned values]`` for plain ``name = value`` statements directly in
    ``scope`` (a module or a function, not nested functions)."""
    out: dict[str, list[ast.expr]] = {}
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Assign):
            for tgt in node.targets:
                if isinstance(tgt, ast.Name):
                    out.setdefault(tgt.id, []).append(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and node.value is not None:
            out.setdefault(node.target.id, []).append(node.value)
        todo.extend(ast.iter_child_nodes(node))
    return out


class _Scope:
    """Where a code expression is evaluated: the module and the enclosing function."""

    def __init__(self, index: Index, mod: _Module, local: dict[str, list[ast.expr]]) -> None:
        self.index = index
        self.mod = mod
        self.local = local

    def constant(self, name: str, depth: int = 0) -> list[ast.expr] | None:
        """Values assigned to ``name`` locally, at module level, or in the module it is
        imported from."""
        if name in self.local:
            return self.local[name]
        top = self.index.module_constants(self.mod)
        if name in top:
            return top[name]
        if name in self.mod.imports and depth < 8:
            dotted, real = self.mod.imports[name]
            target = _module_file(dotted)
            if target in self.index.modules:
                other = _Scope(self.index, self.index.modules[target], {})
                return other.constant(real, depth + 1)
        return None


def _literals(expr: ast.expr, scope: _Scope, target: str, out: list[Site],
              depth: int = 0) -> None:
    mod = scope.mod
    if depth > 6:
        return
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        out.append(Site(expr.value, target, mod.rel, expr.lineno))
    elif isinstance(expr, ast.JoinedStr):
        out.append(Site(None, target, mod.rel, expr.lineno, ast.unparse(expr)))
    elif isinstance(expr, ast.IfExp):
        _literals(expr.body, scope, target, out, depth + 1)
        _literals(expr.orelse, scope, target, out, depth + 1)
    elif isinstance(expr, ast.BoolOp):
        for value in expr.values:
            _literals(value, scope, target, out, depth + 1)
    elif isinstance(expr, ast.Dict):
        for value in expr.values:
            _literals(value, scope, target, out, depth + 1)
    elif isinstance(expr, ast.Subscript):
        _literals(expr.value, scope, target, out, depth + 1)
    elif (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)
          and expr.func.attr == "get"):
        _literals(expr.func.value, scope, target, out, depth + 1)
        for arg in expr.args[1:]:
            _literals(arg, scope, target, out, depth + 1)
    elif isinstance(expr, ast.Name) and _is_code_param(expr.id) is False:
        for value in scope.constant(expr.id) or ():
            _literals(value, scope, target, out, depth + 1)
    elif isinstance(expr, ast.Name):
        for value in scope.local.get(expr.id, ()):
            _literals(value, scope, target, out, depth + 1)


def _calls(tree: ast.AST) -> list[tuple[ast.Call, ast.AST]]:
    """Every call with its innermost enclosing function (or the module)."""
    out: list[tuple[ast.Call, ast.AST]] = []
    todo: list[tuple[ast.AST, ast.AST]] = [(tree, tree)]
    while todo:
        node, scope = todo.pop()
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                else scope
            if isinstance(child, ast.Call):
                out.append((child, inner))
            todo.append((child, inner))
    return out


def code_sites() -> tuple[Index, list[Site]]:
    """The index and every code site in ``appliance/`` and ``scanner/``."""
    modules = _modules()
    index = Index(modules)
    sites = list(index.defaults)
    local: dict[int, dict[str, list[ast.expr]]] = {}
    for mod in modules:
        for call, fn in _calls(mod.tree):
            owner = _owner_of(call.func)
            if not (name := owner or _name(call.func)):
                continue
            target = index.resolve(mod, name) or f"?:{name}"
            positions = index.positions.get(target, {})
            if owner is not None:  # Cls.of(...): the code sits at ``of``'s own code parameter
                positions = index.positions.get(target.rpartition(":")[0] + ":of", {})
            exprs = [kw.value for kw in call.keywords if kw.arg and _is_code_param(kw.arg)]
            for param, pos in positions.items():
                if pos < len(call.args) and not any(kw.arg == param for kw in call.keywords):
                    exprs.append(call.args[pos])
            if fn is not mod.tree and id(fn) not in local:
                local[id(fn)] = _assignments(fn)
            scope = _Scope(index, mod, local.get(id(fn), {}))
            for expr in exprs:
                _literals(expr, scope, target, sites)
    return index, sites
