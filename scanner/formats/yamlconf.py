"""YAML configs: Hydra/OmegaConf configs, NeMo ``model_config.yaml``, any ``*.yaml``.

Read as the safe loaders read them (PyYAML's ``SafeLoader``, which OmegaConf and Hydra
build on), without constructing any object: PyYAML's parser (libyaml when present) yields
events, and this module builds plain values from them itself, so that

- anchors and aliases resolve to the anchored value, merge keys (``<<: *base``,
  ``<<: [*a, *b]``) merge as ``SafeConstructor.flatten_mapping`` does (explicit keys win,
  earlier merged mappings win), implicit tags (``yes`` -> ``True``) and escapes
  (``"\\x5ftarget\\x5f"`` -> ``_target_``) resolve as the parser resolves them;
- the expansion is bounded: every alias counts the nodes of the value it repeats, and a
  document over ``MAX_NODES`` expanded nodes or ``MAX_DEPTH`` levels is a
  ``scanner.limit_exceeded`` finding (an alias bomb never expands; fail closed); under
  that bound an alias is the anchored Python object itself, and the walks below judge
  each shared container once, at its first place (a 302-byte fan-out of 390,625
  expanded targets is one judgement; issue 30's fuzzing campaign);
- except where a place changes the meaning: OmegaConf copies an aliased (or merged) node
  into each place (``OmegaConf.create`` builds a node tree from PyYAML's shared Python
  objects), so a relative interpolation in it (``${..cls}``) resolves against each
  place's own parents. An alias of a node holding one (a string with ``${.`` or ``..``
  inside ``${...}``, at any depth) is copied, down to those holders only (the rest stays
  shared), so that every place is resolved and judged on its own; the copies are
  bounded by ``MAX_ALIAS_COPIES`` copied entries per file (over it:
  ``scanner.limit_exceeded``, fail closed);
- what safe loaders refuse is a finding, not a crash: syntax errors, undefined and
  recursive aliases, unhashable keys (``yaml.invalid``); a duplicate key (PyYAML keeps the
  last, OmegaConf refuses: both values are walked); ``!!python/name:``,
  ``!!python/object/apply:`` ... tags naming a callable outside the allowlist tiers
  (``yaml.python_tag``: PyYAML's full/unsafe loaders import and call it, CVE-2017-18342,
  CVE-2020-14343); other application tags (``yaml.custom_tag``).

Every document is then walked like a JSON config (``scanner.formats.text.json_findings``:
``auto_map``, ``chat_template``, Hydra ``_target_``, NeMo's ``cls``, fiddle pyrefs,
``logging.config.dictConfig`` factories, ``trust_remote_code`` ...; and
``scanner.formats.coderefs``), plus what only OmegaConf reads: a NeMo root ``target``
(``from_config_dict``), and ``${...}`` interpolations. A node interpolation inside a
target (``${model.cls}``, ``${..name}``; also ``cls``, ``()``, ``class`` values) is
resolved in the document (bounded) and the result judged; one that does not resolve to a
literal leaves the target dynamic
(``config.dynamic_target``); a resolver other than the built-in value lookups
(``oc.env``, ``oc.select`` ...) is ``config.interpolation_resolver`` (custom resolvers
such as ``eval`` run code; ``oc.create``/``oc.decode`` build nodes the scan cannot see).

The parser is PyYAML's (a maintained parser shared with the loaders it stands for, which
is the point: the scan reads the same events they read); only the construction, where
the loaders run code, is this module's own.
"""

from __future__ import annotations

import re
from typing import Any

from scanner.core.blobview import read_bounded
from scanner.core.context import LimitHit, ScanContext
from scanner.core.model import Blob, Finding, Severity, Verdict
from scanner.core.rules import rule
from scanner.core.spec import Format, FormatSpec, Head, Probe
from scanner.formats import coderefs, logconfig, targets
from scanner.formats.text import json_findings, json_pointer

V, S = Verdict, Severity

