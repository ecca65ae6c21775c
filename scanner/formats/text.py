"""Analyzers for text formats: JSON, other text, unknown binary (Python source is
``scanner.formats.pysource``, Jinja templates ``scanner.formats.template``).

These are per-blob and content-based (the dispatcher picks them from the sniffed format),
so they also run on members of containers. Whole-folder semantics (file names, sharded
indexes, ``custom_generate/``) live in ``scanner.scan.folder``.

JSON documents are parsed with ``scanner.core.strict_json.loads_strict`` and walked at every
depth for keys that make Hugging Face loaders import or fetch code:

- ``auto_map`` (any form: ``"module.Class"``, ``["module.Class", null]``, objects, and the
  cross-repo ``"org/repo--module.Class"`` form): ``trust_remote_code`` dynamic modules,
  CVE-2025-66448 / GHSA-8fr4-5q9j-m8gm;
- ``custom_pipelines`` (pipeline implementations loaded from the repo);
- ``_attn_implementation`` / ``attn_implementation`` naming a Hub kernel
  (``org/repo``): kernels fetched and loaded from the Hub, GHSA-29pf-2h5f-8g72;
- ``chat_template`` (string, list of ``{name, template}``, or ``{name: template}``): checked
  by ``scanner.formats.template.jinja.check_template``;
- serving configs naming code to run (``handler``, ``entry_point``, ``model_file``,
  ``loader_module``, diffusers custom components; read at the places each tool reads
  them, not walked): ``scanner.formats.coderefs``;
- Hydra/OmegaConf ``_target_`` / ``_call_`` (judged by the allowlist tiers), NeMo's
  Hydra 0.x ``cls``, fiddle ``pyref`` objects (NeMo 2 ``context/io.json``) and
  ``trust_remote_code``: ``scanner.formats.targets``; ``logging.config.dictConfig``
  factories and classes (``version: 1`` mappings, Hydra's ``job_logging``):
  ``scanner.formats.logconfig``; sentence-transformers and PEFT class references
  (``modules.json`` types and paths, module configs' activation functions and tokenizer
  classes, ``adapter_config.json`` ``auto_mapping``; fixed places):
  ``scanner.formats.libconfigs``. YAML configs are walked by the same function
  (``scanner.formats.yamlconf``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any

from scanner.core.blobview import read_bounded as read_bounded  # re-exported
from scanner.core.context import ScanContext
from scanner.core.gcpause import gc_paused
from scanner.core.model import Blob, BytesBlob, Finding, Severity, Verdict
from scanner.core.rules import rule
from scanner.core.spec import EMPTY, TEXT, UNKNOWN, Format, FormatSpec, Head, Probe
from scanner.core.strict_json import JSONProblem, loads_strict
from scanner.formats import coderefs, libconfigs, logconfig, targets
from scanner.formats.targets import AUTO_MAP_CROSS_REPO as AUTO_MAP_CROSS_REPO  # re-exported
from scanner.formats.template import check_chat_template

V, S = Verdict, Severity

JSON_INVALID = rule(
    "json.invalid", V.MALFORMED, S.MEDIUM,
    "JSON document is not strict RFC 8259 JSON (syntax, encoding, duplicate keys, NaN, depth)",
    "Re-export the file with a standard JSON writer; duplicate keys and NaN are refused "
    "because different parsers read them differently.",
)
AUTO_MAP = rule(
    "config.auto_map", V.POLICY, S.HIGH,
    "auto_map names custom Python code that from_pretrained imports with "
    "trust_remote_code (CVE-2025-66448); the code it names is judged on its own",
    "Remove auto_map and use an architecture built into transformers/vLLM; never deploy "
    "with trust_remote_code.",
)
CUSTOM_PIPELINES = rule(
    "config.custom_pipelines", V.MALICIOUS, S.CRITICAL,
    "custom_pipelines names a pipeline implementation loaded from repository code",
    "Remove custom_pipelines; use a built-in pipeline task.",
)
HUB_KERNEL = rule(
    "config.hub_kernel", V.MALICIOUS, S.CRITICAL,
    "attention implementation names a Hub kernel repository (GHSA-29pf-2h5f-8g72)",
    "Set _attn_implementation to a built-in value (eager, sdpa, flash_attention_2) or drop it.",
)
ATTN_UNKNOWN = rule(
    "config.attn_implementation_unknown", V.POLICY, S.LOW,
    "attention implementation is not one of the built-in values",
    "Use a built-in attention implementation (eager, sdpa, flash_attention_2/3, "
    "flex_attention) or remove the key.",
)
GBDT_NOT_ALLOWED = rule(
    "format.gbdt_not_allowed", V.POLICY, S.MEDIUM,
    "Gradient-boosted tree model (XGBoost JSON, LightGBM text): data only, but not an "
    "allowed model format",
    "Serve models the appliance implements; tree ensembles are refused by policy.",
)
UNRECOGNIZED = rule(
    "format.unrecognized", V.POLICY, S.LOW,
    "File content matches no allowed format",
    "Remove the file from the model folder, or convert it to an allowed format.",
)

ATTN_KEYS = frozenset({"_attn_implementation", "_attn_implementation_internal",
                       "attn_implementation"})
ALLOWED_ATTN = frozenset({
    "eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention",
    "paged_attention", "sdpa_paged", "eager_paged", "flash_paged",
})
_MAX_LISTED = 6


def json_pointer(parent: str, key: str | int) -> str:
    """RFC 6901 pointer of ``key`` under ``parent`` (``""`` is the document root)."""
    return parent + "/" + str(key).replace("~", "~0").replace("/", "~1")


def _strings(pointer: str, value: object) -> Iterator[tuple[str, str]]:
    """(pointer, string) for every string inside ``value``, depth-first; a container
    reached again (a YAML alias repeats one object) is read at its first place only."""
    stack: list[tuple[str, object]] = [(pointer, value)]
    seen: set[int] = set()
    while stack:
        ptr, item = stack.pop()
        if isinstance(item, str):
            yield ptr, item
        elif isinstance(item, (dict, list)):
            if id(item) in seen:
                continue
            seen.add(id(item))
        if isinstance(item, dict):
            stack.extend((json_pointer(ptr, k), v) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((json_pointer(ptr, i), v) for i, v in reversed(list(enumerate(item))))


def _templates(pointer: str, value: object) -> Iterator[tuple[str, str]]:
    """Templates inside a ``chat_template`` value: string, list of {name, template}, or
    {name: template}. Other shapes yield nothing (transformers would refuse them)."""
    if isinstance(value, str):
        yield pointer, value
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, dict) and isinstance(item.get("template"), str):
                yield json_pointer(json_pointer(pointer, i), "template"), item["template"]
    elif isinstance(value, dict):
        for name, item in value.items():
            if isinstance(item, str):
                yield json_pointer(pointer, name), item


def _listed(items: list[str]) -> str:
    more = f" (+{len(items) - _MAX_LISTED} more)" if len(items) > _MAX_LISTED else ""
    return ", ".join(items[:_MAX_LISTED]) + more


def _key_findings(path: str, ptr: str, key: str, value: object) -> list[Finding]:
    """Findings for one object member ``key: value`` found at pointer ``ptr``."""
    out: list[Finding] = []
    if key == "auto_map":
        refs = list(_strings(ptr, value))
        out.append(AUTO_MAP.finding(
            path, f"auto_map at {ptr} makes the loader import repository code",
            f"{ptr}: {_listed([s for _, s in refs]) or type(value).__name__}",
        ))
        out.extend(
            AUTO_MAP_CROSS_REPO.finding(path, f"auto_map entry {p} imports code from "
                                        "another repository", f"{p}: {s}"[:300])
            for p, s in refs if "--" in s
        )
    elif key == "custom_pipelines" and value:
        names = [s for _, s in _strings(ptr, value)]
        out.append(CUSTOM_PIPELINES.finding(
            path, f"custom_pipelines at {ptr} names repository code", f"{ptr}: {_listed(names)}"
        ))
    elif key == "chat_template":
        for tptr, text in _templates(ptr, value):
            out.extend(check_chat_template(path, text, location=tptr))
    elif key in ATTN_KEYS and value is not None:
        for vptr, name in _strings(ptr, value):
            impl = name.removeprefix("paged|")
            if "/" in name or ":" in name or "@" in name:
                out.append(HUB_KERNEL.finding(
                    path, f"{key} at {vptr} loads kernel code from the Hub", f"{vptr}: {name}"
                ))
            elif impl not in ALLOWED_ATTN:
                out.append(ATTN_UNKNOWN.finding(
                    path, f"{key} at {vptr} is not a built-in attention implementation",
                    f"{vptr}: {name}"[:300],
                ))
    return out


_CODE_KEYS = frozenset({"auto_map", "custom_pipelines", "chat_template", *targets.TRUST_KEYS,
                        *targets.TARGET_KEYS, targets.CLS_KEY, targets.PYREF_KEY,
                        *logconfig.KEYS}) | ATTN_KEYS


def _is_str(value: object) -> bool:
    return isinstance(value, str)


# Keys that make a document worth walking only with a value that could name code: a
# string (a tokenizer.json's vocab has "class", "module", "cls" and "()" as tokens, with
# integer ids: a walk of its 100k containers for nothing), and a dictConfig root's
# ``version: 1`` (its ``ext://`` values need the walk even without a factory or class).
_TRIGGER_IF: dict[str, Callable[[Any], bool]] = {
    **dict.fromkeys((targets.CLS_KEY, targets.PYREF_KEY, *logconfig.KEYS), _is_str),
    "version": logconfig.is_version_one}
_TRIGGERS = _CODE_KEYS - _TRIGGER_IF.keys()
# A node's location as a linked list (parent, key): pointer strings are built only for
# findings, which keeps the walk of a multi-megabyte tokenizer.json cheap.
_Where = tuple[Any, "str | int"] | None


def _pointer(where: _Where) -> str:
    keys: list[str | int] = []
    while where is not None:
        where, key = where
        keys.append(key)
    out = ""
    for key in reversed(keys):
        out = json_pointer(out, key)
    return out


def json_findings(ctx: ScanContext, path: str, doc: object, prefix: str = "") -> list[Finding]:
    """Walk a parsed JSON document (any depth, any file) for code-loading keys.

    ``path`` is the finding path; ``prefix`` is prepended to every pointer (a YAML
    document's index, a duplicate key's place). Iterative (no recursion), in document
    order; checks the scan deadline every 65,536 containers. Each container object is
    judged once per role (``logconfig.child_role``: inside a ``logging.config.dictConfig``
    config or not): a YAML alias repeats the anchored object itself (``yamlconf``), and its
    findings are reported at its first pointer, so an alias fan-out (5 aliases a level, 8
    levels: 390,625 expanded copies of one ``_target_``) costs one judgement, not one per
    copy. (A node whose meaning depends on its place, a relative interpolation, is a copy
    per place: ``yamlconf``.) Returns findings of the ``config.*`` and ``template.*``
    rules, with RFC 6901 pointers in their evidence.
    """
    out: list[Finding] = []
    stack: list[tuple[_Where, object, str | None]] = [(None, doc, logconfig.root_role(doc))]
    # id() of every container judged with no role, (id(), role) of those with one (all
    # alive: held by ``doc``)
    seen: set[int] = set()
    seen_roles: set[tuple[int, str]] = set()
    below: list[tuple[_Where, object, str | None]] = []
    while stack:
        where, node, role = stack.pop()
        if isinstance(node, (dict, list)):
            if role is None:
                if id(node) in seen:
                    continue
                seen.add(id(node))
                if not len(seen) & 0xFFFF:
                    ctx.check_deadline()
            elif (id(node), role) in seen_roles:
                continue
            else:
                seen_roles.add((id(node), role))
                if not len(seen_roles) & 0xFFFF:
                    ctx.check_deadline()
        children: Iterable[tuple[str | int, object]] = ()
        if isinstance(node, dict):
            in_log = role is not None and role in logconfig.ROLES
            for key in node:
                if key in _CODE_KEYS or in_log:
                    out.extend(_member_findings(ctx, path, prefix, where, role, node, key))
            children = node.items()
        elif isinstance(node, list):
            children = enumerate(node)
        for key, value in children:
            if isinstance(value, (dict, list)):
                sub = logconfig.child_role(role, key, value) if (
                    role is not None or isinstance(value, dict)) else None
                if (id(value) not in seen) if sub is None else (
                        (id(value), sub) not in seen_roles):
                    below.append(((where, key), value, sub))
        stack.extend(reversed(below))  # the first child is judged first
        below.clear()
    return out


def _member_findings(ctx: ScanContext, path: str, prefix: str, where: _Where,
                     role: str | None, node: dict[Any, Any], key: Any) -> list[Finding]:
    """Findings for member ``key`` of mapping ``node`` (at ``where``, of ``role``)."""
    value = node[key]
    if key in targets.TARGET_KEYS:
        return targets.target_findings(path, prefix + _pointer((where, key)), key, node)
    if key in targets.TRUST_KEYS:
        return targets.trust_findings(path, prefix + _pointer((where, key)), value)
    if key == targets.CLS_KEY:
        return targets.legacy_cls_findings(path, prefix + _pointer((where, key)), node)
    if key == targets.PYREF_KEY:
        return targets.pyref_findings(path, prefix + _pointer(where), node)
    name = logconfig.callable_of(role, key, value)
    if name is not None:
        return logconfig.judge(path, prefix + _pointer((where, key)), name)
    if key not in _CODE_KEYS or key in logconfig.KEYS:
        return []
    if key == "auto_map":
        ctx.auto_map.extend((path, s) for _, s in _strings("", value))
    return _key_findings(path, prefix + _pointer((where, key)), key, value)


def parse_json(ctx: ScanContext, blob: Blob,
               found: set[str] | None = None) -> tuple[object, list[Finding]]:
    """Strictly parse ``blob`` as JSON: ``(document, [])`` or ``(None, [json.invalid])``.

    ``found``: when given, receives every code-loading key (``auto_map``, ``chat_template``
    ...) that is an object key anywhere in the document. Raises ``LimitHit`` for documents
    over ``ctx.limits.max_json_bytes``."""
    data = read_bounded(blob, ctx.limits.max_json_bytes, "max_json_bytes")
    try:
        return loads_strict(data, watch=_TRIGGERS, watch_if=_TRIGGER_IF, found=found), []
    except JSONProblem as problem:
        where = f" at byte {problem.offset}" if problem.offset is not None else ""
        return None, [JSON_INVALID.finding(
            blob.name, f"not strict JSON: {problem}", f"{problem.kind}{where}"
        )]


MEMO_MIN_BYTES = 64 << 10  # JSON at least this large is memoised by content digest
MEMO_MAX_ENTRIES = 256
# digest -> (findings with an empty path, auto_map strings): a fleet holds the same
# tokenizer.json many times; the analysis depends on the bytes only.
_JSON_MEMO: dict[bytes, tuple[list[Finding], list[str]]] = {}


def analyze_json(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """JSON blob: strict parse (``json.invalid`` when it fails), then ``json_findings``
    (skipped when the parser saw none of the code-loading keys, e.g. a tokenizer.json).
    Documents over ``MEMO_MIN_BYTES`` are memoised per process by SHA-256 digest."""
    if blob.size < MEMO_MIN_BYTES:
        return _analyze_json(ctx, blob)
    import hashlib

    data = read_bounded(blob, ctx.limits.max_json_bytes, "max_json_bytes")
    key = hashlib.sha256(data).digest()
    memo = _JSON_MEMO.get(key)
    if memo is None:
        sub = ScanContext(limits=ctx.limits, deadline=ctx.deadline)
        # The cyclic collector is paused until the parsed document is freed again: its
        # ~100k containers (a tokenizer's vocab and merges) hold no cycles, and collections
        # during the depth walk and key checks only traversed them (~10 % of this call).
        # Cycles made meanwhile stay tracked and are collected once it runs again.
        with gc_paused():
            findings = _analyze_json(sub, BytesBlob("", data))
        memo = (findings, [ref for _, ref in sub.auto_map])
        if len(_JSON_MEMO) >= MEMO_MAX_ENTRIES:
            _JSON_MEMO.pop(next(iter(_JSON_MEMO)))
        _JSON_MEMO[key] = memo
    ctx.auto_map.extend((blob.name, ref) for ref in memo[1])
    return [replace(f, path=blob.name) for f in memo[0]]


def _analyze_json(ctx: ScanContext, blob: Blob) -> list[Finding]:
    found: set[str] = set()
    doc, problems = parse_json(ctx, blob, found)
    extra = []
    if isinstance(doc, dict) and "learner" in doc and "version" in doc:  # XGBoost save_model
        extra.append(GBDT_NOT_ALLOWED.finding(blob.name, "XGBoost JSON model",
                                              evidence="/learner"))
    extra += coderefs.document_findings(blob.name, doc)  # fixed places: no walk
    extra += libconfigs.document_findings(blob.name, doc)  # fixed places: no walk
    if problems or not found:
        return problems + extra
    return json_findings(ctx, blob.name, doc) + extra


def analyze_text(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Other UTF-8 text (README, licence, merges.txt): nothing executable, no findings,
    except a LightGBM text model (``tree\nversion=``: policy). Content that is really a
    pickle, zip etc. is sniffed as that format, never as text."""
    head = blob.read_at(0, 64)
    if head.startswith((b"tree\nversion=", b"tree\r\nversion=")):
        return [GBDT_NOT_ALLOWED.finding(blob.name, "LightGBM text model",
                                         evidence=head[:20].decode("utf-8", "replace"))]
    return []


