"""Symbolic values of the pickle interpreter (``scanner.formats.pickle.vm``).

Plain constants are pushed as Python values (``int``, ``str``, ``bytes``, ``bool``,
``None``); everything else is one of the classes below. No value ever holds an imported
object: a global is only its name.
"""

from __future__ import annotations

from scanner.core.allowlist import Entry


class Bad(Exception):
    """The stream violates the pickle format at the current opcode."""


class Glob:
    """A global named by GLOBAL / STACK_GLOBAL / INST (``entry`` is ``None`` when denied)."""

    __slots__ = ("qualname", "entry", "offset")

    def __init__(self, qualname: str, entry: Entry | None, offset: int) -> None:
        self.qualname = qualname
        self.entry = entry
        self.offset = offset


class Made:
    """An object created at load time: a call result, a persistent id, an EXT lookup.

    ``entry`` is the allowlisted callable that made it, or ``None`` (denied/unknown);
    ``detail`` is a small literal argument kept for later checks (a ``numpy.dtype`` type
    string, used to size joblib's raw arrays)."""

    __slots__ = ("origin", "entry", "detail")

    def __init__(self, origin: str, entry: Entry | None, detail: object = None) -> None:
        self.origin = origin
        self.entry = entry
        self.detail = detail


class Seq:
    """A tuple, list, dict, set or frozenset built by the pickle.

    ``items`` keeps the elements (for dicts: keys and values interleaved) while the
    interpreter's retention budget allows, else ``None``; ``n`` counts them anyway.
    ``dunder`` is set when a dict gets a ``__dunder__``-style string key."""

    __slots__ = ("kind", "items", "n", "dunder")

    def __init__(self, kind: str, items: list[object] | None, n: int = 0) -> None:
        self.kind = kind
        self.items = items
        self.n = n
        self.dunder = False


class Big:
    """A constant too large to keep (``kind``: ``str``, ``bytes`` or ``int``)."""

    __slots__ = ("kind", "length")

    def __init__(self, kind: str, length: int) -> None:
        self.kind = kind
        self.length = length


class Opaque:
    """A value whose content never matters (floats, buffers)."""

    __slots__ = ("kind",)

    def __init__(self, kind: str) -> None:
        self.kind = kind


FLOAT = Opaque("float")


def is_dunder_key(key: object) -> bool:
    """Whether a dict key names a dunder attribute (``__class__``, ``__dict__`` ...)."""
    return isinstance(key, str) and key.startswith("__")


def describe(value: object) -> str:
    """Short human description of a value for messages and evidence."""
    if isinstance(value, Glob):
        return value.qualname
    if isinstance(value, Made):
        return f"result of {value.origin}"
    if isinstance(value, Seq):
        return f"a {value.kind}"
    if isinstance(value, Big):
        return f"a {value.length}-byte {value.kind} constant"
    if isinstance(value, Opaque):
        return f"a {value.kind}"
    if value is None:
        return "None"
    return f"a {type(value).__name__} constant {_short(value)}"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
