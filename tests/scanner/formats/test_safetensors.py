"""Safetensors validator: every rule of the format, the scanner corpus and public bug
``safetensors-header-bounds``. Inputs are built from raw bytes here; nothing is loaded."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest
from _shared import CORPUS as _CORPUS
from _shared import GuardedBlob

from scanner.core.context import Limits, ScanContext
from scanner.core.model import BytesBlob, FileBlob, Finding, Verdict, worst
from scanner.core.rules import RULES
from scanner.formats.safetensors import (
    DTYPE_BITS,
    SafetensorsError,
    SafetensorsHeader,
    TensorInfo,
    analyze_safetensors,
    read_header,
)

CORPUS = _CORPUS


def st(header: Any, data: bytes = b"", *, pad: bytes = b" ", n: int | None = None) -> bytes:
    """A safetensors file: raw header bytes or a JSON-able header, padded to 8 bytes."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    raw += pad * ((-len(raw)) % 8)
    return struct.pack("<Q", len(raw) if n is None else n) + raw + data


def t(dtype: str, shape: list[Any], begin: Any, end: Any) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def scan(data: bytes, **limits: Any) -> list[Finding]:
    blob = GuardedBlob("m.safetensors", data)
    findings = analyze_safetensors(ScanContext(Limits(**limits)), blob)
    for f in findings:
        assert f.path == "m.safetensors" and f.message and f.rule_id in RULES
        json.dumps(f.to_dict()).encode("utf-8")  # reports can always be written
    return findings


def rules(data: bytes, **limits: Any) -> set[str]:
    return {f.rule_id for f in scan(data, **limits)}


# -- public bug: safetensors-header-bounds -----------------------------------------------

def header_bounds_variants() -> dict[str, tuple[bytes, str | None]]:
    """The report's variants (name -> (file, expected rule)), plus neighbours of each kind."""
    z16 = b"\x00" * 16

    def f32(shape: list[int], begin: int, end: int) -> dict[str, Any]:
        return t("F32", shape, begin, end)

    valid = st({"w": f32([2, 2], 0, 16)}, z16)
    one_past = struct.pack("<Q", len(valid) - 8 + 1) + valid[8:]
    return {
        "valid_control": (st({"w": f32([2, 2], 0, 16)}, z16), None),
        "hdr_len_huge": (st({"w": f32([2, 2], 0, 16)}, z16, n=2**40), "header_length"),
        "hdr_len_negative_i64": (st({"w": f32([2, 2], 0, 16)}, z16, n=2**63 + 5),
                                 "header_length"),
        "hdr_len_max_u64": (st({"w": f32([2, 2], 0, 16)}, z16, n=2**64 - 1), "header_length"),
        "hdr_len_one_past_file": (one_past, "header_length"),
        "short_data_for_shape": (st({"w": f32([1000, 1000], 0, 4)}, b"\x00" * 4),
                                 "offset_shape_mismatch"),
        "long_data_for_shape": (st({"w": f32([1], 0, 16)}, z16), "offset_shape_mismatch"),
        "offset_beyond_file": (st({"w": f32([250000000000], 0, 10**12)}, z16),
                               "offset_out_of_bounds"),
        "offset_end_one_past": (st({"w": f32([4], 1, 17)}, z16), "offset_out_of_bounds"),
        "offsets_inverted": (st({"w": f32([2], 8, 0)}, z16), "offsets_malformed"),
        "offsets_one_element": (st({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0]}},
                                   z16), "offsets_malformed"),
        "offsets_three_elements": (st({"w": {"dtype": "F32", "shape": [4],
                                             "data_offsets": [0, 16, 16]}}, z16),
                                   "offsets_malformed"),
        "offsets_negative": (st({"w": f32([4], -16, 0)}, z16), "offsets_malformed"),
        "overlapping_tensors": (st({"k": f32([4], 0, 16), "v": f32([4], 0, 16)}, z16),
                                "overlap"),
        "partial_overlap": (st({"k": f32([3], 0, 12), "v": f32([3], 4, 16)}, z16), "overlap"),
        "empty_inside_other": (st({"k": f32([4], 0, 16), "e": f32([0], 8, 8)}, z16), "overlap"),
        "duplicate_names": (st(b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                               b'"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}', z16),
                            "duplicate_name"),
        "duplicate_names_escaped": (st(b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                                       b'"\\u0077":{"dtype":"F32","shape":[2],'
                                       b'"data_offsets":[8,16]}}', z16), "duplicate_name"),
        "coverage_gap": (st({"a": f32([2], 0, 8), "b": f32([2], 16, 24)}, b"\x00" * 24),
                         "coverage_gap"),
        "gap_at_start": (st({"a": f32([2], 8, 16)}, z16), "coverage_gap"),
        "trailing_bytes": (st({"w": f32([2, 2], 0, 16)}, z16 + b"\xff" * 64), "trailing_bytes"),
        "data_without_tensors": (st({}, z16), "trailing_bytes"),
        "metadata_not_string": (st({"__metadata__": {"format": 1}, "w": f32([2, 2], 0, 16)},
                                   z16), "metadata_type"),
        "header_not_utf8": (st(b'{"w\xff":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}',
                               z16), "header_encoding"),
    }


