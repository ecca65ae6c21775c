"""The pickle global allowlist: the names a plain tensor checkpoint needs (and the few
plain-value constructors the pickle protocols themselves emit).

Default deny. Entries are keyed by fully-qualified name (``module.name`` exactly as the
pickle's GLOBAL / STACK_GLOBAL / INST names it, after Python 2 name mapping), never by
package: ``torch._utils._rebuild_tensor_v2`` is allowed, ``torch._utils`` as a whole is not.
A dotted ``name`` (an attribute walk such as ``zipfile`` + ``os.system``) or a dunder name
(``numpy.__builtins__``) is never allowed, whatever its module.

A pickle made only of these names is still refused (``format.pickle_not_allowed``: pickle
weights are never served) but is *policy*, i.e. convertible to safetensors; any other name
is *malicious* (``pickle.unsafe_global``).

Each entry says how the name may be used:

- ``call``: it may be called (REDUCE, OBJ, INST, NEWOBJ, NEWOBJ_EX);
- ``ref``: it may only appear as a value (a storage type tag in a persistent id, the
  ``subtype`` argument of ``_reconstruct``); calling it is ``pickle.unsafe_call``.

``args`` names an argument check done by the interpreter (see ``scanner._pickle_vm``).
Deliberately absent (each of these can load or run something, or is not needed by a
plain ``torch.save(state_dict)``): ``torch.storage._load_from_bytes`` (calls
``torch.load`` on embedded bytes), ``torch._tensor._rebuild_from_type_v2`` (calls an
argument), ``torch._utils._rebuild_parameter_with_state`` (``setattr`` of arbitrary
names), ``torch.device`` and dtypes (not used by a tensor state dict), every ``builtins``
name except the five plain-value constructors below (with argument checks),
``functools.partial``, ``operator.*``, ``copyreg.*``.

Protocol < 3 pickles name builtins ``__builtin__.*``; the interpreter maps them like
``pickle`` does (``_compat_pickle``) before the lookup.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """One allowlisted global: its qualified name, allowed uses, and why it is safe.

    ``storage_bytes`` is the element size in bytes for torch storage type tags (used to
    check the legacy raw storage layout), else ``None``.
    """

    qualname: str
    uses: frozenset[str]
    reason: str
    args: str | None = None
    storage_bytes: int | None = None


CALL = frozenset({"call"})
REF = frozenset({"ref"})

# Element sizes of the typed storage classes torch.save writes as persistent-id tags
# (torch/storage.py ``_pickle_storage_type`` and the legacy ``torch.*Storage`` classes).
_STORAGE_BYTES: dict[str, int] = {
    "DoubleStorage": 8,
    "FloatStorage": 4,
    "HalfStorage": 2,
    "BFloat16Storage": 2,
    "LongStorage": 8,
    "IntStorage": 4,
    "ShortStorage": 2,
    "CharStorage": 1,
    "ByteStorage": 1,
    "BoolStorage": 1,
    "ComplexDoubleStorage": 16,
    "ComplexFloatStorage": 8,
    "QUInt8Storage": 1,
    "QInt8Storage": 1,
    "QInt32Storage": 4,
    "QUInt4x2Storage": 1,
    "QUInt2x4Storage": 1,
    "UntypedStorage": 1,
}

_STORAGE_REASON = (
    "storage type tag inside a torch persistent id ('storage', type, key, location, "
    "numel); torch's persistent_load only reads its dtype, the class is never called"
)

_ENTRIES: list[Entry] = [
    Entry(
        "collections.OrderedDict", CALL,
        "state_dict container (OrderedDict() then SETITEMS, BUILD with _metadata); "
        "constructing and filling a dict runs no code from the pickle",
    ),
    Entry(
        "torch._utils._rebuild_tensor_v2", CALL,
        "rebuilds a tensor view (offset, size, stride, requires_grad, hooks) over a "
        "storage delivered by persistent id; torch bounds-checks the view; it calls "
        "nothing taken from its arguments",
    ),
    Entry(
        "torch._utils._rebuild_parameter", CALL,
        "wraps a rebuilt tensor in nn.Parameter(data, requires_grad); hooks are stored, "
        "not called, and can only hold other allowlisted values",
    ),
    Entry(
        "torch.Size", CALL,
        "tuple subclass of ints (shapes in checkpoint metadata)",
    ),
    Entry(
        "numpy.core.multiarray._reconstruct", CALL,
        "ndarray.__reduce__ helper (numpy < 2): allocates an empty array of subtype "
        "numpy.ndarray; contents come from BUILD -> ndarray.__setstate__",
        args="ndarray_subtype",
    ),
    Entry(
        "numpy._core.multiarray._reconstruct", CALL,
        "same helper under its numpy >= 2 module name",
        args="ndarray_subtype",
    ),
    Entry(
        "numpy.core.multiarray.scalar", CALL,
        "numpy scalar from (dtype, raw bytes) (numpy < 2); copies bytes, calls nothing",
    ),
    Entry(
        "numpy._core.multiarray.scalar", CALL,
        "same helper under its numpy >= 2 module name",
    ),
    Entry(
        "numpy.core.numeric._frombuffer", CALL,
        "ndarray.__reduce_ex__(5) helper (numpy < 2): frombuffer(bytes, dtype).reshape("
        "shape, order); copies nothing it does not get, calls nothing",
    ),
    Entry(
        "numpy._core.numeric._frombuffer", CALL,
        "same helper under its numpy >= 2 module name",
    ),
    Entry(
        "numpy.dtype", CALL,
        "dtype from a type string such as 'f4' (dtype.__reduce__); parses the string, "
        "calls nothing",
        args="dtype_string",
    ),
    Entry(
        "numpy.ndarray", REF,
        "only as the subtype argument of _reconstruct; calling it directly is refused",
    ),
    Entry(
        "_codecs.encode", CALL,
        "protocol-2 pickles carry ndarray bytes as _codecs.encode(str, 'latin1'); only "
        "that exact encoding is accepted (other codecs can decompress or import)",
        args="latin1",
    ),
    Entry(
        "builtins.set", CALL,
        "protocol < 4 encoding of a set: set([items]); only a list literal is accepted",
        args="list_literal",
    ),
    Entry(
        "builtins.frozenset", CALL,
        "protocol < 4 encoding of a frozenset: frozenset([items]); list literal only",
        args="list_literal",
    ),
    Entry(
        "builtins.bytearray", CALL,
        "protocol < 5 encoding of a bytearray: bytearray(bytes) or bytearray(str, "
        "'latin-1'); an integer size (allocation) is refused",
        args="bytearray",
    ),
    Entry(
        "builtins.bytes", CALL,
        "protocol < 3 encoding of b'': bytes(); only the empty call is accepted",
        args="empty",
    ),
    Entry(
        "builtins.complex", CALL,
        "complex(real, imag) from two number literals",
        args="numbers",
    ),
]
_ENTRIES += [
    Entry(f"torch.{name}", REF, _STORAGE_REASON, storage_bytes=size)
    for name, size in _STORAGE_BYTES.items()
]

ALLOWLIST: dict[str, Entry] = {entry.qualname: entry for entry in _ENTRIES}


def lookup(module: str, name: str) -> Entry | None:
    """The allowlist entry for the global ``module`` + ``name``, or ``None`` (deny).

    ``name`` containing ``.`` (attribute walk) or any dunder part is always denied, as is
    a module with a dunder component (``deny_reason`` says which). Matching is exact,
    case-sensitive.
    """
    if not module or not name or deny_reason(module, name) is not None:
        return None
    return ALLOWLIST.get(f"{module}.{name}")


def deny_reason(module: str, name: str) -> str | None:
    """Why ``module`` + ``name`` is denied whatever the allowlist holds, or ``None``."""
    if "." in name:
        return "a dotted name (attribute walk), never allowlisted"
    if _dunder(name) or any(_dunder(part) for part in module.split(".")):
        return "a dunder name, never allowlisted"
    return None


def _dunder(part: str) -> bool:
    return part.startswith("__") or part.endswith("__")
