"""What each expression of a parsed Jinja template can evaluate to, as a set of atoms, so
that item and attribute lookups are judged by every key they can take, not only by keys
written as literals.

Jinja's ``getitem`` falls back to ``getattr`` for a string key the object lacks, so
``(0 or cycler)[c]`` with ``c`` bound to ``'__init__'`` anywhere reaches Python internals
(CVE-2024-34359). A template binds names by ``{% for %}`` targets, ``{% set %}`` (and set
blocks, whose value is their rendered body), ``{% with %}``, macro parameters (defaults and
every call site's arguments), ``{% call %}`` bodies returned by ``caller()``,
``namespace(...)`` keywords and ``{% set ns.x = ... %}``, ``dict(k=...)`` keys,
``loop.cycle``/``loop.previtem``/recursive ``loop(...)``, and container updates
(``{% do d.update(...) %}``, ``l.append(x)``). ``Values`` collects all of them flow- and
scope-insensitively (a name's value is the union over every place it is bound, an
over-approximation: never fewer values than a render could produce) and iterates to a fixed
point; anything it cannot follow becomes ``COMPUTED`` or ``RUNTIME``, never a silent
"unknown is fine".

Atoms (shape of a value set, ``frozenset[Atom]``):

* ``str``: a known string;
* ``OTHER``: a value that is not a string (numbers, booleans, none, tests) - harmless as a
  key, since the ``getattr`` fallback only takes strings;
* ``RUNTIME``: derived from render-time data (``messages``, ``tools``, any name the template
  does not bind) - the template author cannot choose it;
* ``COMPUTED``: built while rendering from what the template itself holds (a filter or
  method over literals, a global object): the author can make it any string;
* ``GLOBAL``: a Jinja default global or context callable (``cycler``, ``namespace``,
  ``raise_exception`` ...) - an object whose attributes lead to module globals;
* ``NS``: a ``namespace(...)`` object (its attributes are looked up in ``ns_attrs``);
* ``Seq``: a literal container (list, tuple, dict: items, keys and values together).

Hand-written because it is the checker for the thing attacked: Jinja itself offers no
static evaluation, and the template is never compiled or rendered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

from jinja2 import nodes


class Seq(NamedTuple):
    """A container literal; ``items``: every element, key and value it can hold. (A
    NamedTuple: created at import for a fraction of a frozen dataclass.)"""

    items: frozenset[Atom]


class _Token:
    """A special atom (compared by identity)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


OTHER = _Token("<non-string>")
RUNTIME = _Token("<render data>")
COMPUTED = _Token("<computed>")
GLOBAL = _Token("<global object>")
NS = _Token("<namespace>")

Atom = str | Seq | _Token
Value = frozenset[Atom]

# Default globals of a Jinja environment plus callables transformers passes in the context.
GLOBAL_NAMES = frozenset({"cycler", "joiner", "lipsum", "namespace", "range", "dict",
                          "self", "raise_exception", "strftime_now", "loop", "caller",
                          "varargs", "kwargs"})
MAX_STRINGS = 64  # known strings kept per value before it widens to COMPUTED
MAX_DEPTH = 3  # container nesting kept
MAX_ROUNDS = 8  # fixed-point rounds before every still-changing name widens

_NUMERIC_FILTERS = frozenset({"length", "count", "int", "float", "abs", "round",
                              "wordcount", "filesizeformat"})
_PICK_FILTERS = frozenset({"first", "last", "random", "min", "max"})
_SEQ_FILTERS = frozenset({"list", "sort", "unique", "reverse", "batch", "slice", "select",
                          "reject", "selectattr", "rejectattr", "dictsort", "items",
                          "groupby"})
# Filters whose result is built from their input alone (their arguments only select,
# order or pad): render data in, render data out.
_INPUT_FILTERS = _SEQ_FILTERS | frozenset({
    "trim", "lower", "upper", "title", "capitalize", "striptags", "string", "e", "escape",
    "safe", "forceescape", "tojson", "indent", "wordwrap", "center", "urlencode"})