VARIANTS = header_bounds_variants()


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_safetensors_header_bounds(name: str, tmp_path: Path) -> None:
    data, expected = VARIANTS[name]
    blob = GuardedBlob(name, data)  # asserts no read past EOF
    findings = analyze_safetensors(ScanContext(), blob)
    header_end = 8 + min(struct.unpack("<Q", data[:8])[0], len(data) - 8)
    # header-only: nothing is read from the data section except trailing-bytes evidence
    assert all(off + n <= header_end or name in ("trailing_bytes", "data_without_tensors")
               for off, n in blob.reads)
    if expected is None:
        assert findings == []
        assert read_header(blob, Limits()).tensors["w"] == TensorInfo("F32", (2, 2), 0, 16)
        return
    assert worst(findings) is Verdict.MALFORMED
    assert {f.rule_id for f in findings} == {f"safetensors.{expected}"}
    with pytest.raises(SafetensorsError) as err:
        read_header(blob, Limits())
    assert err.value.rule_id == f"safetensors.{expected}"
    # the same on a real file descriptor (os.pread), as the loader reads it
    path = tmp_path / f"{name}.safetensors"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        on_disk = analyze_safetensors(ScanContext(), FileBlob(path.name, fd, len(data)))
    finally:
        os.close(fd)
    assert [f.rule_id for f in on_disk] == [f.rule_id for f in findings]


def test_safetensors_header_bounds_reference_reader_agrees() -> None:
    """Every variant we refuse, the reference reader refuses too (we may be stricter only
    on the documented points: duplicates, extra fields, padding, BOM)."""
    safetensors = pytest.importorskip("safetensors")
    for name, (data, expected) in VARIANTS.items():
        if expected is None:
            safetensors.deserialize(data)
        elif expected != "duplicate_name":  # the reference keeps the last entry
            with pytest.raises(Exception):  # noqa: B017 - any refusal
                safetensors.deserialize(data)


# -- corpus --------------------------------------------------------------------------------

def corpus_cases() -> list[tuple[str, str]]:
    index = CORPUS / "cases.json"
    cases = [(c["path"], c["kind"]) for c in json.loads(index.read_text())["cases"]
             if c["format"] == "safetensors" and "recipe" not in c]
    for folder in sorted((CORPUS / "files" / "benign").glob("hf_llama_tiny*")):
        cases += [(str(p.relative_to(CORPUS / "files")), "benign")
                  for p in sorted(folder.glob("*.safetensors"))]
    return cases


@pytest.mark.parametrize(("path", "kind"), corpus_cases())
def test_corpus_verdicts(path: str, kind: str) -> None:
    findings = scan((CORPUS / "files" / path).read_bytes())
    assert worst(findings) is {"benign": Verdict.CLEAN, "malformed": Verdict.MALFORMED}[kind]
    assert all(f.rule_id.startswith("safetensors.") for f in findings)


# -- valid files ---------------------------------------------------------------------------

