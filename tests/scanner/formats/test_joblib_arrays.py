"""joblib arrays are sized exactly as NumPy and joblib size them: the dtype's pickled
state (``numpy.dtype.__setstate__``: item size of ``S``/``U``/``V``, ``flags &
HASOBJECT``) is applied, an array whose dtype holds objects is followed by a pickle that
joblib unpickles, and shape dimensions pickled as NumPy integer scalars are read. The
streams are written here opcode by opcode, the way ``joblib.dump`` lays them out
(``NumpyArrayWrapper`` pickled, then the array bytes); nothing is loaded."""

from __future__ import annotations

import struct

import pytest

from scanner.core.context import ScanContext
from scanner.core.model import BytesBlob, Finding, Verdict, worst
from scanner.formats.pickle.analyze import analyze_pickle

# GLOBAL posix.system, BINUNICODE 'true', TUPLE1, REDUCE (a call, result left on the stack)
CALL = b"cposix\nsystem\nX\x04\x00\x00\x00true\x85R"
EVIL = b"\x80\x02" + CALL + b"."


def s(text: str) -> bytes:  # BINUNICODE
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def i(n: int) -> bytes:  # BININT
    return b"J" + struct.pack("<i", n)


def dtype(type_string: str, state: bytes) -> bytes:
    """numpy.dtype(type_string, False, True) then BUILD with ``state`` (opcodes of a tuple)."""
    return (b"cnumpy\ndtype\n(" + s(type_string) + b"\x89\x88tR" + state + b"b")


def state(elsize: int, flags: int, *, names: bytes = b"N", fields: bytes = b"N",
          endian: str = "|") -> bytes:
    """(3, endian, None, names, fields, elsize, alignment 1, flags)."""
    return b"(" + i(3) + s(endian) + b"N" + names + fields + i(elsize) + i(1) + i(flags) + b"t"


def wrapper(dtype_ops: bytes, shape_ops: bytes) -> bytes:
    """PROTO 2, NumpyArrayWrapper() with BUILD of its state dict (joblib's field names)."""
    return (b"\x80\x02cjoblib.numpy_pickle\nNumpyArrayWrapper\n)\x81}(" + s("subclass")
            + b"cnumpy\nndarray\n" + s("shape") + shape_ops + s("order") + s("C")
            + s("dtype") + dtype_ops + s("allow_mmap") + b"\x88" + b"ub")


def scan(data: bytes) -> list[Finding]:
    return analyze_pickle(ScanContext(), BytesBlob("model.joblib", data))


F8 = dtype("f8", state(-1, 0, endian="<"))


def test_plain_array_is_read_past_its_bytes() -> None:
    data = wrapper(F8, i(2) + b"\x85") + bytes(16) + b"."
    findings = scan(data)
    assert worst(findings) is Verdict.POLICY, findings


def test_item_size_comes_from_the_pickled_state() -> None:
    """'S100' with a pickled elsize of 1: NumPy reads 4 bytes, not 400, and joblib reads
    the payload that follows as the rest of the pickle."""
    head = wrapper(dtype("S100", state(1, 0)), i(4) + b"\x85") + b"abcd"
    body = CALL + b"0"  # the call, then POP
    filler = 400 - 4 - len(body) - 5 - 1
    data = head + body + b"B" + struct.pack("<I", filler) + bytes(filler) + b"0" + b"."
    assert len(data) - len(head) + 4 == 401  # a reader using 'S100' lands on the STOP
    findings = scan(data)
    assert worst(findings) is Verdict.MALICIOUS, findings
    assert "pickle.unsafe_global" in {f.rule_id for f in findings}


def test_unicode_item_size_from_state_in_bytes() -> None:
    data = wrapper(dtype("U1", state(12, 8, endian="<")), i(2) + b"\x85") + bytes(24) + b"."
    assert worst(scan(data)) is Verdict.POLICY


@pytest.mark.parametrize("flags", [1, 27, -127])
def test_void_dtype_flagged_hasobject_is_followed_by_a_pickle(flags: int) -> None:
    """'V8' whose state sets NPY_ITEM_HASOBJECT: joblib unpickles what follows."""
    data = wrapper(dtype("V8", state(8, flags)), i(1) + b"\x85") + EVIL + b"."
    findings = scan(data)
    assert worst(findings) is Verdict.MALICIOUS, findings


def test_structured_dtype_with_object_field_is_followed_by_a_pickle() -> None:
    """dtype([('a', '<i4'), ('b', 'O')]) as numpy pickles it (flags 27)."""
    fields = (b"}(" + s("a") + b"(" + dtype("i4", state(-1, 0, endian="<")) + i(0) + b"t"
              + s("b") + b"(" + dtype("O8", state(-1, 63, endian="|")) + i(4) + b"tu")
    typ = dtype("V12", state(12, 27, names=b"(" + s("a") + s("b") + b"t", fields=fields))
    data = wrapper(typ, i(3) + b"\x85") + EVIL + b"."
    assert worst(scan(data)) is Verdict.MALICIOUS


def test_structured_dtype_without_objects_is_raw_data() -> None:
    fields = (b"}(" + s("a") + b"(" + dtype("i4", state(-1, 0, endian="<")) + i(0) + b"tu")
    typ = dtype("V4", state(4, 16, names=s("a") + b"\x85", fields=fields))
    data = wrapper(typ, i(3) + b"\x85") + bytes(12) + b"."
    assert worst(scan(data)) is Verdict.POLICY


def _int64(n: int) -> bytes:
    """numpy.core.multiarray.scalar(dtype('i8'), <8 bytes>): how an np.int64 is pickled."""
    return (b"cnumpy.core.multiarray\nscalar\n" + dtype("i8", state(-1, 0, endian="<"))
            + b"C\x08" + struct.pack("<q", n) + b"\x86R")


def test_shape_of_numpy_integers_is_resolved() -> None:
    data = wrapper(F8, _int64(2) + _int64(3) + b"\x86") + bytes(48) + b"."
    assert worst(scan(data)) is Verdict.POLICY
    short = wrapper(F8, _int64(2) + _int64(3) + b"\x86") + bytes(40) + b"."
    assert worst(scan(short)) is Verdict.MALFORMED


def test_shape_computed_by_a_call_is_judged_as_that_call() -> None:
    """A dimension made by eval: the call is malicious whatever the array size."""
    dim = b"cbuiltins\neval\n" + s("2") + b"\x85R"
    data = wrapper(F8, dim + b"\x85") + bytes(16) + b"."
    findings = scan(data)
    assert worst(findings) is Verdict.MALICIOUS
    assert any("eval" in f.evidence for f in findings)


def test_dtype_state_numpy_refuses_stops_the_reading() -> None:
    """A state tuple of one item: NumPy raises, nothing after it is read."""
    data = wrapper(dtype("S4", b"(" + i(3) + b"t"), i(1) + b"\x85") + b"x."
    assert worst(scan(data)) is Verdict.MALFORMED