YAML_INVALID = rule(
    "yaml.invalid", V.MALFORMED, S.MEDIUM,
    "YAML document cannot be read the way safe loaders read it (syntax, undefined or "
    "recursive alias, unhashable or duplicate key, bad merge key)",
    "Re-export the file with a standard YAML writer (yaml.safe_dump / OmegaConf.save).",
)
PYTHON_TAG = rule(
    "yaml.python_tag", V.MALICIOUS, S.CRITICAL,
    "A !!python/name, !!python/module or !!python/object tag names a callable outside the "
    "allowlist tiers: PyYAML's full and unsafe loaders import and call it "
    "(CVE-2017-18342, CVE-2020-14343)",
    "Do not load this file; configs must hold plain values only.",
)
CUSTOM_TAG = rule(
    "yaml.custom_tag", V.POLICY, S.MEDIUM,
    "A YAML node carries a tag safe loaders refuse: only an application-defined (or "
    "unsafe) constructor reads it",
    "Remove the tag; write the value as a plain mapping, sequence or scalar.",
)
RESOLVER = rule(
    "config.interpolation_resolver", V.POLICY, S.HIGH,
    "An OmegaConf interpolation calls a resolver that can run application code or build "
    "config nodes the scan cannot see (custom resolvers such as eval, oc.create, oc.decode)",
    "Replace the interpolation by its value, or by a plain ${node.path} reference.",
)

MAX_NODES = 1 << 21  # expanded nodes (aliases counted at their full size) per file
MAX_DEPTH = 256  # nested mappings/sequences
MAX_INTERPOLATION_STEPS = 16  # node interpolations followed to resolve one target
MAX_REPEATS = 8  # findings of one rule for one value (merged copies repeat one)
MAX_ALIAS_COPIES = 1 << 15  # entries copied to give relative interpolations their places
# OmegaConf / Hydra resolvers that look a value up (environment, another node, time):
# they cannot name code or build nodes.
SAFE_RESOLVERS = frozenset({"oc.env", "oc.select", "oc.deprecated", "oc.dict.keys",
                            "oc.dict.values", "hydra", "now"})
ROOT_TARGET_KEYS = ("target",)  # NeMo ModelPT.from_config_dict (``cls``: at any depth)
# other keys whose interpolations are resolved for the walk (its judgement decides)
RESOLVED_KEYS = frozenset({targets.CLS_KEY, *logconfig.KEYS})
_CORE = "tag:yaml.org,2002:"
_DATA_TAGS = frozenset(_CORE + t for t in (
    "str", "int", "float", "bool", "null", "binary", "timestamp", "merge", "value",
    "seq", "map", "omap", "pairs", "set"))
_PY = _CORE + "python/"
_PY_CODE = ("name:", "module:", "object:", "object/apply:", "object/new:")
_MERGE = object()  # the resolved value of a '<<' key
_OPEN = object()  # an anchor whose value is still being built
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*){2,}")
# an interpolation whose value depends on the node's place: ``${..a}``, ``${.a}``,
# ``${oc.select:..a}`` (conservative: any ``..`` inside ``${``)
_PLACED_START = re.compile(r"\$\{\s*\.")


def _placed(text: str) -> bool:
    """Whether ``text`` holds ``${`` followed by ``.`` (after white space), or by ``..``
    before the next ``}``: one regular expression (``\\$\\{[^}]*\\.\\.``) backtracked
    quadratically on ``${`` repeated 200k times; the part of each ``}``-free chunk after
    its first ``${`` is where such a ``..`` can be."""
    if _PLACED_START.search(text) is not None:
        return True
    for chunk in text.split("}"):
        start = chunk.find("${")
        if start >= 0 and ".." in chunk[start + 2:]:
            return True
    return False


class _Frame:
    __slots__ = ("anchor", "is_map", "items", "key", "has_key", "size", "merges",
                 "placed")

    def __init__(self, anchor: str | None, is_map: bool) -> None:
        self.anchor = anchor
        self.is_map = is_map
        self.items: list[Any] = []  # sequence items, or (key, value) pairs
        self.key: Any = None
        self.has_key = False
        self.size = 1
        self.merges: list[Any] = []
        self.placed = False  # holds a relative interpolation (module docstring)


