"""Checkpoint builders for the converter tests. They *write* checkpoints (torch.save, or
pickle.dumps of torch's own rebuild references, the way torch._legacy_save does); nothing
here loads one. ``raw`` gives a tensor's bytes for byte-for-byte comparisons."""

from __future__ import annotations

import collections
import io
import pickle
import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

MAGIC = 0x1950A86A20F9469CFC6C
STORAGE_CLASS = {
    torch.float64: "DoubleStorage", torch.float32: "FloatStorage", torch.float16: "HalfStorage",
    torch.bfloat16: "BFloat16Storage", torch.int64: "LongStorage", torch.int32: "IntStorage",
    torch.int16: "ShortStorage", torch.int8: "CharStorage", torch.uint8: "ByteStorage",
    torch.bool: "BoolStorage",
}


def raw(t: torch.Tensor) -> bytes:
    """The tensor's elements in C order, little-endian, as bytes."""
    flat = torch.empty(t.shape, dtype=t.dtype).copy_(t.detach()).reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def sample_state() -> dict[str, torch.Tensor]:
    """Tensors of every converted dtype, shared storages, offset views, strided views."""
    g = torch.Generator().manual_seed(7)
    base = torch.randn(6, 8, generator=g)
    emb = torch.randn(10, 4, generator=g, dtype=torch.float64)
    sd: dict[str, torch.Tensor] = collections.OrderedDict()
    sd["w.f32"] = base
    sd["w.row_view"] = base[2]  # shares base's storage, offset 16
    sd["w.slice_view"] = base[1:4, 2:6]  # offset view, non-contiguous rows
    sd["w.transposed"] = base.t()  # non-contiguous
    sd["w.stepped"] = base[:, ::3]  # stride 3 in the last dim
    sd["w.expanded"] = torch.arange(3.0).reshape(3, 1).expand(3, 5)  # stride 0
    sd["emb.f64"] = emb
    sd["emb.f64_t"] = emb.t()[1:3]
    sd["h.f16"] = torch.randn(5, 3, generator=g).half()
    sd["h.bf16"] = torch.randn(4, 7, generator=g).bfloat16()
    sd["h.bf16_t"] = sd["h.bf16"].t()
    sd["q.i8"] = torch.randint(-128, 127, (9, 4), generator=g, dtype=torch.int8)
    sd["q.u8"] = torch.randint(0, 255, (5,), generator=g, dtype=torch.uint8)
    sd["q.i16"] = torch.randint(-3000, 3000, (3, 3), generator=g, dtype=torch.int16)
    sd["q.i32"] = torch.randint(-10**6, 10**6, (4,), generator=g, dtype=torch.int32)
    sd["q.i64"] = torch.arange(12, dtype=torch.int64).reshape(3, 4)[:, 1:]
    sd["mask"] = torch.tensor([True, False, True])
    sd["scalar"] = torch.tensor(3.5)
    sd["empty"] = torch.zeros(0, 4)
    return sd


def special_floats() -> torch.Tensor:
    """Values where rounding differs: NaN, infinities, subnormals, halfway cases."""
    vals = [0.0, -0.0, 1.0, -2.5, float("inf"), float("-inf"), float("nan"), 1e-40, 3e38,
            65504.0, 65520.0, 1.00390625, 1.01171875, 6e-8, 1e-5, 0.1, 1 / 3]
    return torch.tensor(vals, dtype=torch.float32)


# -- hand-built checkpoints (both layouts, either byte order) --------------------------

class _Storage:
    """Stands for one storage in the pickle (a persistent id)."""

    def __init__(self, key: str, dtype: torch.dtype, numel: int) -> None:
        self.key, self.dtype, self.numel = key, dtype, numel


class _Rebuild:
    """Reduces to torch._utils._rebuild_tensor_v2(storage, offset, size, stride, False,
    OrderedDict()), the call torch.save writes for a tensor."""

    def __init__(self, storage: _Storage, t: torch.Tensor, v1: bool = False) -> None:
        self.v1 = v1
        self.args: tuple[Any, ...] = (storage, t.storage_offset(), tuple(t.size()),
                                      tuple(t.stride()), False, collections.OrderedDict())

    def __reduce__(self) -> tuple[Any, ...]:
        if self.v1:  # torch < 0.4: _rebuild_tensor(storage, offset, size, stride)
            return (torch._utils._rebuild_tensor, self.args[:4])
        return (torch._utils._rebuild_tensor_v2, self.args)