def analyze_unknown(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Unrecognised binary content: ``format.unrecognized`` (policy, allowlist-minded)."""
    head = blob.read_at(0, 16)
    return [UNRECOGNIZED.finding(blob.name, "content matches no allowed format",
                                 f"first bytes {head.hex()}" if head else "")]


# -- sniffing text (the sniffer hands these the decoded head) --------------------------------

_JSON_AFTER_BRACKET = frozenset('{["-0123456789tfn]')


def looks_like_json(h: Head) -> bool:
    """An object (``{`` then ``"`` or ``}``) or an array opening with a JSON value."""
    body = (h.text or "").lstrip("\ufeff \t\r\n")
    after = body[1:].lstrip(" \t\r\n")[:1]
    if body[:1] == "{":
        return after in ('"', "}", "")
    return body[:1] == "[" and (after == "" or after in _JSON_AFTER_BRACKET)


JSON = Format("json")
SPECS = (
    # JSON first among text tests; then XML (210), Python (220), Jinja (230).
    FormatSpec(JSON, analyze_json, binary=False, claims=(".json",),
               probes=(Probe(200, looks_like_json, text=True),)),
    FormatSpec(TEXT, analyze_text, binary=False),  # the sniffer's fallbacks
    FormatSpec(UNKNOWN, analyze_unknown, binary=False),
    FormatSpec(EMPTY, analyze_text, binary=False),
)