_KEPT_FILTERS = frozenset({"string", "safe", "e", "escape", "forceescape"})
# str methods whose result is a piece of the string they are called on, and those that
# return booleans or numbers.
_PIECE_METHODS = frozenset({"split", "rsplit", "strip", "lstrip", "rstrip", "lower",
                            "upper", "title", "capitalize", "splitlines", "partition",
                            "rpartition", "removeprefix", "removesuffix"})
# Methods that put their arguments into the container they are called on.
_MUTATORS = frozenset({"append", "extend", "insert", "update", "setdefault", "add"})
_PREDICATE_METHODS = frozenset({"startswith", "endswith", "isdigit", "isalpha", "isalnum",
                                "isspace", "islower", "isupper", "find", "rfind", "count",
                                "index", "rindex"})
_EMPTY: Value = frozenset()


def is_special(atom: Atom) -> bool:
    return isinstance(atom, _Token)


def strings(value: Value) -> list[str]:
    """The known strings in ``value``, sorted."""
    return sorted(a for a in value if isinstance(a, str))


def _elements(value: Value) -> Value:
    """What iterating (or indexing) something in ``value`` yields."""
    out: set[Atom] = set()
    for atom in value:
        if isinstance(atom, Seq):
            out |= atom.items
        elif atom is RUNTIME:
            out.add(RUNTIME)
        elif atom is OTHER:
            out.add(OTHER)
        elif isinstance(atom, str):
            out |= set(atom)  # the characters of a known string
        else:
            out.add(COMPUTED)
    return frozenset(out)


def _derived(*values: Value) -> Value:
    """A value computed from ``values`` by something not followed exactly: ``RUNTIME`` when
    render data flows in, ``COMPUTED`` when only template-held things do."""
    out: set[Atom] = set()
    for value in values:
        for atom in value:
            out.add(RUNTIME if atom is RUNTIME else OTHER if atom is OTHER else COMPUTED)
    if len(out) > 1:
        out.discard(OTHER)
    return frozenset(out or {OTHER})


def _cap(value: Value, depth: int = 0) -> Value:
    """Bound a value: too many strings or too deep containers widen to ``COMPUTED``."""
    out: set[Atom] = set()
    texts = 0
    for atom in value:
        if isinstance(atom, Seq):
            out.add(COMPUTED if depth >= MAX_DEPTH else Seq(_cap(atom.items, depth + 1)))
        else:
            texts += isinstance(atom, str)
            out.add(atom)
    if texts > MAX_STRINGS:
        out = {a for a in out if isinstance(a, Seq) or is_special(a)} | {COMPUTED}
    return frozenset(out)


def _concat(parts: list[Value], risky: Callable[[str], bool]) -> Value:
    """``a ~ b`` / rendered output: the product of the parts' strings, or derived."""
    if all(v and all(isinstance(a, str) or a is OTHER for a in v) for v in parts):
        results = {""}
        for value in parts:
            texts = [a if isinstance(a, str) else "" for a in value]
            results = {r + t for r in results for t in texts}
            if len(results) > MAX_STRINGS:
                return frozenset({COMPUTED})
        return frozenset(results)
    first = parts[0] if parts else _EMPTY
    if first and all(isinstance(a, str) and a and not risky(a) for a in first):
        return frozenset({OTHER})  # '<|' ~ role: the prefix rules out every refused name
    return _derived(*parts)


def _names(target: nodes.Node) -> set[str]:
    return {n.name for n in [target, *target.find_all(nodes.Name)] if isinstance(n, nodes.Name)}