def test_valid_edge_cases_are_clean() -> None:
    header = {
        "__metadata__": {"format": "pt", "note": "é"},
        "empty": t("F32", [0], 0, 0), "empty2d": t("F16", [3, 0], 0, 0),
        "scalar": t("F32", [], 0, 4), "f4": t("F4", [2], 4, 5), "f6": t("F6_E2M3", [4], 5, 8),
        "b": t("BOOL", [2], 8, 10), "c": t("C64", [1], 10, 18), "tail0": t("U8", [0], 18, 18),
    }
    data = st(header, bytes(18))
    assert scan(data) == []
    parsed = read_header(BytesBlob("x", data), Limits())
    assert isinstance(parsed, SafetensorsHeader)
    assert parsed.metadata == {"format": "pt", "note": "é"}
    assert parsed.data_start == 8 + parsed.header_len == len(data) - 18
    assert parsed.tensors["f6"] == TensorInfo("F6_E2M3", (4,), 5, 8)
    assert list(parsed.tensors) == [k for k in header if k != "__metadata__"]


def test_metadata_only_and_empty_object_are_clean() -> None:
    assert scan(st({"__metadata__": {}})) == []
    assert scan(st({})) == []
    assert scan(st({"a": t("I64", [0], 0, 0)}, pad=b"")) == []


@pytest.mark.parametrize("dtype", sorted(DTYPE_BITS))
def test_every_reference_dtype_is_accepted(dtype: str) -> None:
    nbytes = 8 * DTYPE_BITS[dtype] // 8  # 8 elements: whole bytes for every dtype
    assert scan(st({"x": t(dtype, [2, 4], 0, nbytes)}, bytes(nbytes))) == []


def test_library_written_file_is_clean() -> None:
    np = pytest.importorskip("numpy")
    save = pytest.importorskip("safetensors.numpy").save
    data = save({"a": np.arange(6, dtype=np.float16).reshape(2, 3),
                 "b": np.zeros((0, 4), dtype=np.int64), "c": np.array(True)},
                metadata={"format": "np"})
    assert scan(data) == []
    assert read_header(BytesBlob("x", data), Limits()).tensors["a"].shape == (2, 3)


# -- one rule at a time --------------------------------------------------------------------

Z16 = bytes(16)


@pytest.mark.parametrize(("header", "data", "rule"), [
    ({"w": t("f32", [4], 0, 16)}, Z16, "dtype"),
    ({"w": t("F128", [1], 0, 16)}, Z16, "dtype"),
    ({"w": {"dtype": 32, "shape": [4], "data_offsets": [0, 16]}}, Z16, "dtype"),
    ({"w": t("F32", [True, 4], 0, 16)}, Z16, "shape"),
    ({"w": t("F32", [4.0], 0, 16)}, Z16, "shape"),
    ({"w": t("F32", [-4], 0, 16)}, Z16, "shape"),
    ({"w": t("F32", [2**64, 0], 0, 0)}, b"", "shape"),
    ({"w": t("F32", [2**62], 0, 0)}, b"", "shape"),  # 2**62 elements x 32 bits >= 2**64 bits
    ({"w": t("F32", [2**40, 2**40, 0], 0, 0)}, b"", "shape"),  # overflows before the 0
    ({"w": {"dtype": "F32", "shape": "4", "data_offsets": [0, 16]}}, Z16, "shape"),
    ({"w": t("F4", [3], 0, 2)}, b"\x00\x00", "shape"),  # 12 bits: not whole bytes
    ({"w": t("F6_E3M2", [1], 0, 1)}, b"\x00", "shape"),
    ({"w": t("F32", [4], False, 16)}, Z16, "offsets_malformed"),
    ({"w": t("F32", [4], 0.0, 16)}, Z16, "offsets_malformed"),
    ({"w": t("F32", [4], 0, 2**64)}, Z16, "offsets_malformed"),
    ({"w": {"dtype": "F32", "shape": [4], "data_offsets": "0-16"}}, Z16, "offsets_malformed"),
    ({"w": {"dtype": "F32", "shape": [4], "data_offsets": {"0": 16}}}, Z16,
     "offsets_malformed"),
    ({"w": [1, 2, 3]}, b"", "tensor_info"),
    ({"w": "F32"}, b"", "tensor_info"),
    ({"w": {"dtype": "F32", "shape": [4]}}, b"", "tensor_info"),
    ({"w": {**t("F32", [4], 0, 16), "offset": 0}}, Z16, "tensor_info"),
    ({"__metadata__": None}, b"", "metadata_type"),
    ({"__metadata__": ["a", "b"]}, b"", "metadata_type"),
    ({"__metadata__": {"a": None}}, b"", "metadata_type"),
    ({"__metadata__": {"a": True}}, b"", "metadata_type"),
])
def test_single_rule(header: dict[str, Any], data: bytes, rule: str) -> None:
    assert rules(st(header, data)) == {f"safetensors.{rule}"}


