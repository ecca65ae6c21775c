"""The one JSON Schema walker: which keywords hold subschemas, and an iterative walk.

Both schema checks walk a client's schema with :func:`walk`: the xgrammar keyword subset
(:mod:`.subset`: allow-list and keyword values, one subschema at a time) and the grammar
pre-limits (:mod:`.grammar_limits`: JSON-value count, nesting depth, every ``pattern``).
So a keyword holds subschemas in both or in neither.

Every JSON value of the document is visited once, parents before children, in document
order, with its path (RFC 6901 tokens) and a *role*:

* :data:`SCHEMA`: a (sub)schema position: the root; the value of a keyword in
  :data:`SUBSCHEMA_KEYS`; a member of a schema map or schema list;
* :data:`SCHEMA_MAP`: the value of a keyword in :data:`SUBSCHEMA_MAP_KEYS` (names ->
  schemas); :data:`PATTERN_MAP` for ``patternProperties`` (its keys are regexes too);
* :data:`SCHEMA_LIST`: the value of a keyword in :data:`SUBSCHEMA_LIST_KEYS`, or an
  ``items`` array (draft-07 tuple form);
* :data:`DATA`: everything else (``enum`` / ``const`` / ``default`` members, annotation
  values, keyword arguments), and whatever is inside data.

The walk is iterative (no recursion limit); references (``$ref``) are not followed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SCHEMA, SCHEMA_MAP, SCHEMA_LIST, PATTERN_MAP, DATA = range(5)
SUBSCHEMA_KEYS = frozenset({
    "additionalProperties", "additionalItems", "contains", "not", "if", "then", "else",
    "propertyNames", "unevaluatedItems", "unevaluatedProperties", "contentSchema", "items",
})
SUBSCHEMA_MAP_KEYS = frozenset({
    "properties", "patternProperties", "$defs", "definitions", "dependentSchemas",
    "dependencies",
})
SUBSCHEMA_LIST_KEYS = frozenset({"prefixItems", "anyOf", "oneOf", "allOf"})

Path = tuple[str, ...]
Visit = Callable[[Any, Path, int], bool]
"""``visit(value, path, role)``; return ``True`` to walk the value's members."""


class StopWalk(Exception):
    """Raised by a visitor to end the walk at once (:func:`walk` returns normally)."""


def role_of(parent: int, key: str, value: Any) -> int:
    """The role of member ``key`` (holding ``value``) of an object in role ``parent``."""
    if parent in (SCHEMA_MAP, PATTERN_MAP):
        return SCHEMA
    if parent != SCHEMA:
        return DATA
    if key == "patternProperties":
        return PATTERN_MAP
    if key in SUBSCHEMA_MAP_KEYS:
        return SCHEMA_MAP
    if key in SUBSCHEMA_LIST_KEYS or (key == "items" and isinstance(value, list)):
        return SCHEMA_LIST
    return SCHEMA if key in SUBSCHEMA_KEYS else DATA


def walk(schema: Any, visit: Visit) -> None:
    """Visit every JSON value of ``schema`` (see the module docstring); a visitor that
    returns ``False`` skips the value's members, one that raises :class:`StopWalk` ends the
    walk. Other exceptions propagate."""
    stack: list[tuple[Any, Path, int]] = [(schema, (), SCHEMA)]
    try:
        while stack:
            value, path, role = stack.pop()
            if not visit(value, path, role):
                continue
            if isinstance(value, dict):
                members = [(item, (*path, str(key)), role_of(role, str(key), item))
                           for key, item in value.items()]
            elif isinstance(value, list):
                item_role = SCHEMA if role == SCHEMA_LIST else DATA
                members = [(item, (*path, str(i)), item_role) for i, item in enumerate(value)]
            else:
                continue
            stack.extend(reversed(members))
    except StopWalk:
        return


def pointer(path: Path) -> str:
    """The RFC 6901 JSON pointer of ``path`` (``""`` for the root)."""
    return "".join("/" + token.replace("~", "~0").replace("/", "~1") for token in path)
