"""Python ``logging.config.dictConfig`` configs inside model configs: the callables it
imports and calls, judged like config targets (``scanner.formats.targets``).

Where a dictConfig is (its "root"): a mapping with ``version: 1`` (the schema's required
key; ``dictConfig`` refuses any other version, and ``True``/``1.0`` compare equal to 1 as
they do there), at any depth of any JSON or YAML config; and Hydra's ``hydra.job_logging``
/ ``hydra.hydra_logging`` (``hydra.core.utils.configure_log`` resolves the node and hands
it to ``dictConfig``).

What ``dictConfig`` imports and calls below a root (CPython ``Lib/logging/config.py``,
``DictConfigurator``):

- ``()`` in a formatter, filter or handler (``configure_custom``): the factory, resolved
  by ``BaseConfigurator.resolve`` (import the first part, then ``getattr``/import along
  the rest, as Hydra's ``_locate``), called with the entry's other keys as keyword
  arguments. Any ``()`` below a root is judged; outside one, a ``()`` holding a dotted path
  (application code may hand that mapping to ``dictConfig`` on its own);
- ``class`` of a handler (``configure_handler``: called with the entry's keys) and of a
  formatter (``configure_formatter``: called with the format strings);
- ``ext://a.b`` values (``BaseConfigurator.ext_convert``: imported when the entry is read,
  e.g. ``stream: ext://sys.stdout``); a ``cfg://`` factory or class names another node
  of the config, resolved at load time (``config.dynamic_target``).

A name is accepted when ``allowlist.classify_logging`` accepts it (the standard library's
stream, file and memory handlers, ``logging.Formatter``/``Filter``, ``sys.stdout``/
``stderr``, and every config target the allowlist tiers accept); otherwise the finding is
``config.unsafe_target`` / ``config.unknown_target`` as for a Hydra ``_target_``. Other
dictConfig gadgets are not read (3.12's ``QueueHandler`` ``queue``/``listener`` strings).

The walk itself is ``scanner.formats.text.json_findings``: it gives every container a
role (``child_role``) and asks ``callable_of`` which member names a callable.
"""

from __future__ import annotations

from scanner.core.allowlist import classify_logging
from scanner.core.model import Finding
from scanner.formats import targets

FACTORY_KEY = "()"
CLASS_KEY = "class"
KEYS = frozenset({FACTORY_KEY, CLASS_KEY})  # keys the JSON walk must visit
ROOT = "root"  # the document itself (``hydra`` below it)
HYDRA_KEYS = frozenset({"job_logging", "hydra_logging"})
_SECTIONS = {"formatters": "formatter", "filters": "filter", "handlers": "handler"}
_CLASS_ROLES = frozenset({"formatter", "handler"})
# roles of a dictConfig root and every container below it
ROLES = frozenset({"log", "inner", *_SECTIONS, *_SECTIONS.values()})
_EXT, _CFG = "ext://", "cfg://"


def is_version_one(value: object) -> bool:
    """Whether ``version: value`` makes a mapping a dictConfig (``dictConfig`` accepts
    exactly ``version == 1``: ``1``, ``1.0`` and ``True`` alike, never ``"1"``)."""
    return value == 1


def _is_root(node: object) -> bool:
    return isinstance(node, dict) and is_version_one(node.get("version"))


def root_role(doc: object) -> str:
    """The role of a whole document: a dictConfig root, or ``ROOT``."""
    return "log" if _is_root(doc) else ROOT


def child_role(role: str | None, key: object, child: object) -> str | None:
    """The role of container ``child`` found under ``key`` of a container of ``role``
    (``None``: nothing dictConfig reads)."""
    if _is_root(child):
        return "log"
    if role is None:
        return None
    if role == ROOT:
        return "hydra" if key == "hydra" else None
    if role == "hydra":
        return "log" if key in HYDRA_KEYS else None
    if role == "log":
        return key if isinstance(key, str) and key in _SECTIONS else "inner"
    if role in _SECTIONS:
        return _SECTIONS[role]
    return "inner" if role in ROLES else None


def callable_of(role: str | None, key: object, value: object) -> str | None:
    """The callable that ``dictConfig`` would import for member ``key: value`` of a
    mapping of ``role`` (the value as written, ``ext://``/``cfg://`` included), or
    ``None``."""
    if not isinstance(value, str):
        return None
    inside = role is not None and role in ROLES
    if key == FACTORY_KEY:
        if inside or value.startswith((_EXT, _CFG)) or targets.IMPORT_PATH.fullmatch(
                value.strip()) is not None:
            return value
        return None
    if not inside:
        return None
    if key == CLASS_KEY and role in _CLASS_ROLES:
        return value
    return value if value.startswith(_EXT) else None


def judge(path: str, ptr: str, value: str) -> list[Finding]:
    """Findings for one callable ``value`` (from ``callable_of``) at pointer ``ptr``."""
    if value.startswith(_CFG):
        return [targets.DYNAMIC_TARGET.finding(
            path, f"{ptr} is a cfg:// reference that logging.config.dictConfig resolves "
            f"at load time: {value[:120]!r}", f"{ptr}: {value}"[:300])]
    name = value[len(_EXT):] if value.startswith(_EXT) else value
    return targets.judge_target(path, ptr, name, " (logging.config.dictConfig)",
                                classify=classify_logging)
