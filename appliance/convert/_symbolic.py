"""The checkpoint's pickle read by the scanner's symbolic interpreter, keeping what a
conversion needs: which storages each tensor views, and the dict tree of names.

:class:`Recorder` is the scanner's :class:`~scanner.readers.PickleMachine` (same
opcodes, memo, limits and findings: a global outside the scanner's allowlist is still
``pickle.unsafe_global``) with a stricter, smaller allowlist of calls, whose results it
keeps as values instead of opaque markers:

- ``collections.OrderedDict()`` -> a dict (filled by SETITEMS; BUILD may only set
  ``_metadata``, torch's ``state_dict`` version record, which is dropped);
- persistent id ``('storage', torch.<T>Storage, key, location, numel[, view])`` ->
  :class:`StorageRef` (legacy files may add ``(view_key, offset, numel)``);
- ``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad,
  OrderedDict()[, {}])`` and ``_rebuild_tensor(storage, offset, size, stride)`` ->
  :class:`TensorRef`; ``_rebuild_parameter(tensor, requires_grad, OrderedDict())`` -> the
  tensor.

Any other call, a persistent id of another shape, BUILD on anything but an OrderedDict,
or item assignment on a non-container is a ``convert.*`` finding (the scanner's own
findings come first). Nothing is imported or called: values are names and literals.
Source: torch ``_utils.py`` (rebuild signatures), ``_tensor.py`` ``_reduce_ex_internal``
(what torch.save writes), ``serialization.py`` ``persistent_load`` (both layouts).
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.convert._dtypes import STORAGE_DTYPES, DType
from appliance.convert._errors import UNSUPPORTED_CALL, UNSUPPORTED_VALUE
from scanner.readers import PICKLE_OPCODES as _TABLE
from scanner.readers import Blob, Finding, Glob, Made, ScanContext, Seq, describe
from scanner.readers import PickleMachine as Machine

REBUILD_V2 = "torch._utils._rebuild_tensor_v2"
REBUILD_V1 = "torch._utils._rebuild_tensor"
REBUILD_PARAMETER = "torch._utils._rebuild_parameter"
ORDERED_DICT = "collections.OrderedDict"
MAX_NDIM = 64
_SCANNER_BUILD = _TABLE[ord(b"b")]  # the scanner's own BUILD handler, run after the check


@dataclass(frozen=True)
class StorageRef:
    """A storage named by a persistent id: ``key`` of its bytes in the archive, element
    type, ``numel`` elements; for a legacy storage view, the window ``(offset, numel)``
    in elements of the root storage ``key``."""

    key: str
    dtype: DType
    numel: int
    window: tuple[int, int] | None = None


@dataclass(frozen=True)
class TensorRef:
    """A tensor view: ``storage``, element ``offset``, ``shape`` and ``stride`` (elements)."""

    storage: StorageRef
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]


def _ints(value: object) -> tuple[int, ...] | None:
    """A tuple of non-negative ints (``torch.Size`` / ``tuple`` literal), else ``None``."""
    if not (isinstance(value, Seq) and value.kind == "tuple" and value.items is not None):
        return None
    items = value.items
    if len(items) > MAX_NDIM or not all(type(v) is int and v >= 0 for v in items):
        return None
    return tuple(items)  # type: ignore[arg-type]


def _build(m: Machine, code: int) -> bool | None:
    if isinstance(m, Recorder) and len(m.stack) >= 2:
        m.check_build(m.stack[-2], m.stack[-1])
    return _SCANNER_BUILD(m, code)


class Recorder(Machine):
    """Interpret one pickle stream of a checkpoint; ``run().value`` is the root value
    (dicts as ``Seq``, tensors as :class:`TensorRef`), ``run().findings`` the scanner's
    and the converter's findings. ``legacy``: persistent ids may carry a storage view."""

    table = {**_TABLE, ord(b"b"): _build}

    def __init__(self, ctx: ScanContext, blob: Blob, start: int, *, legacy: bool) -> None:
        super().__init__(ctx, blob, start, persistent_ids=True)
        self.legacy = legacy
        self.odicts: dict[int, Seq] = {}  # id -> OrderedDict made by the pickle (kept alive)

    def refuse(self, message: str, evidence: str, *, call: bool = False) -> None:
        """Add a converter finding (deduplicated with the scanner's own)."""
        self.report(UNSUPPORTED_CALL if call else UNSUPPORTED_VALUE, message, evidence)

    # -- persistent ids ------------------------------------------------------------

    def persistent(self, pid: object) -> None:
        before = len(self.res.findings)
        super().persistent(pid)
        self.pop()
        ref = self._storage(pid) if len(self.res.findings) == before else None
        self.push(ref if ref is not None else Made("persistent id", None))

    def _storage(self, pid: object) -> StorageRef | None:
        items = pid.items if isinstance(pid, Seq) and pid.items is not None else []
        typ = items[1] if len(items) > 1 else None
        dtype = STORAGE_DTYPES.get(typ.qualname) if isinstance(typ, Glob) else None
        if dtype is None:
            self.refuse(f"storage type {describe(typ)} has no safetensors dtype (complex, "
                        "quantized and float8 storages are not converted)", describe(typ))
            return None
        key, numel = items[2], items[4]
        if not isinstance(key, str) or type(numel) is not int:  # pragma: no cover - scanner
            return None
        view = items[5] if len(items) == 6 else None
        if view is None:
            return StorageRef(key, dtype, numel)
        parts = view.items if isinstance(view, Seq) and view.kind == "tuple" else None
        if (not self.legacy or parts is None or len(parts) != 3
                or not isinstance(parts[0], str)
                or not all(type(v) is int and v >= 0 for v in parts[1:])):
            self.refuse(f"storage view metadata {describe(view)} is not (key, offset, numel)"
                        " of a legacy checkpoint", "storage view")
            return None
        offset, size = parts[1], parts[2]
        if not isinstance(offset, int) or not isinstance(size, int):  # pragma: no cover
            return None
        if offset + size > numel:
            self.refuse(f"storage view ({offset}, {size}) runs past its storage of {numel} "
                        "elements", "storage view")
            return None
        return StorageRef(key, dtype, numel, (offset, size))

    # -- calls -----------------------------------------------------------------------

    def call(self, func: object, args: object, how: str) -> None:
        name = func.qualname if isinstance(func, Glob) and func.entry is not None else None
        items = args.items if (isinstance(args, Seq) and args.kind == "tuple") else None
        result: object = None
        if how == "REDUCE" and items is not None:
            if name == ORDERED_DICT and not items:
                result = self.seq("dict", [])
                self.odicts[id(result)] = result
            elif name in (REBUILD_V2, REBUILD_V1):
                result = self._tensor(name, items)
            elif name == REBUILD_PARAMETER:
                result = self._parameter(items)
        if result is not None:
            self.res.n_calls += 1
            self.push(result)
            return
        before = len(self.res.findings)
        super().call(func, args, how)
        if len(self.res.findings) == before:
            self.refuse(f"{how} calls {describe(func)}: outside the converter's allowlist "
                        "(tensor rebuilds over storages with literal sizes, an empty "
                        "OrderedDict)", describe(func), call=True)

    def _tensor(self, name: str, items: list[object]) -> TensorRef | None:
        n = 4 if name == REBUILD_V1 else len(items)
        if len(items) != n or n not in (4, 6, 7):
            return None
        storage, offset = items[0], items[1]
        shape, stride = _ints(items[2]), _ints(items[3])
        if not (isinstance(storage, StorageRef) and type(offset) is int and offset >= 0
                and shape is not None and stride is not None and len(shape) == len(stride)):
            return None
        if n >= 6 and not (type(items[4]) is bool and self._empty_odict(items[5])):
            return None  # requires_grad, then backward hooks (an empty OrderedDict)
        if n == 7 and not (isinstance(items[6], Seq) and items[6].kind == "dict"
                           and items[6].n == 0):
            return None  # tensor metadata (conj/neg bits ...) would change the values
        return TensorRef(storage, offset, shape, stride)

    def _parameter(self, items: list[object]) -> TensorRef | None:
        if (len(items) == 3 and isinstance(items[0], TensorRef) and type(items[1]) is bool
                and self._empty_odict(items[2])):
            return items[0]
        return None

    def _empty_odict(self, value: object) -> bool:
        return isinstance(value, Seq) and id(value) in self.odicts and value.n == 0

    # -- state -------------------------------------------------------------------------

    def check_build(self, inst: object, state: object) -> None:
        """BUILD may only give an OrderedDict its ``_metadata`` attribute."""
        if isinstance(inst, Seq) and id(inst) in self.odicts and isinstance(state, Seq) \
                and state.kind == "dict" and state.items is not None \
                and all(k == "_metadata" for k in state.items[0::2]):
            return
        self.refuse(f"BUILD sets {describe(state)} on {describe(inst)}: only an "
                    "OrderedDict's _metadata is accepted", f"BUILD on {describe(inst)}")

    def mutate(self, target: object, how: str, items: list[object], keys: bool) -> None:
        if not isinstance(target, (Seq, Glob)):
            self.refuse(f"{how} on {describe(target)}, which is not a container",
                        f"{how} on {describe(target)}")
        super().mutate(target, how, items, keys)


def interpret(ctx: ScanContext, blob: Blob, start: int, *, legacy: bool) -> tuple[
    object, int, list[Finding]
]:
    """Run :class:`Recorder` on the stream at ``start``: (root value, end offset, findings).
    A stream that does not reach STOP has findings (truncated, malformed, limit)."""
    res = Recorder(ctx, blob, start, legacy=legacy).run()
    return res.value, res.end, res.findings