class _Reader:
    """Builds plain values from one stream's events (see the module docstring)."""

    def __init__(self, ctx: ScanContext, path: str) -> None:
        self.ctx, self.path = ctx, path
        self.docs: list[Any] = []
        self.findings: list[Finding] = []
        # (pointer of the mapping, key, value) of every value a duplicate key overrode
        self.shadows: list[tuple[str, Any, Any]] = []
        self.anchors: dict[str, tuple[Any, int]] = {}
        self.stack: list[_Frame] = []
        self.events = 0
        # id() -> container, for every container holding a relative interpolation
        self.placed: dict[int, Any] = {}
        self.copied = 0

    def pointer(self) -> str:
        out = "" if len(self.docs) == 0 else f"#{len(self.docs)}"
        for frame in self.stack:
            if frame.is_map:
                if frame.has_key:
                    out = json_pointer(out, "<<" if frame.key is _MERGE else str(frame.key))
            else:
                out = json_pointer(out, len(frame.items))
        return out

    def invalid(self, message: str, evidence: str = "") -> None:
        self.findings.append(YAML_INVALID.finding(self.path, message, evidence or self.pointer()))

    def run(self, data: bytes) -> None:
        import yaml

        loader_cls = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        try:
            for event in yaml.parse(data, Loader=loader_cls):
                self.events += 1
                if not self.events & 0xFFFF:
                    self.ctx.check_deadline()
                self.event(yaml, event)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or str(exc).split("\n", 1)[0]
            self.invalid(f"not valid YAML: {problem}", where)
            self.close_all()

    def event(self, yaml: Any, event: Any) -> None:
        if isinstance(event, yaml.ScalarEvent):
            value = self.scalar(event)
            self.anchor(event.anchor, value, 1)
            self.add(value, 1)
        elif isinstance(event, yaml.AliasEvent):
            found = self.anchors.get(event.anchor)
            if found is None:
                self.invalid(f"alias *{event.anchor} names no anchor defined before it")
                self.add(None, 1)
            elif found[0] is _OPEN:
                self.invalid(f"alias *{event.anchor} is inside its own anchor (recursive)")
                self.add(None, 1)
            else:
                self.add(self.copy(found[0]), found[1])
        elif isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            is_map = isinstance(event, yaml.MappingStartEvent)
            self.tag(event.tag, "map" if is_map else "seq", None)
            if len(self.stack) >= MAX_DEPTH:
                raise LimitHit("max_yaml_depth", MAX_DEPTH)
            self.stack.append(_Frame(event.anchor, is_map))
            self.anchor(event.anchor, _OPEN, 1)
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            self.close()
        elif isinstance(event, yaml.DocumentEndEvent):
            self.anchors = {}

    def anchor(self, name: str | None, value: Any, size: int) -> None:
        if name is not None:
            self.anchors[name] = (value, size)

    def close(self) -> None:
        frame = self.stack.pop()
        value = self.mapping(frame) if frame.is_map else frame.items
        if frame.placed:
            self.placed[id(value)] = value
        self.anchor(frame.anchor, value, frame.size)
        self.add(value, frame.size)

    def copy(self, value: Any) -> Any:
        """``value`` for one more place: a container holding a relative interpolation is
        copied (its holders below too; the rest stays shared), as OmegaConf copies it.
        Raises ``LimitHit`` past ``MAX_ALIAS_COPIES`` copied entries."""
        if id(value) not in self.placed:
            return value
        self.copied += 1 + len(value)
        if self.copied > MAX_ALIAS_COPIES:
            raise LimitHit("max_yaml_alias_copies (relative interpolations)",
                           MAX_ALIAS_COPIES, self.copied)
        out: Any
        if isinstance(value, dict):
            out = {key: self.copy(item) for key, item in value.items()}
        else:
            out = [self.copy(item) for item in value]
        self.placed[id(out)] = out
        return out

    def close_all(self) -> None:
        """After a parse error: keep what was built (it is walked too)."""
        while self.stack:
            self.close()

    def add(self, value: Any, size: int) -> None:
        if not self.stack:
            self.docs.append(None if value is _MERGE else value)
            return
        frame = self.stack[-1]
        frame.size += size
        if frame.size > MAX_NODES:
            raise LimitHit("max_yaml_nodes (aliases expanded)", MAX_NODES, frame.size)
        if not frame.placed and (not frame.is_map or frame.has_key) and (
                id(value) in self.placed if isinstance(value, (dict, list)) else
                isinstance(value, str) and "${" in value
                and _placed(value)):
            frame.placed = True  # a value (not a key) holding a relative interpolation
        if not frame.is_map:
            frame.items.append("<<" if value is _MERGE else value)
        elif not frame.has_key:
            if isinstance(value, (dict, list)):
                self.invalid("a mapping key is a mapping or sequence (unhashable)")
                value = f"<unhashable {type(value).__name__} key>"
            frame.key, frame.has_key = value, True
        else:
            if frame.key is _MERGE:
                frame.merges.append(value)
            else:
                frame.items.append((frame.key, "<<" if value is _MERGE else value))
            frame.key, frame.has_key = None, False

    def mapping(self, frame: _Frame) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for merge in frame.merges:
            sources = merge if isinstance(merge, list) else [merge]
            if not all(isinstance(s, dict) for s in sources):
                self.invalid("a merge key (<<) takes a mapping or a list of mappings")
                continue
            for source in reversed(sources):
                out.update(source)
        explicit: set[Any] = set()
        for key, value in frame.items:
            if key in explicit:
                here = self.pointer()
                self.invalid(f"duplicate key {str(key)[:80]!r}: PyYAML keeps the last value, "
                             "OmegaConf refuses the file (both values are analysed)",
                             json_pointer(here, str(key)))
                self.shadows.append((here, key, out[key]))
            explicit.add(key)
            out[key] = value
        return out

    def scalar(self, event: Any) -> Any:
        import yaml

        tag = event.tag
        if tag is None or tag == "!":
            tag = _tools(yaml)[0].resolve(yaml.ScalarNode, event.value, event.implicit)
        self.tag(tag, "scalar", event.value)
        return _construct(yaml, tag, event.value)

    def tag(self, tag: str | None, kind: str, value: str | None) -> None:
        """Findings for an explicit tag (``None``/``!``: plain node, nothing to say)."""
        if tag is None or tag == "!" or tag in _DATA_TAGS:
            return
        if tag.startswith(_PY):
            rest = tag[len(_PY):]
            form = next((f for f in _PY_CODE if rest.startswith(f)), None)
            if form is None:
                return  # python/tuple, python/str ...: plain values under the full loader
            name = rest[len(form):] or (value or "")
            found = targets.classify_target(name) if form != "module:" else None
            why = found.reason if found is not None else None
            if form == "module:" and name not in ("collections", "builtins"):
                why = "a module import"
            if why is not None:
                self.findings.append(PYTHON_TAG.finding(
                    self.path, f"!!python/{form}{name[:120]} at {self.pointer() or '/'}: "
                    f"unsafe YAML loaders import and call it ({why})",
                    f"{self.pointer()}: {tag}"[:300]))
                return
        self.findings.append(CUSTOM_TAG.finding(
            self.path, f"{kind} at {self.pointer() or '/'} has tag {tag[:120]!r}, which safe "
            "loaders refuse", f"{self.pointer()}: {tag}"[:300]))


