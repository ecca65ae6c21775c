"""Property tests for the safetensors validator: it never raises on any input, accepts every
valid file, and anything it accepts the reference reader (safetensors 0.8) reads the same."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scanner.core.confusable import collisions, reader_keys
from scanner.core.context import Limits, ScanContext
from scanner.core.model import Finding
from scanner.core.pathnames import escapes
from scanner.formats.safetensors import (
    DTYPE_BITS,
    SafetensorsError,
    TensorInfo,
    analyze_safetensors,
    read_header,
)

FAST = settings(max_examples=150, deadline=None,  # no wall-clock bound: counts, limits
                suppress_health_check=[HealthCheck.too_slow])


class GuardedBlob:
    """Fails on any read outside [0, size)."""

    def __init__(self, data: bytes) -> None:
        self.name, self.data, self.size = "p.safetensors", data, len(data)

    def read_at(self, offset: int, length: int) -> bytes:
        assert 0 <= offset and 0 <= length and offset + length <= self.size, (offset, length)
        return self.data[offset : offset + length]


def check(data: bytes, deep: bool = False) -> list[Finding]:
    """Run both entry points; only findings / SafetensorsError may come out."""
    findings = analyze_safetensors(ScanContext(Limits(deep=deep)), GuardedBlob(data))
    assert all(f.rule_id.startswith(("safetensors.", "name.")) for f in findings)
    for f in findings:
        json.dumps(f.to_dict()).encode("utf-8")
    try:
        read_header(GuardedBlob(data), Limits())
    except SafetensorsError as err:
        assert findings and err.rule_id == findings[0].rule_id
    else:
        assert not [f for f in findings if f.rule_id != "safetensors.bool_value"]
    return findings


def frame(header: bytes, data: bytes) -> bytes:
    header += b" " * ((-len(header)) % 8)
    return struct.pack("<Q", len(header)) + header + data


# -- generated valid files -----------------------------------------------------------------

# Names that are paths out of a folder are refused (name.path_escape) however written.
names = st.text(min_size=0, max_size=12).filter(
    lambda s: s != "__metadata__" and escapes(s, nul=False) is None)
dims = st.lists(st.integers(0, 5), max_size=4)


@st.composite
def tensor_files(draw: st.DrawFn) -> tuple[bytes, dict[str, TensorInfo]]:
    """A valid file written by hand: random dtypes (sub-byte ones aligned), zero sizes,
    scalars, random header order, optional metadata; data laid out in some order."""
    specs: dict[str, tuple[str, tuple[int, ...]]] = {}
    # distinct for every reader: names that only a C or normalising reader takes for one
    # name are refused by policy (tests/scanner/formats/test_safetensors_names.py)
    for name in draw(st.lists(names, max_size=8, unique_by=(
            lambda s: reader_keys(s)[0], lambda s: reader_keys(s)[1]))):
        dtype = draw(st.sampled_from(sorted(DTYPE_BITS)))
        shape = tuple(draw(dims))
        nelem = 1
        for d in shape:
            nelem *= d
        if nelem * DTYPE_BITS[dtype] % 8:
            shape = (*shape, 8) if shape and nelem else shape + (0,)
        specs[name] = (dtype, shape)
    layout = draw(st.permutations(sorted(specs)))
    infos: dict[str, TensorInfo] = {}
    cursor = 0
    for name in layout:
        dtype, shape = specs[name]
        nelem = 1
        for d in shape:
            nelem *= d
        size = nelem * DTYPE_BITS[dtype] // 8
        infos[name] = TensorInfo(dtype, shape, cursor, cursor + size)
        cursor += size
    header: dict[str, Any] = {}
    if draw(st.booleans()):
        header["__metadata__"] = draw(st.dictionaries(st.text(max_size=6), st.text(max_size=6),
                                                      max_size=3))
    header.update({n: {"dtype": i.dtype, "shape": list(i.shape),
                       "data_offsets": [i.begin, i.end]} for n, i in infos.items()})
    raw = json.dumps(header, ensure_ascii=draw(st.booleans())).encode()
    fill = draw(st.sampled_from([b"\x00", b"\x01"]))  # valid for BOOL in deep mode
    return frame(raw, fill * cursor), infos


@FAST
@given(tensor_files())
def test_generated_valid_files_are_clean(case: tuple[bytes, dict[str, TensorInfo]]) -> None:
    data, infos = case
    assert check(data, deep=True) == []
    assert read_header(GuardedBlob(data), Limits()).tensors == infos


@FAST
@given(tensor_files())
def test_reference_reader_accepts_what_we_generate(
        case: tuple[bytes, dict[str, TensorInfo]]) -> None:
    safetensors = pytest.importorskip("safetensors")
    data, infos = case
    got = {name: (t["dtype"], tuple(t["shape"])) for name, t in safetensors.deserialize(data)}
    assert got == {n: (i.dtype, i.shape) for n, i in infos.items()}


_NP_DTYPES = ["bool", "uint8", "int8", "int16", "uint16", "float16", "int32", "uint32",
              "float32", "int64", "uint64", "float64", "complex64"]


@FAST
@given(st.dictionaries(names, st.tuples(st.sampled_from(_NP_DTYPES), dims), max_size=6)
       .filter(lambda spec: not collisions(spec)))
def test_library_written_files_are_clean(spec: dict[str, tuple[str, list[int]]]) -> None:
    np = pytest.importorskip("numpy")
    save = pytest.importorskip("safetensors.numpy").save
    arrays = {n: np.zeros(tuple(shape), dtype=dtype) for n, (dtype, shape) in spec.items()}
    data = save(arrays, metadata={"format": "np"})
    assert check(data, deep=True) == []
    tensors = read_header(GuardedBlob(data), Limits()).tensors
    assert {n: i.shape for n, i in tensors.items()} == {n: tuple(s) for n, (_, s) in spec.items()}


# -- arbitrary and mutated input -----------------------------------------------------------

@FAST
@given(st.binary(max_size=512))
def test_arbitrary_bytes_only_give_findings(data: bytes) -> None:
    check(data, deep=True)


@FAST
@given(st.binary(max_size=300), st.binary(max_size=64))
def test_arbitrary_headers_only_give_findings(header: bytes, tail: bytes) -> None:
    check(frame(b"{" + header, tail), deep=True)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                               max_size=4),
    max_leaves=12,
)


@FAST
@given(tensor_files(), st.data())
def test_mutated_headers_are_refused_or_read_like_the_reference(
        case: tuple[bytes, dict[str, TensorInfo]], data: st.DataObject) -> None:
    """Replace one field (or entry) of a valid header by a random JSON value."""
    raw, _ = case
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    keys = sorted(header)
    if keys:
        key = data.draw(st.sampled_from(keys))
        if isinstance(header[key], dict) and header[key] and data.draw(st.booleans()):
            sub = data.draw(st.sampled_from(sorted(header[key])))
            header[key][sub] = data.draw(json_values)
        else:
            header[key] = data.draw(json_values)
    else:
        header[data.draw(names)] = data.draw(json_values)
    try:
        text = json.dumps(header, allow_nan=True).encode()
    except ValueError:
        return
    mutated = frame(text, raw[8 + n :])
    if check(mutated) == []:
        reference_agrees(mutated)


@FAST
@given(tensor_files(), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255),
                                          st.sampled_from(["flip", "insert", "delete"])),
                                min_size=1, max_size=4), st.integers(0, 64))
def test_mutated_bytes_are_refused_or_read_like_the_reference(
        case: tuple[bytes, dict[str, TensorInfo]], edits: list[tuple[int, int, str]],
        cut: int) -> None:
    buf = bytearray(case[0])
    for pos, byte, how in edits:
        at = pos % (len(buf) + 1)
        if how == "insert":
            buf[at:at] = bytes([byte])
        elif at < len(buf):
            if how == "flip":
                buf[at] ^= byte or 1
            else:
                del buf[at]
    mutated = bytes(buf[: max(0, len(buf) - cut)] if cut % 3 == 0 else buf)
    if check(mutated) == []:
        reference_agrees(mutated)


def reference_agrees(data: bytes) -> None:
    """Soundness against the reference reader: a file we call clean, it reads the same."""
    try:
        import safetensors
    except ImportError:
        return
    deserialize: Callable[[bytes], list[tuple[str, dict[str, Any]]]]
    deserialize = getattr(safetensors, "deserialize")  # the reference 0.8 reader
    ours = read_header(GuardedBlob(data), Limits())
    theirs = {name: (t["dtype"], tuple(t["shape"]), len(t["data"]))
              for name, t in deserialize(data)}
    assert theirs == {n: (i.dtype, i.shape, i.end - i.begin) for n, i in ours.tensors.items()}
