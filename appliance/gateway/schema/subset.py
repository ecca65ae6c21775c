"""JSON-Schema subset that the engine's grammar backend (xgrammar) really enforces.

Tool ``parameters`` and ``response_format.json_schema.schema`` reach xgrammar. Keywords it
does not enforce are either refused by vLLM with a 400, silently ignored (the generated
JSON then violates the schema: ``not``, ``if/then``, non-local ``$ref``, and inside
structural tags also ``uniqueItems``, multi-branch ``allOf``, unknown ``format``), or, in
older versions, crashed the server (GHSA-vrq3-r879-7m65 / CVE-2025-48944, CVE-2025-48942).
So the gateway allow-lists keywords (what vLLM 0.33's ``has_xgrammar_unsupported_json_features``
refuses and what xgrammar 0.2.8 compiles but does not enforce) and checks every
value before the request leaves:

* ``invalid_schema``: not a JSON Schema (non-schema property value, unknown ``type`` name
  such as ``"txt"``, uncompilable ``pattern``, dangling ``$ref``, meta-schema failure).
* ``unsupported_schema_feature``: valid JSON Schema using a keyword outside the subset
  (``uniqueItems``, ``not``, ``if``/``then``/``else``, ``dependent*``, ``contains``,
  ``patternProperties``, ``propertyNames``, ``multipleOf``, a ``format`` outside
  :func:`enforced_formats` (unknown, or its checker library not installed), non-local
  ``$ref``, ``allOf`` with more than one branch, ``minLength``/``maxLength`` beside
  ``pattern``/``format``, regex look-around or back-references, …).

The schema is walked with the shared walker (:mod:`.walk`, the same one
:func:`.grammar_limits.check_schema_complexity` uses): each subschema's keywords are
checked when it is visited, parents before children, and the first problem is raised.
Accepted schemas are compiled once into a ``jsonschema`` validator (LRU-cached by canonical
JSON) that the gateway reuses to re-validate the engine's output.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, ClassVar

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator

from appliance.gateway.errors import GATEWAY_CODES, GatewayCode
from scanner.diagnostic import CodeRegistry, Diagnostic

from .. import fastjson
from . import walk
from .grammar_limits import DEFAULT_LIMITS as GRAMMAR_LIMITS
from .grammar_limits import ERROR_CODE as GRAMMAR_ERROR_CODE
from .grammar_limits import check_pattern
from .walk import pointer

TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
# Formats xgrammar compiles to a grammar; the gateway accepts one only where it can also
# re-validate answers against it (see enforced_formats()).
WANTED_FORMATS = frozenset({
    "email", "date", "time", "date-time", "duration", "ipv4", "ipv6", "hostname", "uuid",
    "uri", "uri-reference", "uri-template", "json-pointer", "relative-json-pointer",
})
# The format checker every answer is validated with (gateway and toolbench alike). Several of
# its checkers exist only where their optional libraries are importable (jsonschema's
# ``format-nongpl`` extra: rfc3339-validator for date-time/time, isoduration for duration,
# fqdn for hostname, rfc3986-validator for uri/uri-reference, uri-template, jsonpointer for
# (relative-)json-pointer); without them jsonschema passes such a value unchecked.
FORMAT_CHECKER = Draft202012Validator.FORMAT_CHECKER


def enforced_formats() -> frozenset[str]:
    """The formats a schema may use: :data:`WANTED_FORMATS` that :data:`FORMAT_CHECKER`
    really checks in this install, read at call time. Fail closed: a wanted format whose
    checker library is missing is refused as ``unsupported_schema_feature`` (never accepted
    and passed unchecked)."""
    return WANTED_FORMATS & frozenset(FORMAT_CHECKER.checkers)


SCHEMA_URIS = frozenset({
    "https://json-schema.org/draft/2020-12/schema",
    "http://json-schema.org/draft-07/schema#",
    "http://json-schema.org/draft-07/schema",
})
ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
    "writeOnly",
})
ALLOWED = ANNOTATIONS | frozenset({
    "type", "properties", "required", "additionalProperties", "items", "prefixItems",
    "enum", "const", "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems", "anyOf", "oneOf",
    "allOf", "$ref", "$defs", "definitions", "$schema",
})
MAX_PATTERN_CHARS = GRAMMAR_LIMITS.max_pattern_chars
MAX_VALUE_DEPTH = 32
# Regex constructs xgrammar's regex converter does not support: look-around, named groups,
# inline flags, conditionals, back-references.
_UNSUPPORTED_REGEX = re.compile(r"\(\?(?!:)|\\[1-9]|\\k<")


class SchemaProblem(Exception):
    """A schema refused. ``code`` is ``invalid_schema``, ``unsupported_schema_feature`` or
    ``schema_too_complex`` (a :class:`~appliance.gateway.errors.GatewayCode`: ``ValueError``
    otherwise); ``pointer`` is the RFC 6901 pointer of the offending node inside the checked
    schema; ``diagnostic`` the same as a :class:`~scanner.diagnostic.Diagnostic`."""

    registry: ClassVar[CodeRegistry] = GATEWAY_CODES

    def __init__(self, code: str, pointer: str, message: str) -> None:
        super().__init__(message)
        self.code = str(GatewayCode.parse(code))
        self.pointer = pointer
        self.message = message

    @property
    def diagnostic(self) -> Diagnostic:
        """``Diagnostic(code, message, at=pointer)`` (``at`` is ``None`` for the root)."""
        return Diagnostic(self.code, self.message, self.pointer or None)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return is_int(value) or (isinstance(value, float) and math.isfinite(value))


def _depth_ok(value: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return False
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return True


class _Checker:
    """The subset check of one schema, as a visitor of the shared walker (:mod:`.walk`):
    each subschema's own keywords are checked when it is visited, before its members."""

    def __init__(self, max_depth: int, max_nodes: int) -> None:
        self.max_depth = max_depth
        self.max_nodes = max_nodes
        self.nodes = 0
        self.refs: list[tuple[tuple[str, ...], str]] = []

    def bad(self, path: tuple[str, ...], message: str) -> SchemaProblem:
        return SchemaProblem("invalid_schema", pointer(path), message)

    def unsupported(self, path: tuple[str, ...], message: str) -> SchemaProblem:
        return SchemaProblem("unsupported_schema_feature", pointer(path), message)

    def visit(self, node: Any, path: tuple[str, ...], role: int) -> bool:
        if role == walk.DATA:  # keyword values: checked (depth-bounded) by their keyword
            return False
        if role != walk.SCHEMA:  # a map or list of subschemas: its keyword checked the shape
            return True
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise self.bad(path, f"schema has more than {self.max_nodes} subschemas")
        if len(path) > self.max_depth * 3:
            raise self.bad(path, f"schema nests deeper than {self.max_depth} levels")
        if isinstance(node, bool):
            return False
        if not isinstance(node, dict):
            raise self.bad(path, f"a schema must be a JSON object or boolean, got {node!r:.60}")
        for key in node:
            if key not in ALLOWED:
                raise self.unsupported(
                    path + (key,),
                    f"keyword {key!r} is not enforced by the engine's grammar (xgrammar); "
                    "remove it or express the constraint with the supported subset",
                )
        for key, value in node.items():
            self.keyword(node, key, value, path + (key,))
        self.cross_checks(node, path)
        return True

    def schema_map(self, value: Any, path: tuple[str, ...]) -> None:
        if not isinstance(value, dict):
            raise self.bad(path, "must be an object mapping names to schemas")

    def schema_list(self, value: Any, path: tuple[str, ...]) -> None:
        if not isinstance(value, list) or not value:
            raise self.bad(path, "must be a non-empty array of schemas")

    def keyword(self, node: dict[str, Any], key: str, value: Any, path: tuple[str, ...]) -> None:
        if key == "type":
            names = value if isinstance(value, list) else [value]
            if not names or len(set(map(str, names))) != len(names):
                raise self.bad(path, "type must be a name or a non-empty list of unique names")
            for i, name in enumerate(names):
                if not isinstance(name, str) or name not in TYPES:  # {} is unhashable
                    where = path + (str(i),) if isinstance(value, list) else path
                    raise self.bad(where, f"unknown type {name!r}; use one of {sorted(TYPES)}")
        elif key in ("properties", "$defs", "definitions"):
            self.schema_map(value, path)
        elif key == "required":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise self.bad(path, "required must be an array of property names")
            if len(set(value)) != len(value):
                raise self.bad(path, "required names must be unique")
        elif key in ("additionalProperties", "items"):
            if isinstance(value, list):
                raise self.unsupported(path, f"array form of {key!r}; use prefixItems")
        elif key in ("prefixItems", "anyOf", "oneOf"):
            self.schema_list(value, path)
        elif key == "allOf":
            self.schema_list(value, path)
            if len(value) > 1:
                raise self.unsupported(path, "allOf with more than one branch; merge them")
        elif key == "enum":
            if not isinstance(value, list) or not value:
                raise self.bad(path, "enum must be a non-empty array")
            if not _depth_ok(value, MAX_VALUE_DEPTH):
                raise self.bad(path, "enum values nest too deeply")
        elif key in ("const", "default", "examples"):
            if not _depth_ok(value, MAX_VALUE_DEPTH):
                raise self.bad(path, f"{key} value nests too deeply")
        elif key in ("minLength", "maxLength", "minItems", "maxItems"):
            if not is_int(value) or value < 0:
                raise self.bad(path, f"{key} must be a non-negative integer")
        elif key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if not is_number(value):
                raise self.bad(path, f"{key} must be a finite number")
        elif key == "pattern":
            self.pattern(value, path)
        elif key == "format":
            if not isinstance(value, str):
                raise self.bad(path, "format must be a string")
            enforced = enforced_formats()
            if value not in enforced:
                raise self.unsupported(
                    path, f"format {value!r} is not enforced; use one of {sorted(enforced)}"
                )
        elif key == "$ref":
            if not isinstance(value, str):
                raise self.bad(path, "$ref must be a string")
            if value != "#" and not value.startswith("#/"):
                raise self.unsupported(path, "only local references ('#/...') are allowed")
            self.refs.append((path, value))
        elif key == "$schema":
            if not isinstance(value, str) or value not in SCHEMA_URIS:  # schemathesis: {}
                raise self.unsupported(path, "only the 2020-12 or draft-07 $schema is accepted")
        elif key in ("title", "description", "$comment"):
            if not isinstance(value, str):
                raise self.bad(path, f"{key} must be a string")
        elif key in ("deprecated", "readOnly", "writeOnly") and not isinstance(value, bool):
            raise self.bad(path, f"{key} must be a boolean")

    def pattern(self, value: Any, path: tuple[str, ...]) -> None:
        if not isinstance(value, str):
            raise self.bad(path, "pattern must be a string")
        if len(value) > MAX_PATTERN_CHARS or "\x00" in value:
            raise self.bad(path, f"pattern must be under {MAX_PATTERN_CHARS} chars, no NUL")
        try:
            re.compile(value)
        except (re.error, RecursionError, OverflowError) as exc:
            raise self.bad(path, f"pattern does not compile: {exc}") from None
        if _UNSUPPORTED_REGEX.search(value):
            raise self.unsupported(
                path, "pattern uses look-around, inline flags, named groups or back-references"
            )
        problem = check_pattern(value, pointer(path))
        if problem is not None:  # exponential automaton (GHSA-rwxx-mrjm-wc2m)
            raise SchemaProblem(GRAMMAR_ERROR_CODE, pointer(path), problem)

    def cross_checks(self, node: dict[str, Any], path: tuple[str, ...]) -> None:
        has_len = "minLength" in node or "maxLength" in node
        if has_len and ("pattern" in node or "format" in node):
            raise self.unsupported(
                path, "minLength/maxLength together with pattern/format is not enforced"
            )
        for low, high in (("minLength", "maxLength"), ("minItems", "maxItems"),
                          ("minimum", "maximum")):
            if low in node and high in node and node[low] > node[high]:
                raise self.bad(path + (low,), f"{low} is greater than {high}")
        required = node.get("required")
        extra = node.get("additionalProperties", False)
        if isinstance(required, list) and extra is False:
            props = node.get("properties", {})
            for i, name in enumerate(required):
                if name not in props:
                    raise self.bad(
                        path + ("required", str(i)),
                        f"required property {name!r} is not declared in properties "
                        "(additional properties are closed)",
                    )