@pytest.mark.parametrize(("raw", "rule"), [
    (b"\xef\xbb\xbf{}", "header_encoding"),
    (b" {}", "header_encoding"),
    (b"\n{}", "header_encoding"),
    (b"[]", "header_encoding"),
    (b'{"a":1e400}', "header_encoding"),
    (b'{"a":NaN}', "header_encoding"),
    (b'{"w":' + b"9" * 5000 + b"}", "header_encoding"),  # past the int digit limit
    (b"{" + b'"a":[' * 100_000, "header_encoding"),  # deep nesting is a finding, not a crash
    (b'{"a":{"b":' * 50_000, "header_encoding"),
    (b'{"a":1', "header_encoding"),
    (b"{}\x00\x00", "header_encoding"),
    (b'{"__metadata__":{"k":"\\ud800"}}', "header_encoding"),  # lone surrogate
    (b'{"__metadata__":{"k":"v","k":"v"}}', "duplicate_name"),
    (b'{"__metadata__":{},"__metadata__":{}}', "duplicate_name"),
    (b'{"w":{"dtype":"U8","dtype":"U8","shape":[],"data_offsets":[0,1]}}', "duplicate_name"),
])
def test_header_text(raw: bytes, rule: str) -> None:
    assert rules(st(raw, pad=b" ")) == {f"safetensors.{rule}"}


@pytest.mark.parametrize("raw, bad", [
    ('{"\u00e9\u00e9\u00e9\u00e9\u00e9":{},}'.encode(), b",}"),  # syntax: offset of '}'
    ('{"\u00e9\u00e9":{"x":1,"x":2}}'.encode(), None),  # duplicate: no offset
])
def test_header_problem_offsets_are_file_byte_offsets(raw: bytes, bad: bytes | None) -> None:
    """Multi-byte UTF-8 before the error must not shift the offset (it was converted from
    characters to bytes twice, pointing past the end of a short file)."""
    (finding,) = scan(st(raw, pad=b" "))
    expected = None if bad is None else 8 + raw.index(bad) + 1
    assert finding.offset == expected


@pytest.mark.parametrize(("raw", "rule"), [
    (b'{"w":{"dtype":"U8","shape":[-0],"data_offsets":[0,0]}}', "shape"),
    (b'{"w":{"dtype":"U8","shape":[0],"data_offsets":[-0, 0]}}', "offsets_malformed"),
    (b'{"a-0":{"dtype":"U8","data_offsets":[0,0],"shape":[-0]}}', "shape"),
])
def test_minus_zero_is_refused(raw: bytes, rule: str) -> None:
    """Python's json reads -0 as the int 0, the reference reader as a float: refuse it."""
    assert rules(st(raw)) == {f"safetensors.{rule}"}
    assert rules(st(raw.replace(b"-0", b"0"))) == set()


def test_padding_other_than_spaces_is_refused() -> None:
    """Issue 10: exactly what the reference accepts (serde_json trailing whitespace)."""
    for pad in (b"\x00", b"\x0c", b"\x0b"):
        assert rules(st(b"{}", pad=pad)) == {"safetensors.header_encoding"}, pad


@pytest.mark.parametrize("pad", [b"\n", b"\t", b"\r", b" \n\t\r"])
def test_safetensors_reference_json_whitespace_padding_is_accepted(pad: bytes) -> None:
    assert scan(st({"a": t("I64", [0], 0, 0)}, pad=pad)) == []
    assert rules(st(b"{}      ", pad=b"")) == set()
    assert rules(st(b"{}\n    ", pad=b"")) == set()


def test_lone_surrogate_in_tensor_name() -> None:
    raw = b'{"w\\udc80":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    findings = scan(st(raw, b"\x00"))
    assert {f.rule_id for f in findings} == {"safetensors.header_encoding"}
    assert "\\udc80" in findings[0].message