_TOOLS: list[Any] = []


def _tools(yaml: Any) -> tuple[Any, Any]:
    """PyYAML's implicit-tag resolver and safe scalar constructor (made once; both keep
    no state between the calls made here)."""
    if not _TOOLS:
        _TOOLS[:] = [yaml.resolver.Resolver(), yaml.constructor.SafeConstructor()]
    return _TOOLS[0], _TOOLS[1]


def _construct(yaml: Any, tag: str, value: str) -> Any:
    """A scalar as ``SafeConstructor`` builds it (null, bool, int, float; else the string)."""
    if tag == _CORE + "merge":
        return _MERGE
    build = {_CORE + "null": "construct_yaml_null", _CORE + "bool": "construct_yaml_bool",
             _CORE + "int": "construct_yaml_int",
             _CORE + "float": "construct_yaml_float"}.get(tag)
    if build is None:
        return value
    try:
        return getattr(_tools(yaml)[1], build)(yaml.ScalarNode(tag, value))
    except (ValueError, yaml.YAMLError):
        return value


# -- OmegaConf interpolations -------------------------------------------------------------

_RESOLVER_AT = re.compile(r"\$\{\s*([A-Za-z_][\w.\-]*)\s*:")
_NODE_REF = re.compile(r"\$\{\s*(\.*)((?:[\w\-]+|\[\s*[\w\-]+\s*\])(?:\.[\w\-]+|\[\s*[\w\-]+"
                       r"\s*\])*)?\s*\}")