def _resolve(root: Any, ref: str) -> bool:
    node = root
    if ref == "#":
        return True
    for raw in ref[2:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return False
    return isinstance(node, dict | bool)


def check_schema(schema: Any, *, max_depth: int = 32, max_nodes: int = 4096) -> Validator:
    """Check ``schema`` against the xgrammar subset and the 2020-12 meta-schema.

    Returns a ready ``jsonschema`` validator (with the format checker) for re-validating
    engine output. Raises :class:`SchemaProblem` with a pointer relative to ``schema``.
    """
    checker = _Checker(max_depth, max_nodes)
    walk.walk(schema, checker.visit)
    for path, ref in checker.refs:
        if not _resolve(schema, ref):
            raise SchemaProblem("invalid_schema", pointer(path), f"$ref {ref!r} does not resolve")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = pointer(tuple(str(p) for p in exc.absolute_path))
        raise SchemaProblem("invalid_schema", where, f"not a JSON Schema: {exc.message}") from None
    except RecursionError:
        raise SchemaProblem("invalid_schema", "", "schema nests too deeply") from None
    validator: Validator = Draft202012Validator(schema, format_checker=FORMAT_CHECKER)
    return validator


@dataclass(frozen=True, slots=True)
class _Entry:
    validator: Validator | None
    problem: SchemaProblem | None


class SchemaCache:
    """LRU cache of :func:`check_schema` results keyed by canonical JSON (sorted keys).

    Both acceptances (the compiled validator) and refusals are cached, so a client that
    repeats the same tool schema pays the meta-schema check once. Thread-unsafe: use one
    per event loop.
    """

    def __init__(self, *, max_entries: int = 256, max_key_chars: int = 256 * 1024,
                 max_depth: int = 32, max_nodes: int = 4096) -> None:
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._max_entries = max_entries
        self._max_key_chars = max_key_chars
        self._max_depth = max_depth
        self._max_nodes = max_nodes

    def get(self, schema: Any) -> Validator:
        """Validator for ``schema``; raises :class:`SchemaProblem` (pointer relative)."""
        try:
            key = fastjson.canonical(schema)
        except (RecursionError, ValueError, TypeError):
            raise SchemaProblem("invalid_schema", "", "schema nests too deeply") from None
        entry = self._entries.get(key)
        if entry is None:
            try:
                entry = _Entry(check_schema(schema, max_depth=self._max_depth,
                                            max_nodes=self._max_nodes), None)
            except SchemaProblem as exc:
                entry = _Entry(None, exc)
            if len(key) <= self._max_key_chars:
                self._entries[key] = entry
                if len(self._entries) > self._max_entries:
                    self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(key)
        if entry.problem is not None:
            raise SchemaProblem(entry.problem.code, entry.problem.pointer, entry.problem.message)
        if entry.validator is None:  # invariant of _Entry: a validator or a problem
            raise RuntimeError("schema cache entry without validator")
        return entry.validator