def _open_names(tree: nodes.Template) -> set[str]:
    """Names a template binds that a read may still find holding the render context's
    value: every ``{% set %}`` target (the set may be skipped, or read before it runs), and
    ``for``/``with``/macro/call-block names read somewhere outside the scope binding them."""
    scoped: set[str] = set()
    assigned: set[str] = set()
    for binder in tree.find_all((nodes.For, nodes.With, nodes.Macro, nodes.CallBlock,
                                 nodes.Assign, nodes.AssignBlock)):
        if isinstance(binder, nodes.For):
            scoped |= _names(binder.target)
        elif isinstance(binder, nodes.With):
            scoped |= set().union(*(_names(t) for t in binder.targets))
        elif isinstance(binder, (nodes.Macro, nodes.CallBlock)):
            scoped |= {a.name for a in binder.args}
        elif isinstance(binder, (nodes.Assign, nodes.AssignBlock)):
            assigned |= _names(binder.target)
    found = set(assigned)
    stack: list[tuple[nodes.Node, frozenset[str]]] = [(tree, frozenset())]
    while stack:
        node, bound = stack.pop()
        inner: list[nodes.Node] = []
        if isinstance(node, nodes.For):
            stack.extend((n, bound) for n in [node.iter, *node.else_])
            inner, bound = [*node.body, *([node.test] if node.test else [])], \
                bound | _names(node.target) | {"loop"}
        elif isinstance(node, nodes.With):
            stack.extend((n, bound) for n in node.values)
            inner, bound = node.body, bound | set().union(*(_names(t) for t in node.targets))
        elif isinstance(node, (nodes.Macro, nodes.CallBlock)):
            stack.extend((n, bound) for n in node.defaults)
            if isinstance(node, nodes.CallBlock):
                stack.append((node.call, bound))
            inner, bound = node.body, bound | {a.name for a in node.args}
        elif isinstance(node, nodes.Name):
            if node.ctx == "load" and node.name in scoped and node.name not in bound:
                found.add(node.name)
        else:
            inner = list(node.iter_child_nodes())
        stack.extend((n, bound) for n in inner)
    return found


