"""Tensor names that differ only behind ``\\u`` escapes (or raw characters other readers
drop or fold) are ``policy``: each is valid JSON and valid safetensors, but a C reader
stops at NUL and normalising readers fold compatibility and format characters, so the
file loads differently in different readers. Headers are written here as raw bytes."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scanner.core.confusable import collisions
from scanner.core.context import Limits, ScanContext
from scanner.core.model import BytesBlob, Verdict, worst
from scanner.formats.safetensors import SafetensorsError, analyze_safetensors, read_header


def _file(first: str, second: str) -> bytes:
    """Two one-byte U8 tensors named by JSON source text ``first`` and ``second``."""
    entry = '"{}":{{"dtype":"U8","shape":[1],"data_offsets":[{},{}]}}'
    text = "{" + entry.format(first, 0, 1) + "," + entry.format(second, 1, 2) + "}"
    header = text.encode("utf-8")
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + b"\x01\x02"


@pytest.mark.parametrize(("first", "second"), [
    ("w", "w\\u0000"),  # NUL: C strings cut there
    ("w", "w\\u0000.bias"),
    ("caf\\u00e9", "cafe\\u0301"),  # NFC vs NFD
    ("w", "w\\u200b"),  # zero-width space (format character)
    ("w", "\\ufeffw"),  # BOM inside the name
    ("\\uff57", "w"),  # fullwidth w (NFKC folds it)
    ("caf\u00e9", "cafe\\u0301"),  # raw UTF-8 against an escape
], ids=["nul", "nul_suffix", "nfd", "zwsp", "bom", "fullwidth", "raw_vs_escape"])
def test_names_equal_to_some_reader_are_policy(first: str, second: str) -> None:
    findings = analyze_safetensors(ScanContext(), BytesBlob("m.safetensors", _file(first, second)))
    assert worst(findings) is Verdict.POLICY, findings
    assert {f.rule_id for f in findings} == {"safetensors.ambiguous_names"}
    with pytest.raises(SafetensorsError):  # the loader's strict reader refuses it too
        read_header(BytesBlob("m.safetensors", _file(first, second)), Limits())


@pytest.mark.parametrize(("first", "second"), [
    ("w", "x"), ("\\u00e9", "e"), ("caf\u00e9", "caf\u00e8"), ("W", "w"),
    ("\\u0077eight", "bias"),  # an escape that spells a distinct ASCII name
])
def test_distinct_names_stay_clean(first: str, second: str) -> None:
    findings = analyze_safetensors(ScanContext(), BytesBlob("m.safetensors", _file(first, second)))
    assert findings == []


def test_collisions_reports_each_pair_once() -> None:
    assert collisions(["a", "b", "a\x00", "b\u200b", "c"]) == [("a", "a\x00"), ("b", "b\u200b")]
    assert collisions(["x.weight", "x.bias"]) == []


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=8), st.sampled_from(["\x00", "\u200b", "\ufeff", "\x07"]),
       st.booleans())
def test_a_name_and_its_twin_are_policy(name: str, extra: str, ascii_only: bool) -> None:
    """Any name next to itself plus a character other readers drop: policy, both ways of
    writing the header (escapes or raw UTF-8)."""
    twin = name + extra
    if name == "__metadata__" or twin == "__metadata__":
        return
    header = {name: {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
              twin: {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}}
    raw = json.dumps(header, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    raw += b" " * (-len(raw) % 8)
    data = struct.pack("<Q", len(raw)) + raw + b"\x01\x02"
    findings = analyze_safetensors(ScanContext(), BytesBlob("m.safetensors", data))
    assert "safetensors.ambiguous_names" in {f.rule_id for f in findings}
    assert worst(findings) >= Verdict.POLICY
