"""Static checks for Jinja chat templates (Server-Side Template Injection / sandbox escape).

Chat templates ship inline in ``tokenizer_config.json`` (``chat_template``: a string, a list
of ``{"name", "template"}`` or a ``{name: template}`` object), as ``chat_template.jinja`` /
``*.jinja`` files, in ``chat_template.json`` and in GGUF metadata
(``tokenizer.chat_template``). Loaders that render them outside Jinja's sandbox run whatever
the template reaches through attribute walks (CVE-2024-34359, llama-cpp-python).

The template is lexed and parsed with Jinja's own parser (``Environment.parse``), which
builds an AST and never compiles or renders it, and the AST is walked for the constructs the
sandbox refuses: private/dunder attributes (``__class__``, ``__globals__``, ``__mro__`` ...),
computed ``|attr(...)`` names, item lookups whose key names such an attribute (Jinja falls
back to ``getattr`` for a missing string key) whether written, computed from constants
(``'__ssalc__'|reverse``, ``'_' * 2 ~ ...``, ``join``, ``format``, ``replace``) or held in a
name the template binds (``for``, ``set``, set blocks, ``with``, macro parameters,
``caller()``, ``namespace`` attributes, ``dict(k=...)`` keys: every value a name can take,
from ``scanner.formats.template.values``), attribute walks on the default globals
(``cycler``, ``joiner``, ``lipsum``, ``namespace``, ``self``), ``.mro()``, ``str.format``
field access and ``{% import/include/extends %}``. A key from render data looked up on an
object the template builds (a global, a namespace, a computed value) cannot be judged: it
is ``template.unresolved_lookup`` (policy). A template Jinja cannot parse is reported as
malformed, after a regex pass for the same patterns.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.parser import Parser

from scanner.core.context import LimitHit
from scanner.core.model import Finding
from scanner.formats.template.rules import (
    MAX_TEMPLATE_CHARS,
    SANDBOX_ESCAPE,
    UNPARSEABLE,
    UNRESOLVED_LOOKUP,
)
from scanner.formats.template.values import COMPUTED, GLOBAL, NS, OTHER, RUNTIME, Values, strings

MAX_HITS = 8  # evidence items listed per template

# Attributes Jinja's sandbox refuses beyond the leading-underscore rule (jinja2.sandbox).
_UNSAFE_ATTRS = frozenset({
    "mro", "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code",
    "f_globals", "f_locals", "f_builtins", "f_back", "f_code", "tb_frame", "tb_next",
    "func_globals", "func_code", "func_closure", "im_func", "im_self", "co_code",
})
# Default globals whose attributes lead to module globals (cycler.__init__.__globals__ ...).
_GLOBAL_OBJECTS = frozenset({"cycler", "joiner", "lipsum", "namespace", "range", "dict", "self"})
# Filters taking an attribute name: keyword ``attribute=`` and, for some, a positional
# argument (its index here; None when only the keyword form names an attribute).
_ATTRIBUTE_FILTERS: dict[str, int | None] = {
    "map": None, "unique": None, "min": None, "max": None,
    "selectattr": 0, "rejectattr": 0, "groupby": 0, "sum": 0, "sort": 2,
}
# A replacement field ``{...}`` (no brace inside); it reaches attributes or items when its
# text holds ``.`` or ``[``. Matched as the whole field, then searched: one pattern with a
# ``[.\[]`` between two ``[^{}]*`` backtracked quadratically on ``'{' + 150k dots``.
_FORMAT_FIELD = re.compile(r"\{[^{}]*\}")


def _format_reaches(fmt: str) -> bool:
    """Whether a ``str.format`` string has a field with an attribute or index part."""
    return any("." in field or "[" in field
               for field in _FORMAT_FIELD.findall(fmt))

_FALLBACK = [
    (re.compile(r"\.\s*_\w*|\[\s*['\"]_\w*['\"]\s*\]"), "private attribute access"),
    (re.compile(r"_TemplateReference__context"), "_TemplateReference__context"),
    (re.compile(r"\|\s*attr\s*\("), "attr filter"),
    (re.compile(r"\bmro\s*\("), ".mro()"),
    (re.compile(r"\{%-?\s*(?:import|include|extends|from)\b"), "template loading tag"),
    (re.compile(r"\b(?:cycler|joiner|lipsum|namespace|self)\s*\.\s*\w"), "global object walk"),
]


class _GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` (transformers' AssistantTracker): parsed as
    a plain scope so the body is checked like any other template code."""

    tags = {"generation"}

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def _environment() -> jinja2.Environment:
    # Same lexer settings as transformers' chat-template environment; no loader, so nothing
    # is ever read from disk, and the environment is only used to parse.
    return jinja2.Environment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[jinja2.ext.loopcontrols, jinja2.ext.do, _GenerationTag],
        autoescape=True,  # irrelevant: templates are parsed only, never rendered
    )


