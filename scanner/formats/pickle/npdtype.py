"""NumPy dtypes as a pickle builds them: ``numpy.dtype(type_string, align, copy)`` then
BUILD with the pickled state, sized exactly as NumPy applies that state.

Source: ``numpy.dtype.__reduce__`` / ``__setstate__`` (``arraydescr_setstate`` in
``numpy/_core/src/multiarray/descriptor.c``), checked against NumPy 2.3 by calling
``__setstate__`` on dtypes built from literals. The state is ``(version, endian, subarray,
names, fields, elsize, alignment[, flags[, metadata]])`` (version 3 has flags, version 4
metadata). NumPy takes ``elsize`` only for flexible types (``S``, ``a``, ``U``, ``V``:
structured and subarray dtypes are ``V``); their ``hasobject`` comes from ``flags & 1``
(``NPY_ITEM_HASOBJECT``) for version >= 3, and from the fields' dtypes before that. Other
types keep their own size, and only ``O`` has objects, whatever the state says. A dtype
with objects makes joblib unpickle the array (``NumpyArrayWrapper.read_array``): the bytes
after the wrapper are a pickle, not raw data.
"""

from __future__ import annotations

import re

from scanner.formats.pickle.values import Bad, Made, Seq

_TYPE = re.compile(r"[<>|=]?([biufcmMSaUVO?])(\d{0,6})(?:\[\w+\])?")
_FIXED = {"b": 1, "?": 1, "O": 8, "m": 8, "M": 8}
FLEXIBLE = frozenset("SaUV")
HASOBJECT = 0x01  # NPY_ITEM_HASOBJECT


class DType:
    """A dtype's element size in bytes (``None`` when unknown) and whether it holds
    Python objects. ``kind`` is the type letter; ``state`` whether BUILD applied a state."""

    __slots__ = ("kind", "itemsize", "hasobject", "state", "big_endian")

    def __init__(self, kind: str, itemsize: int | None, hasobject: bool,
                 big_endian: bool = False) -> None:
        self.kind = kind
        self.itemsize = itemsize
        self.hasobject = hasobject
        self.state = False
        self.big_endian = big_endian

    def __repr__(self) -> str:
        return f"DType({self.kind!r}, {self.itemsize}, hasobject={self.hasobject})"


def from_type(text: object) -> DType | None:
    """The dtype ``numpy.dtype(text)`` makes before any state ('f8', 'i4', 'b1', 'U5'
    (5 UCS-4 characters), 'S3', 'V16', 'O8'); ``None`` for a string NumPy would not take
    here (names such as 'float64' are not what ``__reduce__`` writes)."""
    if not isinstance(text, str):
        return None
    m = _TYPE.fullmatch(text)
    if m is None:
        return None
    kind, digits = m.group(1), m.group(2)
    if kind == "O":
        return DType("O", 8, True)
    if digits:
        size = int(digits) * (4 if kind == "U" else 1)
    elif kind in _FIXED:
        size = _FIXED[kind]
    elif kind in FLEXIBLE:
        size = 0
    else:
        return None
    return DType(kind, size, False, text.startswith(">"))


def apply_state(dtype: DType, state: object) -> None:
    """Apply a pickled ``__setstate__`` tuple to ``dtype`` as NumPy does. Raises ``Bad``
    for a state NumPy refuses (the load stops there). An ``elsize`` that is not a literal
    int leaves ``itemsize`` unknown (``None``); flags that are not one make ``hasobject``
    true (the bytes are then analysed as a pickle: fail closed)."""
    items = state.items if isinstance(state, Seq) and state.kind == "tuple" else None
    if items is None or len(items) not in (5, 6, 7, 8, 9):
        raise Bad("numpy.dtype state is not a tuple of 5 to 9 items")
    version = items[0]
    if not isinstance(version, int) or isinstance(version, bool):
        raise Bad("numpy.dtype state version is not an int")
    dtype.state = True
    if items[1] in (">", "<", "|", "="):
        dtype.big_endian = items[1] == ">"
    if dtype.kind not in FLEXIBLE:
        return  # elsize, alignment and flags are ignored for fixed-size types
    if len(items) < 7:
        raise Bad("flexible numpy.dtype state has no elsize")
    elsize = items[5]
    if isinstance(elsize, int) and not isinstance(elsize, bool) and elsize < 0:
        raise Bad(f"numpy.dtype elsize {elsize} is negative")
    literal = isinstance(elsize, int) and not isinstance(elsize, bool)
    dtype.itemsize = elsize if literal else None  # type: ignore[assignment]
    if version >= 3 and len(items) >= 8:
        flags = items[7]
        if not isinstance(flags, int) or isinstance(flags, bool):
            dtype.hasobject = True
            return
        if flags < 0:
            flags += 128  # NumPy stored flags as a signed char once
        dtype.hasobject = bool(flags & HASOBJECT)
    else:
        dtype.hasobject = _fields_have_objects(items[4])


def scalar_int(dtype: object, data: object) -> int | None:
    """The value of ``numpy.core.multiarray.scalar(dtype, data)`` for an integer dtype
    and a bytes literal of its size (how NumPy pickles an ``np.int64`` such as a shape
    dimension), else ``None``."""
    detail = dtype.detail if isinstance(dtype, Made) else None
    if not (isinstance(detail, DType) and detail.kind in "iu" and isinstance(data, bytes)
            and len(data) == detail.itemsize):
        return None
    return int.from_bytes(data, "big" if detail.big_endian else "little",
                          signed=detail.kind == "i")


def _fields_have_objects(fields: object) -> bool:
    """Pre-version-3 states: NumPy looks for object dtypes among the fields
    (``{name: (dtype, offset[, title])}``); a field dtype it cannot see is taken as one."""
    if fields is None:
        return False
    if not (isinstance(fields, Seq) and fields.kind == "dict" and fields.items is not None):
        return True
    for value in fields.items[1::2]:
        sub = value.items[0] if (isinstance(value, Seq) and value.items) else None
        detail = sub.detail if isinstance(sub, Made) else None
        if not isinstance(detail, DType) or detail.hasobject:
            return True
    return False