def test_header_cap_comes_from_limits() -> None:
    data = st({"w": t("U8", [1], 0, 1)}, b"\x00")
    assert rules(data) == set()
    assert rules(data, max_safetensors_header=16) == {"safetensors.header_length"}


def test_header_exactly_fills_file() -> None:
    assert rules(st({})) == set()  # 8 + N == size
    assert rules(st({"w": t("U8", [1], 0, 1)})) == {"safetensors.offset_out_of_bounds"}


def test_file_shorter_than_prefix() -> None:
    for data in (b"", b"\x02", b"\x02\x00\x00\x00\x00\x00\x00"):
        assert rules(data) == {"safetensors.header_length"}


def test_all_problems_in_one_pass() -> None:
    header = {"__metadata__": {"n": 1}, "a": t("F32", [4], 0, 16), "b": t("X", [1], 16, 20),
              "c": t("F32", [-1], 20, 24), "d": t("F32", [2], 24, 28), "e": t("F32", [1], 24, 28)}
    assert rules(st(header, bytes(28))) == {
        "safetensors.metadata_type", "safetensors.dtype", "safetensors.shape",
        "safetensors.offset_shape_mismatch", "safetensors.overlap"}


def test_malformed_offsets_do_not_add_coverage_noise() -> None:
    header = {"a": t("F32", [2], 0, 8), "b": t("F32", [2], 16, 8)}
    assert rules(st(header, Z16)) == {"safetensors.offsets_malformed"}


def test_findings_are_capped_per_rule() -> None:
    header = {f"t{i}": t("NOPE", [1], i, i + 1) for i in range(100)}
    findings = scan(st(header, bytes(100)))
    assert len(findings) == 21 and {f.rule_id for f in findings} == {"safetensors.dtype"}
    assert "80 more" in findings[-1].message
    with pytest.raises(SafetensorsError) as err:
        read_header(BytesBlob("x", st(header, bytes(100))), Limits())
    assert len(err.value.problems) == 21


def test_findings_locate_and_name_the_tensor() -> None:
    data = st({"ok": t("U8", [4], 0, 4), "bad": t("U8", [4], 4, 9)}, bytes(9))
    (finding,) = scan(data)
    assert finding.rule_id == "safetensors.offset_shape_mismatch"
    assert "'bad'" in finding.message and "needs 4" in finding.message
    assert finding.offset == len(data) - 9 + 4  # first byte of the tensor's range
    (finding,) = scan(st({"bad": t("Q8", [1], 0, 1)}, b"\x00"))
    assert finding.offset is not None
    assert st({"bad": t("Q8", [1], 0, 1)}, b"\x00")[finding.offset:].startswith(b'"bad"')
    assert finding.evidence == "Q8"


def test_evidence_is_bounded_and_printable() -> None:
    name = "\x1b[31m" + "n" * 10_000
    findings = scan(st({name: t("F32", list(range(5000)), 0, 4)}, bytes(4)))
    assert findings and all(len(f.evidence) <= 200 and len(f.message) < 1000 for f in findings)
    assert all("\x1b" not in f.message + f.evidence for f in findings)


# -- header-only and deep reads ------------------------------------------------------------

class SparseBlob:
    """A 2 GiB file whose data section is never materialised; data reads fail the test."""

    def __init__(self, header: bytes, size: int) -> None:
        self.name, self.header, self.size = "big.safetensors", header, size

    def read_at(self, offset: int, length: int) -> bytes:
        assert offset + length <= len(self.header), "read tensor data in header-only mode"
        return self.header[offset : offset + length]


def test_header_only_never_reads_tensor_data() -> None:
    size, raw = 2 << 30, b""
    for _ in range(3):  # the header's length depends on the numbers in it
        raw = st({"w": t("U8", [size - len(raw)], 0, size - len(raw))})
    assert analyze_safetensors(ScanContext(), SparseBlob(raw, size)) == []
    big = read_header(SparseBlob(raw, size), Limits())
    assert big.tensors["w"].end == size - big.data_start