_ENV = _environment()


def _fold(node: nodes.Node) -> str | None:
    """Constant-fold string literals joined with ``~`` or ``+``; None when not constant."""
    if isinstance(node, nodes.Const):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, nodes.Concat):
        parts = [_fold(n) for n in node.nodes]
        return None if any(p is None for p in parts) else "".join(p or "" for p in parts)
    if isinstance(node, nodes.Add):
        left, right = _fold(node.left), _fold(node.right)
        return None if left is None or right is None else left + right
    return None


def _bad_name(name: str) -> bool:
    return name.startswith("_") or name in _UNSAFE_ATTRS


def _risky_prefix(prefix: str) -> bool:
    """Whether some string starting with ``prefix`` is a name ``_bad_name`` refuses."""
    return prefix.startswith("_") or any(name.startswith(prefix) for name in _UNSAFE_ATTRS)


def _key_hits(values: Values, key: nodes.Node, what: str) -> Iterator[str]:
    """Why a lookup name (an item key or an attribute-name argument) may name an attribute
    the sandbox refuses: one of the strings it can take is private, or the template
    computes it while rendering (``'__ssalc__'|reverse``, ``cycler`` output, a filter over
    literals) so it can be any string."""
    value = values.value(key)
    via = f" (through {key.name!r})" if isinstance(key, nodes.Name) else ""
    bad = [name for name in strings(value) if any(map(_bad_name, name.split(".")))]
    if bad:
        yield f"{what} {', '.join(map(repr, bad[:3]))}{via}"
    elif COMPUTED in value:
        yield f"{what} built while rendering, so it may be any name{via}"


def _unresolved(values: Values, key: nodes.Node, obj: nodes.Node) -> str | None:
    """A lookup whose key comes from render data on an object the template builds (a
    global, a namespace, something computed): the key cannot be judged, and the object may
    lead to Python internals."""
    if RUNTIME not in values.value(key) or not values.value(obj) & {GLOBAL, NS, COMPUTED}:
        return None
    via = f" {key.name!r}" if isinstance(key, nodes.Name) else ""
    return f"item lookup with key{via} from render data on an object the template builds"


def _attribute_args(node: nodes.Filter, values: Values) -> list[nodes.Node]:
    """The arguments of a filter that name attributes: ``attr(x)``, ``attribute=x``, the
    positional forms of ``selectattr`` ..., and ``map('attr', x)`` (any ``map`` whose
    filter name may be ``attr`` or cannot be resolved)."""
    if node.name == "attr":
        return list(node.args[:1])
    if node.name not in _ATTRIBUTE_FILTERS:
        return []
    args: list[nodes.Node] = [kw.value for kw in node.kwargs if kw.key == "attribute"]
    position = _ATTRIBUTE_FILTERS[node.name]
    if position is not None and len(node.args) > position:
        args.append(node.args[position])
    if node.name == "map" and node.args:
        name = values.value(node.args[0])
        if "attr" in name or any(not isinstance(a, str) for a in name):
            args.extend(node.args[1:2])
            if not all(isinstance(a, str) for a in name):
                args.append(node.args[0])  # the filter name itself is computed
    return args


def _node_hits(node: nodes.Node, values: Values) -> Iterator[str]:
    """Sandbox-escape constructs at this one node (children are walked by the caller);
    ``values``: what the template's expressions can evaluate to."""
    if isinstance(node, nodes.Getattr):
        if _bad_name(node.attr):
            yield f"attribute {node.attr!r}"
        elif isinstance(node.node, nodes.Name) and node.node.name in _GLOBAL_OBJECTS:
            yield f"attribute walk on global {node.node.name!r}"
        if node.attr in ("format", "format_map"):
            fmt = _fold(node.node)
            if fmt is None or _format_reaches(fmt):
                yield "str.format with attribute or index fields"
    elif isinstance(node, nodes.Getitem):
        hits = [] if isinstance(node.arg, nodes.Slice) else list(
            _key_hits(values, node.arg, "item"))
        yield from hits
        if not hits and isinstance(node.node, nodes.Name) and node.node.name in _GLOBAL_OBJECTS:
            yield f"item lookup on global {node.node.name!r}"
    elif isinstance(node, nodes.Filter):
        for arg in _attribute_args(node, values):
            value = values.value(arg)
            hits = list(_key_hits(values, arg, "attribute name"))
            if not hits and any(a is not OTHER and not isinstance(a, str) for a in value):
                hits = ["computed attribute name"]  # from render data: cannot be judged
            yield from (f"{node.name} filter with {hit}" for hit in hits)
    elif isinstance(node, nodes.Name):
        if node.name.startswith("__") or node.name == "_TemplateReference__context":
            yield f"name {node.name!r}"
    elif isinstance(node, (nodes.Import, nodes.FromImport, nodes.Include, nodes.Extends)):
        yield f"{type(node).__name__.lower()} tag (loads another template)"