_PART = re.compile(r"[\w\-]+")


def _unescaped_starts(text: str) -> list[int]:
    """Offsets of every ``${`` not escaped as ``\\${`` (OmegaConf grammar)."""
    out: list[int] = []
    at = text.find("${")
    while at >= 0:
        slashes = len(text[:at]) - len(text[:at].rstrip("\\"))
        if slashes % 2 == 0:
            out.append(at)
        at = text.find("${", at + 2)
    return out


def _lookup(doc: Any, chain: list[Any], dots: str, ref: str) -> tuple[Any, list[Any]] | None:
    """The value a node interpolation names and the chain of containers above it."""
    if dots:
        if len(dots) > len(chain):
            return None
        base = chain[: len(chain) - len(dots) + 1]
    else:
        base = [doc]
    node = base[-1]
    path = list(base)
    parts = _PART.findall(ref or "")
    for i, part in enumerate(parts):
        if isinstance(node, dict):
            key: Any = part if part in node else next(
                (k for k in node if str(k) == part), None)
            if key is None:
                return None
            nxt = node[key]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            nxt = node[int(part)]
        else:
            return None
        if i < len(parts) - 1:
            path.append(nxt)
        node = nxt
    return node, path


def resolve(doc: Any, chain: list[Any], text: str, steps: int = 0) -> object | None:
    """``text`` with every node interpolation replaced by the literal it names, as
    OmegaConf resolves it (absolute ``${a.b}``, relative ``${..a}``, list ``${a[0]}``,
    nested steps bounded; a text that is one interpolation is the value itself, typed, as
    OmegaConf returns it), or ``None`` when any part is a resolver, escaped, missing or
    not a scalar."""
    if steps > MAX_INTERPOLATION_STEPS:
        return None
    out, pos = [], 0
    starts = _unescaped_starts(text)
    if len(starts) != text.count("${"):
        return None
    for at in starts:
        match = _NODE_REF.match(text, at)
        if match is None:
            return None
        found = _lookup(doc, chain, match.group(1), match.group(2) or "")
        if found is None or isinstance(found[0], (dict, list)) or found[0] is None:
            return None
        value: object = found[0]
        if isinstance(value, str) and "${" in value:
            inner = resolve(doc, found[1], value, steps + 1)
            if inner is None:
                return None
            value = inner
        if at == 0 and match.end() == len(text):
            return value  # the whole text is one interpolation: its value, typed
        out.append(text[pos:at])
        out.append(str(value))
        pos = match.end()
    out.append(text[pos:])
    return "".join(out)


def _interpolations(ctx: ScanContext, path: str, doc: Any, prefix: str) -> list[Finding]:
    """Resolve node interpolations in targets and ``trust_remote_code`` values (in place,
    so the walk judges the literal) and report resolvers outside ``SAFE_RESOLVERS``. Each
    container is visited once: one whose interpolations depend on the place is already a
    copy per place (``_Reader.copy``), so writing the literal back is right at each."""
    out: list[Finding] = []
    if not isinstance(doc, (dict, list)):
        return out  # a scalar document: nothing OmegaConf would instantiate
    stack: list[tuple[Any, str, list[Any]]] = [(doc, prefix, [])]
    seen: set[int] = set()
    while stack:
        node, ptr, chain = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if len(seen) & 0xFFFF == 0:
            ctx.check_deadline()
        here = [*chain, node]
        items = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
        for key, value in items:
            kptr = json_pointer(ptr, str(key))
            if isinstance(value, (dict, list)):
                stack.append((value, kptr, here))
            elif isinstance(value, str) and "${" in value:
                target = isinstance(node, dict) and (key in targets.TARGET_KEYS or (
                    node is doc and key in ROOT_TARGET_KEYS) or key in targets.TRUST_KEYS)
                if target or (isinstance(node, dict) and key in RESOLVED_KEYS):
                    resolved = resolve(doc, here, value)
                    if resolved is not None:
                        node[key] = resolved
                        continue
                names = sorted({m.group(1) for at in _unescaped_starts(value)
                                if (m := _RESOLVER_AT.match(value, at)) is not None}
                               - SAFE_RESOLVERS)
                if names and not target:
                    out.append(RESOLVER.finding(
                        path, f"interpolation at {kptr} calls resolver "
                        f"{', '.join(names)[:120]}", f"{kptr}: {value}"[:300]))
    return out