class Values:
    """Possible values of every expression of ``tree`` (see the module docstring)."""

    def __init__(self, tree: nodes.Template, risky: Callable[[str], bool]) -> None:
        """``risky(prefix)``: whether a string starting with ``prefix`` may be a name the
        caller refuses (a string built as known prefix ~ anything is otherwise harmless)."""
        self.tree = tree
        self.risky = risky
        self.env: dict[str, Value] = {}
        self.ns_attrs: dict[str, Value] = {}
        self.callers: Value = _EMPTY  # what ``caller()`` returns: call block bodies
        self.loop_items: Value = _EMPTY  # loop.previtem / nextitem: every for element
        self.macro_args: Value = _EMPTY  # varargs / kwargs: every macro call argument
        self.macros: dict[str, nodes.Macro] = {}  # by name, filled when solved
        self._memo: dict[int, Value] = {}  # id(node) -> value, cleared every round
        self._rendering: set[str] = set()  # macros whose body is being evaluated
        # Solved on the first question about anything but a constant: a template that
        # only ever looks up literal keys (most real ones) never pays the fixed point.
        self._solved = False

    # -- fixed point over every binding construct --------------------------------------
    def _solve(self) -> None:
        self.macros = {m.name: m for m in self.tree.find_all(nodes.Macro)}
        for name in _open_names(self.tree):  # may still hold the render context's value
            self.env[name] = frozenset({RUNTIME})
        for _ in range(MAX_ROUNDS):
            before = (dict(self.env), dict(self.ns_attrs), self.callers, self.loop_items,
                      self.macro_args)
            self._round()
            if before == (self.env, self.ns_attrs, self.callers, self.loop_items,
                          self.macro_args):
                self._memo.clear()
                return
        # Still growing (``set x = x ~ 'a'``): every string may be anything.
        self.env = {k: v | {COMPUTED} for k, v in self.env.items()}
        self.ns_attrs = {k: v | {COMPUTED} for k, v in self.ns_attrs.items()}
        self._memo.clear()

    def _bind(self, target: nodes.Node, value: Value) -> None:
        if isinstance(target, nodes.Name):
            self.env[target.name] = _cap(self.env.get(target.name, _EMPTY) | value)
        elif isinstance(target, nodes.NSRef):
            self.ns_attrs[target.attr] = _cap(self.ns_attrs.get(target.attr, _EMPTY) | value)
        elif isinstance(target, nodes.Tuple):
            # unpacking: each name takes any item of any container in ``value``; strings
            # are kept whole (an over-approximation of their characters)
            unpacked = frozenset(a for a in value if not isinstance(a, Seq)).union(
                *(a.items for a in value if isinstance(a, Seq)))
            for item in target.items:
                self._bind(item, unpacked)

    def _round(self) -> None:
        self._memo.clear()
        macros = self.macros
        caller_args: Value = _EMPTY
        for node in self.tree.find_all((nodes.Assign, nodes.AssignBlock, nodes.For,
                                        nodes.With, nodes.Macro, nodes.CallBlock,
                                        nodes.Call)):
            if isinstance(node, nodes.Assign):
                self._bind(node.target, self.value(node.node))
            elif isinstance(node, nodes.AssignBlock):
                body = self.body_value(node.body)
                self._bind(node.target, body if node.filter is None else _derived(body))
            elif isinstance(node, nodes.For):
                items = _elements(self.value(node.iter))
                if node.recursive:  # loop(children) iterates its argument
                    items |= _elements(self._call_args("loop"))
                self.loop_items = _cap(self.loop_items | items)
                self._bind(node.target, items)
            elif isinstance(node, nodes.With):
                for target, expr in zip(node.targets, node.values, strict=False):
                    self._bind(target, self.value(expr))
            elif isinstance(node, nodes.Macro):
                for param, default in zip(reversed(node.args), reversed(node.defaults),
                                          strict=False):
                    self._bind(param, self.value(default))
            elif isinstance(node, nodes.CallBlock):
                self.callers = _cap(self.callers | self.body_value(node.body))
                if node.args:  # caller(x): bound from every caller() call
                    caller_args = caller_args or self._call_args("caller")
                for param in node.args:
                    self._bind(param, caller_args)
            elif isinstance(node, nodes.Call):
                self._bind_call(node, macros)
        # A macro referred to other than by calling it (aliased, passed on) may be called
        # with anything: its parameters widen.
        called = {id(c.node) for c in self.tree.find_all(nodes.Call)}
        for name in self.tree.find_all(nodes.Name):
            if name.name in macros and id(name) not in called:
                for param in macros[name.name].args:
                    self._bind(param, frozenset({COMPUTED, RUNTIME}))

    def _call_args(self, callee: str) -> Value:
        out: set[Atom] = set()
        for call in self.tree.find_all(nodes.Call):
            if isinstance(call.node, nodes.Name) and call.node.name == callee:
                for arg in [*call.args, *(kw.value for kw in call.kwargs)]:
                    out |= self.value(arg)
                if call.dyn_args is not None or call.dyn_kwargs is not None:
                    out |= {COMPUTED, RUNTIME}
        return frozenset(out)

    def _bind_call(self, call: nodes.Call, macros: dict[str, nodes.Macro]) -> None:
        callee = call.node
        if isinstance(callee, nodes.Getattr) and callee.attr in _MUTATORS:
            # {% do d.update({...}) %}, l.append(x): the container now holds the arguments
            added = [self.value(a) for a in [*call.args, *(k.value for k in call.kwargs)]]
            held = frozenset({Seq(frozenset().union(*added, *(_elements(v) for v in added))
                                  | frozenset(k.key for k in call.kwargs))})
            if call.dyn_args is not None or call.dyn_kwargs is not None:
                held |= {Seq(frozenset({COMPUTED, RUNTIME}))}
            target = callee.node
            if isinstance(target, nodes.Getattr) and isinstance(target.node, nodes.Name):
                self.ns_attrs[target.attr] = _cap(self.ns_attrs.get(target.attr, _EMPTY)
                                                  | held)
            else:  # a context container stays render data as well
                self._bind(target, held | {RUNTIME})
        elif isinstance(callee, nodes.Name) and callee.name in macros:
            params = macros[callee.name].args
            args = [self.value(a) for a in call.args]
            self.macro_args = _cap(self.macro_args | frozenset().union(*args))
            for param, value in zip(params, args, strict=False):
                self._bind(param, value)
            for kw in call.kwargs:
                value = self.value(kw.value)
                self.macro_args = _cap(self.macro_args | value | {kw.key})
                for param in params:
                    if param.name == kw.key:
                        self._bind(param, value)
            if call.dyn_args is not None or call.dyn_kwargs is not None:
                for param in params:
                    self._bind(param, frozenset({COMPUTED, RUNTIME}))
        elif isinstance(callee, nodes.Name) and callee.name == "namespace":
            for kw in call.kwargs:
                self.ns_attrs[kw.key] = _cap(self.ns_attrs.get(kw.key, _EMPTY)
                                             | self.value(kw.value))
            if call.args or call.dyn_args is not None or call.dyn_kwargs is not None:
                self.ns_attrs["*"] = frozenset({COMPUTED, RUNTIME})

    # -- expressions -------------------------------------------------------------------
    def body_value(self, body: list[nodes.Node]) -> Value:
        """The rendered text of a statement list (set block, call block body)."""
        found = self._memo.get(id(body))
        if found is None:
            found = self._memo[id(body)] = self._body_value(body)
        return found

    def _body_value(self, body: list[nodes.Node]) -> Value:
        parts: list[Value] = []
        for stmt in body:
            if not isinstance(stmt, nodes.Output):
                return _derived(*(self.value(n) for n in stmt.find_all(nodes.Expr)),
                                frozenset({COMPUTED}))
            for node in stmt.nodes:
                parts.append(frozenset({node.data}) if isinstance(node, nodes.TemplateData)
                             else self.value(node))
        return _concat(parts, self.risky)

    def value(self, node: nodes.Node) -> Value:
        """The atoms ``node`` can evaluate to."""
        if isinstance(node, nodes.Const):
            return frozenset({node.value if isinstance(node.value, str) else OTHER})
        if not self._solved:
            self._solved = True
            self._solve()
        found = self._memo.get(id(node))
        if found is None:
            found = self._memo[id(node)] = _cap(frozenset(self._value(node)))
        return found

    def _value(self, node: nodes.Node) -> Iterator[Atom]:  # noqa: C901 - one case per node
        if isinstance(node, nodes.Const):
            yield node.value if isinstance(node.value, str) else OTHER
        elif isinstance(node, nodes.TemplateData):
            yield node.data
        elif isinstance(node, nodes.Name):
            if node.name in self.env:
                yield from self.env[node.name]
            elif node.name == "varargs" or node.name == "kwargs":
                yield Seq(self.macro_args)
            elif node.name in GLOBAL_NAMES:
                yield GLOBAL
            else:
                yield RUNTIME
        elif isinstance(node, (nodes.List, nodes.Tuple)):
            yield Seq(frozenset().union(*(self.value(i) for i in node.items)))
        elif isinstance(node, nodes.Dict):
            yield Seq(frozenset().union(*(self.value(p.key) | self.value(p.value)
                                          for p in node.items)))
        elif isinstance(node, nodes.Concat):
            yield from _concat([self.value(n) for n in node.nodes], self.risky)
        elif isinstance(node, nodes.Add):
            left, right = self.value(node.left), self.value(node.right)
            if left <= {OTHER} and right <= {OTHER}:
                yield OTHER
            elif any(isinstance(a, Seq) for a in left | right):
                yield Seq(_elements(left) | _elements(right))
            else:
                yield from _concat([left, right], self.risky)
        elif isinstance(node, (nodes.Mul, nodes.Mod)):
            left, right = self.value(node.left), self.value(node.right)
            yield from (OTHER,) if left <= {OTHER} else _derived(left, right)
        elif isinstance(node, (nodes.BinExpr, nodes.UnaryExpr, nodes.Compare, nodes.Test)):
            if isinstance(node, (nodes.And, nodes.Or)):  # ``a or b`` is a or b
                yield from self.value(node.left) | self.value(node.right)
            else:
                yield OTHER
        elif isinstance(node, nodes.CondExpr):
            yield from self.value(node.expr1)
            yield from (self.value(node.expr2) if node.expr2 is not None else (OTHER,))
        elif isinstance(node, nodes.Getattr):
            if isinstance(node.node, nodes.Name) and node.node.name == "loop" \
                    and "loop" not in self.env:
                # loop.index0, loop.length ... are numbers; previtem/nextitem elements
                yield from (self.loop_items if node.attr in ("previtem", "nextitem")
                            else (OTHER,))
            else:
                yield from self._lookup(self.value(node.node), node.attr)
        elif isinstance(node, nodes.Getitem):
            if isinstance(node.arg, nodes.Slice):
                yield from self.value(node.node)
            else:
                yield from self._lookup(self.value(node.node), None)
        elif isinstance(node, nodes.Slice):
            yield OTHER
        elif isinstance(node, nodes.Filter):
            yield from self._filter(node)
        elif isinstance(node, nodes.Call):
            yield from self._call(node)
        elif isinstance(node, nodes.MarkSafe | nodes.MarkSafeIfAutoescape):
            yield from self.value(node.expr)
        else:  # any other expression: whatever it is built from
            yield from _derived(*(self.value(n) for n in node.iter_child_nodes()
                                  if isinstance(n, nodes.Expr)), frozenset({COMPUTED}))

    def _lookup(self, base: Value, attr: str | None) -> Iterator[Atom]:
        for atom in base:
            if atom is NS and attr is not None:
                yield from self.ns_attrs.get(attr, _EMPTY) | self.ns_attrs.get("*", _EMPTY)
            elif isinstance(atom, Seq):
                yield from atom.items if attr is None else (COMPUTED,)
            elif atom is RUNTIME or atom is OTHER:
                yield atom
            else:
                yield COMPUTED

    def _filter(self, node: nodes.Filter) -> Iterator[Atom]:
        base = self.value(node.node) if node.node is not None else _EMPTY
        args = [self.value(a) for a in [*node.args, *(k.value for k in node.kwargs)]]
        if node.name in _NUMERIC_FILTERS:
            yield OTHER
        elif node.name in ("default", "d"):
            yield from base.union(*args[:1])
        elif node.name in _PICK_FILTERS:
            yield from _elements(base)
        elif node.name in _SEQ_FILTERS and any(isinstance(a, Seq) for a in base):
            yield Seq(_elements(base))
        elif node.name in _KEPT_FILTERS and all(isinstance(a, str) for a in base):
            yield from base
        elif node.name in _INPUT_FILTERS or (node.name == "map" and self._plain_map(node)):
            yield from _derived(base)
        else:
            yield from _derived(base, *args)

    def _plain_map(self, node: nodes.Filter) -> bool:
        """``map(attribute=...)`` or ``map('lower')``: elements of the input, not built."""
        if not node.args:
            return True
        name = self.value(node.args[0])
        return len(node.args) == 1 and all(isinstance(a, str) and a in _INPUT_FILTERS
                                           for a in name)

    def _call(self, node: nodes.Call) -> Iterator[Atom]:
        callee = node.node
        args = [self.value(a) for a in [*node.args, *(k.value for k in node.kwargs)]]
        if isinstance(callee, nodes.Name) and callee.name not in self.env:
            if callee.name == "namespace":
                yield NS
                return
            if callee.name == "dict":  # dict(k=v): keys are the keyword names
                keys = frozenset(k.key for k in node.kwargs)
                yield Seq(keys.union(*args) | ({COMPUTED} if node.dyn_kwargs else set()))
                return
            if callee.name == "range":
                yield Seq(frozenset({OTHER}))
                return
            if callee.name == "caller":
                yield from self.callers or {COMPUTED}
                return
            if callee.name in self.macros:  # a macro call renders the macro body
                if callee.name in self._rendering:  # recursive macro
                    yield COMPUTED
                    return
                self._rendering.add(callee.name)
                try:
                    yield from self.body_value(self.macros[callee.name].body)
                finally:
                    self._rendering.discard(callee.name)
                return
        if isinstance(callee, nodes.Getattr) and isinstance(callee.node, nodes.Name) \
                and callee.node.name == "loop" and callee.attr == "cycle":
            yield from frozenset().union(*args)
            return
        if isinstance(callee, nodes.Getattr):
            base = self.value(callee.node)
            if callee.attr in ("items", "keys", "values", "copy") \
                    and any(isinstance(a, Seq) for a in base):
                yield Seq(_elements(base))
                return
            if base <= {RUNTIME, OTHER}:  # a method of render data
                if callee.attr in _PREDICATE_METHODS:
                    yield OTHER
                    return
                if callee.attr in _PIECE_METHODS:
                    yield from base
                    return
                if callee.attr == "get":  # d.get(key, default)
                    yield from base.union(*args[1:2])
                    return
        yield from _derived(self.value(callee), *args)