def test_deep_checks_bool_values_in_bounded_chunks() -> None:
    good = st({"m": t("BOOL", [3], 0, 3), "x": t("U8", [2], 3, 5)}, b"\x01\x00\x01\x07\x09")
    bad = st({"m": t("BOOL", [3], 0, 3)}, b"\x01\x02\x00")
    assert rules(good, deep=True) == set()
    assert rules(bad) == set()  # header-only by default
    (finding,) = scan(bad, deep=True)
    assert finding.rule_id == "safetensors.bool_value" and finding.offset == len(bad) - 2
    n = (3 << 20) + 5
    blob = GuardedBlob("big", st({"m": t("BOOL", [n], 0, n)}, bytes(n - 1) + b"\x05"))
    (finding,) = analyze_safetensors(ScanContext(Limits(deep=True)), blob)
    assert finding.offset == blob.size - 1
    assert max(length for _, length in blob.reads) <= 1 << 20


def test_deadline_is_enforced() -> None:
    from scanner.core.context import LimitHit

    header = {f"t{i}": t("U8", [1], i, i + 1) for i in range(10_000)}
    ctx = ScanContext(deadline=1.0)  # long past
    with pytest.raises(LimitHit):
        analyze_safetensors(ctx, BytesBlob("x", st(header, bytes(10_000))))


def test_problem_is_a_diagnostic_with_rule_offset_and_fix() -> None:
    """Safetensors problems carry the shared Diagnostic (issue 11: one error type)."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [2, 2],
                               "data_offsets": [0, 99]}}).encode()
    data = struct.pack("<Q", len(header)) + header + bytes(16)
    with pytest.raises(SafetensorsError) as err:
        read_header(BytesBlob("m.safetensors", data), Limits())
    problem = err.value.problems[0]
    diag = problem.diagnostic("m.safetensors")
    assert diag.code == problem.rule.id == err.value.rule_id
    assert diag.message == problem.message and diag.fix == RULES[diag.code].fix
    assert diag.at == ("m.safetensors" if problem.offset is None
                       else f"m.safetensors@{problem.offset}")
    assert diag.render().startswith(f"error[{diag.code}]: ")


# -- shapes the reference reader accepts and the frameworks refuse (issue 22) -------------

HUGE_DIM = {"w": t("U8", [2**63, 0], 0, 0)}  # valid u64 and an empty tensor for the reader
HIGH_RANK = {"w": t("U8", [1] * 65, 0, 1)}  # one byte, 65 dimensions


@pytest.mark.parametrize(("header", "data"), [(HUGE_DIM, b""), (HIGH_RANK, b"\x00"),
                                              ({"w": t("U8", [2**64 - 1, 0], 0, 0)}, b""),
                                              ({"w": t("U8", [1] * 1000, 0, 1)}, b"\x00")],
                         ids=["dim-2**63", "rank-65", "dim-u64-max", "rank-1000"])
def test_shapes_readers_disagree_on_are_refused(header: dict[str, Any], data: bytes) -> None:
    findings = scan(st(header, data))
    assert {f.rule_id for f in findings} == {"safetensors.shape"}, findings
    assert worst(findings) is Verdict.MALFORMED


def test_refused_shapes_are_reader_differences() -> None:
    """Why the two shapes above are refused: the reference reader accepts both files, then
    torch refuses the huge dimension and numpy both (so the file loads in one framework and
    fails, or is skipped, in another)."""
    deserialize = getattr(pytest.importorskip("safetensors"), "deserialize")  # reference 0.8
    numpy_load = pytest.importorskip("safetensors.numpy").load
    torch_load = pytest.importorskip("safetensors.torch").load
    huge, rank = st(HUGE_DIM), st(HIGH_RANK, b"\x00")
    assert [name for name, _ in deserialize(huge)] == ["w"]
    assert [name for name, _ in deserialize(rank)] == ["w"]
    assert torch_load(rank)["w"].dim() == 65
    for load, data in ((torch_load, huge), (numpy_load, huge), (numpy_load, rank)):
        with pytest.raises((TypeError, ValueError, OverflowError)):
            load(data)


@pytest.mark.parametrize(("header", "data"), [({"w": t("U8", [2**63 - 1, 0], 0, 0)}, b""),
                                              ({"w": t("U8", [1] * 64, 0, 1)}, b"\x00")],
                         ids=["dim-2**63-1", "rank-64"])
def test_shapes_at_the_framework_limits_are_clean(header: dict[str, Any], data: bytes) -> None:
    assert scan(st(header, data)) == []
