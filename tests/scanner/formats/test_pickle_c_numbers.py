"""Protocol-0 number lines read as CPython's C unpickler reads them (Modules/_pickle.c
``load_int``: ``strtol`` base 0, then ``PyLong_FromString``; ``load_long``;
``load_float``), not as ``pickletools`` does. Found by a red-team pass on issue 30: a
``pytorch_model.bin`` of ``I0x1\\n0cos\\nsystem\\n...`` (hex accepted by ``load_int``,
refused by ``pickletools``) was ``format.not_analysed`` and its ``os.system`` never named;
``I017`` (C octal) and ``I1\\x00x`` (the C string ends at the NUL) stopped our interpreter
where ``pickle.load`` goes on. The expected values below are CPython 3.11's, written out
(nothing is unpickled here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scanner_helpers import rules, scan

from scanner.api import scan_target
from scanner.core.model import Verdict, worst
from scanner.formats.pickle import numbers
from scanner.formats.pickle.sniff import looks_like_pickle

# (line without its newline, what CPython's load_int gives, None: ValueError)
INT_LINES = [
    (b"15", 15), (b"017", 15), (b"0x1f", 31), (b"0X1F", 31), (b"-0x10", -16), (b"+5", 5),
    (b" 5", 5), (b"\t12", 12), (b"12 ", 12), (b"1_0", 10), (b"0o17", 15), (b"0b11", 3),
    (b"1\x00junk", 1), (b"99999999999999999999", 99999999999999999999), (b"0", 0),
    (b"0x", None), (b"", None), (b" ", None), (b"0x1g", None), (b"abc", None),
    (b"0777777777777777777777777", None),  # octal past a C long: int('07...', 0) refuses
]
LONG_LINES = [
    (b"0x1fL", 31), (b"1\x00zzL", 1), (b"017", None), (b"1_0", 10), (b" 12 ", 12),
    (b"12L", 12), (b"L", None),
]
EVIL_TAIL = b"0cos\nsystem\n(S'id'\ntR."  # POP the number, then os.system('id')


@pytest.mark.parametrize(("text", "value"), INT_LINES)
def test_cpython_load_int_line(text: bytes, value: int | None) -> None:
    if value is None:
        with pytest.raises(ValueError):
            numbers.load_int(text)
    else:
        assert numbers.load_int(text) == value


@pytest.mark.parametrize(("text", "value"), LONG_LINES)
def test_cpython_load_long_line(text: bytes, value: int | None) -> None:
    if value is None:
        with pytest.raises(ValueError):
            numbers.load_long(text)
    else:
        assert numbers.load_long(text) == value


def test_cpython_load_float_line_ends_at_a_nul() -> None:
    assert numbers.load_float(b"1.5\x00z") == 1.5
    with pytest.raises(ValueError):
        numbers.load_float(b"x1.5")


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_c_base_zero_forms_of_any_long_read_back(value: int) -> None:
    sign = "-" if value < 0 else ""
    for text in (f"{value}", f"{sign}{abs(value):#x}", f"{sign}0{abs(value):o}"):
        assert numbers.load_int(text.encode()) == value


@pytest.mark.parametrize("number", [b"I0x1\n", b"I017\n", b"I1\x00j\n", b"L1\x00zzL\n",
                                    b"F1.5\x00z\n", b"I0o17\n"])
@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pkl"])
def test_cpython_number_forms_do_not_hide_a_payload(number: bytes, name: str) -> None:
    data = number + EVIL_TAIL
    assert looks_like_pickle(data)
    found = scan(name, data)
    assert "pickle.unsafe_global" in rules(found), found
    assert worst(found) is Verdict.MALICIOUS


def test_text_that_only_starts_like_a_number_line_stays_text() -> None:
    assert not looks_like_pickle(b"I am a line of prose\nand another one\n")
    assert not looks_like_pickle(b"I0x\nnot a pickle at all\n")


def test_red_team_pytorch_model_bin_with_a_hex_int_is_malicious(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "pytorch_model.bin").write_bytes(b"I0x1\n" + EVIL_TAIL)
    result = scan_target(folder, jobs=1)
    assert result.verdict is Verdict.MALICIOUS
    assert "pickle.unsafe_global" in {f.rule_id for f in result.findings}