def _ast_hits(tree: nodes.Template) -> tuple[list[str], list[str]]:
    """(sandbox-escape hits, unresolved-lookup hits), each ``line N: what``."""
    hits: list[tuple[int, str]] = []
    unresolved: list[tuple[int, str]] = []
    values = Values(tree, _risky_prefix)
    stack: list[nodes.Node] = [tree]
    while stack:
        node = stack.pop()
        lineno = getattr(node, "lineno", 0) or 0
        found = list(_node_hits(node, values))
        hits.extend((lineno, hit) for hit in found)
        if not found and isinstance(node, nodes.Getitem) \
                and not isinstance(node.arg, nodes.Slice):
            why = _unresolved(values, node.arg, node.node)
            if why:
                unresolved.append((lineno, why))
        stack.extend(node.iter_child_nodes())
    return ([f"line {lineno}: {hit}" for lineno, hit in sorted(hits)],
            [f"line {lineno}: {hit}" for lineno, hit in sorted(unresolved)])


def _regex_hits(text: str) -> list[str]:
    hits = []
    for pattern, label in _FALLBACK:
        match = pattern.search(text)
        if match:
            line = text.count("\n", 0, match.start()) + 1
            hits.append(f"line {line}: {label} {match.group(0)[:40]!r}")
    return hits


MAX_JUDGED = 256  # distinct template texts whose parse outcome is kept per process
_JUDGED: dict[str, tuple[list[str], list[str], str | None]] = {}


def _judged(text: str) -> tuple[list[str], list[str], str | None]:
    """(escape hits, unresolved-lookup hits, parse error detail or None) for ``text``
    (a template too deeply nested to analyse is an unresolved hit): a pure function of the
    text,
    memoised (a model folder holds its template twice, in ``chat_template.jinja`` and in
    ``tokenizer_config.json``, at different locations)."""
    found = _JUDGED.get(text)
    if found is None:
        try:
            tree = _ENV.parse(text)
        except (jinja2.TemplateError, RecursionError, ValueError) as exc:
            found = (_regex_hits(text), [], f"{type(exc).__name__}: {exc}"[:300])
        else:
            try:
                found = (*_ast_hits(tree), None)
            except RecursionError:
                found = (_regex_hits(text), ["expressions nested too deeply to analyse"],
                         None)
        if len(_JUDGED) >= MAX_JUDGED:
            _JUDGED.pop(next(iter(_JUDGED)))
        _JUDGED[text] = found
    return found


def check_template(path: str, text: str, *, location: str = "") -> list[Finding]:
    """Check one Jinja template without rendering or compiling it.

    ``path`` is the finding path (file, or ``file.gguf`` for GGUF metadata); ``location``
    names where inside the file the template sits (a JSON pointer such as
    ``/chat_template/0/template`` or a GGUF key) and prefixes the evidence.
    Returns ``template.sandbox_escape`` (malicious) when the template reaches Python
    internals, ``template.unresolved_lookup`` (policy) when it looks up a key taken from
    render data on an object it builds itself, ``template.unparseable`` (malformed) when
    Jinja cannot parse it, and a ``scanner.limit_exceeded`` finding for templates over
    ``MAX_TEMPLATE_CHARS``.
    Never raises for bad input. Source: CVE-2024-34359; Jinja ``sandbox.is_safe_attribute``.
    """
    where = f"{location}: " if location else ""
    if len(text) > MAX_TEMPLATE_CHARS:
        return [LimitHit("max_template_chars", MAX_TEMPLATE_CHARS, len(text)).finding(path)]
    findings: list[Finding] = []
    hits, unresolved, detail = _judged(text)
    if detail is not None:
        findings.append(UNPARSEABLE.finding(
            path, "chat template does not parse as Jinja; it cannot be checked", where + detail
        ))
    if unresolved:
        findings.insert(0, UNRESOLVED_LOOKUP.finding(
            path, "chat template looks up a key it cannot be checked for", where
            + _shown(unresolved)))
    if hits:
        findings.insert(0, SANDBOX_ESCAPE.finding(
            path, "chat template reaches Python internals (Jinja sandbox escape)",
            where + _shown(hits)))
    return findings


def _shown(hits: list[str]) -> str:
    return "; ".join(hits[:MAX_HITS]) + (f"; +{len(hits) - MAX_HITS} more"
                                         if len(hits) > MAX_HITS else "")
