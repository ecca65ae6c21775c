"""Element types: torch storage type tags -> safetensors dtypes, and chunked conversions.

``STORAGE_DTYPES`` maps the storage class a persistent id names (``torch.FloatStorage``,
torch/storage.py ``_pickle_storage_type``) to a :class:`DType`. Complex, quantized and
float8 storages are not mapped (safetensors 0.8 has no complex type; quantized storages
need scales the state dict keeps elsewhere): such a checkpoint is refused as unsupported.

Conversions (``--dtype``) apply to floating tensors only and round like torch's CPU copy
kernel: float64 goes through float32 first (c10::Half / c10::BFloat16 are built from a
float), float32 -> bfloat16 rounds to nearest even (c10/util/BFloat16.h
``round_to_nearest_even``; every NaN becomes 0x7FC0, where torch's vectorised path writes
0xFFFF: NaN either way). Arrays are numpy views over byte chunks; nothing here reads files.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class DType:
    """A tensor element type: safetensors name, bytes per element, numpy little-endian
    dtype string (bfloat16 as ``<u2``: numpy has no bfloat16), floating or not."""

    name: str
    size: int
    numpy: str
    floating: bool


F64 = DType("F64", 8, "<f8", True)
F32 = DType("F32", 4, "<f4", True)
F16 = DType("F16", 2, "<f2", True)
BF16 = DType("BF16", 2, "<u2", True)

STORAGE_DTYPES: dict[str, DType] = {
    "torch.DoubleStorage": F64,
    "torch.FloatStorage": F32,
    "torch.HalfStorage": F16,
    "torch.BFloat16Storage": BF16,
    "torch.LongStorage": DType("I64", 8, "<i8", False),
    "torch.IntStorage": DType("I32", 4, "<i4", False),
    "torch.ShortStorage": DType("I16", 2, "<i2", False),
    "torch.CharStorage": DType("I8", 1, "<i1", False),
    "torch.ByteStorage": DType("U8", 1, "<u1", False),
    "torch.BoolStorage": DType("BOOL", 1, "<u1", False),
    "torch.UntypedStorage": DType("U8", 1, "<u1", False),  # torch.load: uint8 tensors
}

TARGETS: dict[str, DType | None] = {"keep": None, "bf16": BF16, "fp16": F16, "fp32": F32}
"""``--dtype`` choices: the dtype floating tensors are written as (``None``: unchanged)."""


def output_dtype(source: DType, target: DType | None) -> DType:
    """The dtype a tensor of ``source`` type is written as under ``--dtype`` ``target``."""
    return target if (target is not None and source.floating) else source


def _to_f32(data: npt.NDArray[np.generic], source: DType) -> npt.NDArray[np.float32]:
    if source is BF16:
        return (data.astype(np.uint32) << 16).view(np.float32)
    return data.astype(np.float32)


def _f32_to_bf16(x: npt.NDArray[np.float32]) -> npt.NDArray[np.uint16]:
    bits = x.view(np.uint32)
    rounded = (bits + (np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1)))) >> 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = 0x7FC0  # c10: every NaN becomes the positive quiet NaN
    return out


def convert_array(data: npt.NDArray[np.generic], source: DType,
                  target: DType) -> npt.NDArray[np.generic]:
    """``data`` (native little-endian elements of ``source``) as ``target`` elements
    (out-of-range values become infinities, as in torch)."""
    if source is target:
        return data
    with np.errstate(over="ignore", invalid="ignore"):
        return _convert(data, source, target)


def _convert(data: npt.NDArray[np.generic], source: DType,
             target: DType) -> npt.NDArray[np.generic]:
    if source is target:
        return data
    if target is BF16:
        return _f32_to_bf16(_to_f32(data, source))
    if source is BF16:
        wide = _to_f32(data, source)
        return wide if target is F32 else wide.astype(np.dtype(target.numpy))
    if source is F64 and target is F16:  # torch: double -> float -> half
        return data.astype(np.float32).astype(np.float16)
    return data.astype(np.dtype(target.numpy))