class _Pickler(pickle.Pickler):
    def __init__(self, f: io.BytesIO, legacy: bool, numel_delta: int = 0) -> None:
        super().__init__(f, protocol=2)
        self.legacy = legacy
        self.numel_delta = numel_delta

    def persistent_id(self, obj: object) -> object:
        if isinstance(obj, _Storage):
            cls = getattr(torch, STORAGE_CLASS[obj.dtype])
            pid = ("storage", cls, obj.key, "cpu", obj.numel + self.numel_delta)
            return (*pid, None) if self.legacy else pid
        return None


Stored = dict[str, tuple[torch.dtype, bytes]]


def _storages(state: dict[str, torch.Tensor], v1: bool = False) -> tuple[dict[str, Any], Stored]:
    keys: dict[int, _Storage] = {}
    data: dict[str, tuple[torch.dtype, bytes]] = {}
    tree: dict[str, Any] = collections.OrderedDict()
    for name, t in state.items():
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in keys:
            key = str(len(keys))
            numel = st.nbytes() // t.element_size()
            keys[ptr] = _Storage(key, t.dtype, numel)
            whole = torch.empty(0, dtype=t.dtype).set_(st, 0, (numel,), (1,))
            data[key] = (t.dtype, raw(whole))
        tree[name] = _Rebuild(keys[ptr], t, v1)
    return tree, data


def _swap(dtype: torch.dtype, data: bytes) -> bytes:
    size = torch.empty(0, dtype=dtype).element_size()
    if size == 1:
        return data
    return np.frombuffer(data, dtype=f"<u{size}").byteswap().tobytes()


def main_pickle(obj: object, legacy: bool, numel_delta: int = 0) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf, legacy, numel_delta).dump(obj)
    return buf.getvalue()


def legacy_bytes(state: dict[str, torch.Tensor], *, big_endian: bool = False,
                 big_writer: bool | None = None, v1: bool = False) -> bytes:
    """A legacy (pre-1.6) torch.save file of ``state``; ``big_endian``: as a big-endian
    torch < 0.4 wrote it (sys_info little_endian False; counts and data big-endian).
    ``big_writer``: what sys_info says (default: ``big_endian``); ``v1``: tensors rebuilt
    with torch < 0.4's ``_rebuild_tensor``."""
    tree, data = _storages(state, v1)
    big_writer = big_endian if big_writer is None else big_writer
    info = {"protocol_version": 1001, "little_endian": not big_writer,
            "type_sizes": {"short": 2, "int": 4, "long": 4}}
    out = pickle.dumps(MAGIC, protocol=2) + pickle.dumps(1001, protocol=2)
    out += pickle.dumps(info, protocol=2) + main_pickle(tree, legacy=True)
    out += pickle.dumps(list(data), protocol=2)
    for key, (dtype, body) in data.items():
        numel = len(body) // torch.empty(0, dtype=dtype).element_size()
        out += struct.pack(">q" if big_endian else "<q", numel)
        out += _swap(dtype, body) if big_endian else body
    return out


def zip_bytes(state: dict[str, torch.Tensor] | None = None, *, big_endian: bool = False,
              pickle_bytes: bytes | None = None, top: str = "archive",
              extra: dict[str, bytes] | None = None, numel_delta: int = 0,
              shape: tuple[int, ...] | None = None) -> bytes:
    """A torch zip checkpoint of ``state`` (or of ``pickle_bytes`` with no storages).
    ``numel_delta`` is added to every persistent id's element count; ``shape`` replaces
    every tensor's size (with its stride kept): both make lying checkpoints."""
    data: dict[str, tuple[torch.dtype, bytes]] = {}
    if state is not None:
        tree, data = _storages(state)
        if shape is not None:
            for rebuild in tree.values():
                args = list(rebuild.args)
                args[2] = shape
                rebuild.args = tuple(args)
        pickle_bytes = main_pickle(tree, legacy=False, numel_delta=numel_delta)
    assert pickle_bytes is not None
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{top}/data.pkl", pickle_bytes)
        z.writestr(f"{top}/byteorder", "big" if big_endian else "little")
        for key, (dtype, body) in data.items():
            z.writestr(f"{top}/data/{key}", _swap(dtype, body) if big_endian else body)
        for name, body in (extra or {}).items():
            z.writestr(f"{top}/{name}", body)
        z.writestr(f"{top}/version", "3\n")
    return buf.getvalue()


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path
