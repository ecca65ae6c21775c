"""From pickle trees to a list of tensors to write: names, shapes, dtypes, and where each
tensor's elements are in the source files. Pure arithmetic: nothing is read or allocated
from the sizes here before they are checked against the storages they index.

Names: a dict's keys joined with ``.`` (``model.layers.0.weight``), list and tuple items
by index; int keys (optimizer state) written as decimal. Non-tensor leaves (numbers,
strings, ``None``) are dropped and listed in the provenance record. A container that holds
itself is refused; one reached twice (tied weights) gives its tensors under each name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from appliance.convert._dtypes import DType, output_dtype
from appliance.convert._errors import BAD_STORAGE, BAD_VIEW, UNSUPPORTED_VALUE, ConvertError
from appliance.convert._sources import Checkpoint, Storage
from appliance.convert._symbolic import StorageRef, TensorRef
from scanner.readers import Big, Finding, Glob, Made, Opaque, Seq, describe


@dataclass(frozen=True)
class Limits:
    """Bounds of one conversion: tensors named, container items visited while naming,
    bytes written as a multiple of the source files' bytes (tied weights and ``fp32``
    of 16-bit weights write more than they read)."""

    max_tensors: int = 1_000_000
    max_visits: int = 4_000_000
    max_output_factor: float = 4.0


@dataclass(frozen=True)
class TensorPlan:
    """One output tensor: ``name``; element types in and out; ``shape``; the element
    ``stride`` and ``offset`` in ``storage`` (offset in elements of the storage start)."""

    name: str
    source: str  # checkpoint file it comes from
    dtype: DType
    out: DType
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    storage: Storage

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.out.size

    @property
    def contiguous(self) -> bool:
        expect = 1
        for d, s in zip(reversed(self.shape), reversed(self.stride), strict=True):
            if d != 1 and s != expect:
                return False
            expect *= d
        return True


@dataclass
class Flat:
    """Named tensors and dropped leaves of one checkpoint, and converter findings."""

    tensors: list[tuple[str, TensorRef]]
    dropped: list[tuple[str, str]]
    findings: list[Finding]


def flatten(cp: Checkpoint, limits: Limits) -> Flat:
    """Name every tensor of ``cp.root`` (a dict); refuse cycles and values it cannot map."""
    flat = Flat([], [], [])
    if not (isinstance(cp.root, Seq) and cp.root.kind == "dict"):
        flat.findings.append(UNSUPPORTED_VALUE.finding(
            cp.name, f"the checkpoint holds {describe(cp.root)}, not a dict of tensors",
            "root"))
        return flat
    visits = 0
    path_ids: set[int] = set()

    def walk(value: object, name: str) -> None:
        nonlocal visits
        visits += 1
        if visits > limits.max_visits or len(flat.tensors) > limits.max_tensors:
            raise ConvertError(f"{cp.name}: more than {limits.max_tensors} tensors or "
                               f"{limits.max_visits} container items", code="convert_limit",
                               where=cp.name, fix="split the checkpoint into shards")
        if isinstance(value, TensorRef):
            flat.tensors.append((name, value))
        elif isinstance(value, Seq):
            if value.items is None:
                raise ConvertError(f"{cp.name}: container {name or '<root>'} is too large to "
                                   "follow", code="convert_limit", where=cp.name,
                                   fix="split the checkpoint into shards")
            if id(value) in path_ids:
                flat.findings.append(UNSUPPORTED_VALUE.finding(
                    cp.name, f"container {name or '<root>'} contains itself", name[:200]))
                return
            path_ids.add(id(value))
            try:
                _children(value, name, walk, flat, cp.name)
            finally:
                path_ids.discard(id(value))
        elif isinstance(value, (Glob, Made)):
            flat.findings.append(UNSUPPORTED_VALUE.finding(
                cp.name, f"{name} is {describe(value)}, not a tensor or plain value",
                name[:200]))
        else:
            kind = (value.kind if isinstance(value, (Big, Opaque))
                    else "storage" if isinstance(value, StorageRef) else type(value).__name__)
            flat.dropped.append((name, kind))

    walk(cp.root, "")
    return flat


def _children(value: Seq, name: str, walk: Callable[[object, str], None], flat: Flat,
              source: str) -> None:
    if value.items is None:  # pragma: no cover - checked by walk
        return
    if value.kind == "dict":
        for key, child in zip(value.items[0::2], value.items[1::2], strict=True):
            if isinstance(key, bool) or not isinstance(key, (str, int)):
                flat.findings.append(UNSUPPORTED_VALUE.finding(
                    source, f"{name or '<root>'} has a key that is {describe(key)}, not a "
                    "str or int", name[:200]))
                continue
            walk(child, f"{name}.{key}" if name else str(key))
    elif value.kind in ("list", "tuple"):
        for index, child in enumerate(value.items):
            walk(child, f"{name}.{index}" if name else str(index))
    else:
        flat.dropped.append((name, value.kind))


def plan(cp: Checkpoint, flat: Flat, target: DType | None) -> tuple[list[TensorPlan],
                                                                     list[Finding]]:
    """Bounds-check every named tensor against its storage; the write plan."""
    out: list[TensorPlan] = []
    findings: list[Finding] = []
    sizes: dict[str, int] = {}
    for name, ref in flat.tensors:
        st = ref.storage
        data = cp.storages.get(st.key)
        if data is None:
            findings.append(BAD_STORAGE.finding(
                cp.name, f"tensor {name}: storage {st.key[:80]!r} is not in the archive",
                f"storage {st.key[:80]}"))
            continue
        expect = st.numel * st.dtype.size
        if data.nbytes != expect or sizes.setdefault(st.key, st.dtype.size) != st.dtype.size:
            findings.append(BAD_STORAGE.finding(
                cp.name, f"tensor {name}: storage {st.key[:80]!r} holds {data.nbytes} bytes, "
                f"its persistent id says {st.numel} x {st.dtype.size}",
                f"storage {st.key[:80]}"))
            continue
        base, avail = (0, st.numel) if st.window is None else st.window
        numel = 1
        extent = ref.offset
        for d, s in zip(ref.shape, ref.stride, strict=True):
            numel *= d
            extent += (d - 1) * s if d else 0
        if numel and (extent >= avail) or ref.offset > avail:
            findings.append(BAD_VIEW.finding(
                cp.name, f"tensor {name}: offset {ref.offset}, shape {list(ref.shape)}, "
                f"stride {list(ref.stride)} reach element {extent} of a storage of {avail}",
                name[:200]))
            continue
        out.append(TensorPlan(name, cp.name, st.dtype, output_dtype(st.dtype, target),
                              ref.shape, ref.stride, base + ref.offset, data))
    return out, findings