def _root_targets(path: str, doc: Any, prefix: str) -> list[Finding]:
    """NeMo ``from_config_dict``: a root ``target`` naming an import path is imported and
    called with the config (``cls``, at any depth, is ``json_findings``')."""
    if not isinstance(doc, dict):
        return []
    out: list[Finding] = []
    for key in ROOT_TARGET_KEYS:
        value = doc.get(key)
        if isinstance(value, str) and ("${" in value or _DOTTED.fullmatch(value.strip())):
            out += targets.judge_target(path, json_pointer(prefix, key), value)
    return out


def analyze_yaml(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """A YAML blob: parse (bounded), then walk every document (module docstring).
    Raises ``LimitHit`` for a file over ``max_json_bytes`` (the dispatcher reports it);
    a limit hit inside the parse keeps the findings gathered so far."""
    data = read_bounded(blob, ctx.limits.max_json_bytes, "max_json_bytes")
    reader = _Reader(ctx, blob.name)
    try:
        reader.run(data)
    except LimitHit as hit:
        return [*reader.findings, hit.finding(blob.name)]
    out = reader.findings
    for index, doc in enumerate(reader.docs):
        prefix = f"#{index}" if index else ""
        out += _interpolations(ctx, blob.name, doc, prefix)
        out += json_findings(ctx, blob.name, doc, prefix)
        out += coderefs.document_findings(blob.name, doc)
        out += _root_targets(blob.name, doc, prefix)
    for ptr, key, value in reader.shadows:
        out += json_findings(ctx, blob.name, {key: value}, ptr)
    return _repeats_capped(out)


def _repeats_capped(found: list[Finding]) -> list[Finding]:
    """At most ``MAX_REPEATS`` findings of one rule for one value (the evidence after its
    pointer): a mapping merged (``<<: *a``) into thousands of nodes is a new container
    each time, holding the same target; it is reported at its first places, and every
    other value still is. (An alias itself repeats one object, judged once.)"""
    seen: dict[tuple[str, str], int] = {}
    out: list[Finding] = []
    for finding in found:
        key = (finding.rule_id, finding.evidence.partition(": ")[2])
        seen[key] = seen.get(key, 0) + 1
        if seen[key] <= MAX_REPEATS:
            out.append(finding)
    return out


# -- sniffing -------------------------------------------------------------------------------

YAML_SUFFIXES = (".yaml", ".yml")
_PROSE = frozenset({".md", ".markdown", ".rst", ".txt", ".html", ".htm", ".adoc"})
_HYDRA_LINE = re.compile(r"""^[ \t]*(?:-[ \t]+)?["']?_target_["']?[ \t]*:""", re.M)


def named_yaml(h: Head) -> bool:
    """Named ``*.yaml`` / ``*.yml`` (loaders pick YAML by name)."""
    return h.suffix in YAML_SUFFIXES


def looks_like_hydra(h: Head) -> bool:
    """A Hydra node (a ``_target_:`` key at a line start) in text that is not prose."""
    text = h.text or ""
    return (h.suffix not in _PROSE and "```" not in text
            and _HYDRA_LINE.search(text) is not None)


YAML = Format("yaml")
SPECS = (
    # By name before JSON (200): a JSON-looking *.yaml is read by a YAML loader; by a
    # Hydra key after Jinja (230).
    FormatSpec(YAML, analyze_yaml, binary=False, claims=YAML_SUFFIXES,
               name_hints=YAML_SUFFIXES,
               probes=(Probe(190, named_yaml, text=True),
                       Probe(240, looks_like_hydra, text=True))),
)
