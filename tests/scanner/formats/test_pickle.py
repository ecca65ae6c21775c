"""Pickle analyzer: symbolic interpretation of raw pickles and legacy torch.save files, the
allowlist, the scanner corpus and public bugs ``pickle-memo-confusion`` and
``pickle-allowlisted-module-build``. Inputs are opcode bytes built here (pickle's opcode
constants) or ``pickle.dumps`` of plain data; nothing is ever unpickled."""

from __future__ import annotations

import json
import os
import pickle as P
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _shared import CORPUS as _CORPUS
from _shared import GuardedBlob
from scanner_helpers import rules

from scanner.core.allowlist import ALLOWLIST, lookup
from scanner.core.context import Limits, ScanContext
from scanner.core.model import BytesBlob, FileBlob, Finding, Verdict, worst
from scanner.core.rules import RULES
from scanner.formats.pickle import second as _pickle_second
from scanner.formats.pickle.analyze import analyze_pickle, analyze_pickle_at, analyze_torch_legacy
from scanner.formats.pickle.reader import CHUNK

CORPUS = _CORPUS
MAGIC = 0x1950A86A20F9469CFC6C


# -- a tiny pickle assembler ---------------------------------------------------------------

def u(s: str) -> bytes:
    b = s.encode()
    return P.SHORT_BINUNICODE + bytes([len(b)]) + b


def binu(s: str) -> bytes:
    b = s.encode()
    return P.BINUNICODE + len(b).to_bytes(4, "little") + b


def glob(module: str, name: str) -> bytes:
    return P.GLOBAL + f"{module}\n{name}\n".encode()


def long1(n: int) -> bytes:
    b = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
    return P.LONG1 + bytes([len(b)]) + b


P2 = P.PROTO + b"\x02"
P4 = P.PROTO + b"\x04"
SYSTEM_CALL = glob("os", "system") + binu("true") + P.TUPLE1 + P.REDUCE


def tensor(storage_key: str, numel: int, storage: str = "FloatStorage") -> bytes:
    """``_rebuild_tensor_v2(<pid storage>, 0, (numel,), (1,), False, OrderedDict())``."""
    pid = (P.MARK + binu("storage") + glob("torch", storage) + binu(storage_key)
           + binu("cpu") + P.BININT1 + bytes([numel]) + P.NONE + P.TUPLE + P.BINPERSID)
    return (glob("torch._utils", "_rebuild_tensor_v2") + P.MARK + pid + P.BININT1 + b"\x00"
            + P.BININT1 + bytes([numel]) + P.TUPLE1 + P.BININT1 + b"\x01" + P.TUPLE1
            + P.NEWFALSE + glob("collections", "OrderedDict") + P.EMPTY_TUPLE + P.REDUCE
            + P.TUPLE + P.REDUCE)


def state_dict(*entries: tuple[str, bytes]) -> bytes:
    """A torch-style state dict: OrderedDict() filled with SETITEMS, then BUILD _metadata."""
    body = P2 + glob("collections", "OrderedDict") + P.BINPUT + b"\x00" + P.EMPTY_TUPLE
    body += P.REDUCE + P.MARK
    for key, value in entries:
        body += binu(key) + value
    body += P.SETITEMS + P.EMPTY_DICT + binu("_metadata") + P.BINGET + b"\x00"
    body += P.EMPTY_TUPLE + P.REDUCE + P.SETITEM + P.BUILD + P.STOP
    return body


def legacy(main: bytes | None = None, keys: list[str] | None = None,
           raw: bytes | None = None, magic: bytes | None = None,
           version: bytes | None = None) -> bytes:
    """A legacy torch.save file: 5 pickles then raw storages (int64 count + data)."""
    main = main if main is not None else state_dict(("w", tensor("0", 4)), ("b", tensor("1", 2)))
    keys = keys if keys is not None else ["0", "1"]
    if raw is None:
        raw = (4).to_bytes(8, "little") + bytes(16) + (2).to_bytes(8, "little") + bytes(8)
    sys_info = {"protocol_version": 1001, "little_endian": True,
                "type_sizes": {"short": 2, "int": 4, "long": 4}}
    return ((magic if magic is not None else P2 + long1(MAGIC) + P.STOP)
            + (version if version is not None else P2 + P.BININT2 + b"\xe9\x03" + P.STOP)
            + P.dumps(sys_info, protocol=2) + main + P.dumps(keys, protocol=2) + raw)


def check(findings: list[Finding], path: str) -> list[Finding]:
    for f in findings:
        assert f.rule_id in RULES and f.message, f
        assert f.path == path or f.path.startswith(path + "#nested@"), f
        json.dumps(f.to_dict())
    return findings


def scan(data: bytes, **limits: Any) -> list[Finding]:
    return check(analyze_pickle(ScanContext(Limits(**limits)), GuardedBlob("m.pkl", data)),
                 "m.pkl")


def scan_legacy(data: bytes, **limits: Any) -> list[Finding]:
    blob = GuardedBlob("m.pt", data)
    return check(analyze_torch_legacy(ScanContext(Limits(**limits)), blob), "m.pt")


def evidence(findings: list[Finding], rule_id: str) -> set[str]:
    return {f.evidence for f in findings if f.rule_id == rule_id}


# -- corpus ---------------------------------------------------------------------------------

def _corpus_cases() -> list[dict[str, str]]:
    path = CORPUS / "cases.json"
    cases = json.loads(path.read_text())["cases"]
    return [c for c in cases if c["format"] in ("pickle", "torch-legacy") and "recipe" not in c]


KIND_TO_VERDICT = {"benign": Verdict.CLEAN, "policy": Verdict.POLICY,
                   "malicious": Verdict.MALICIOUS, "malformed": Verdict.MALFORMED}


@pytest.mark.parametrize("case", _corpus_cases(), ids=lambda c: c["id"])
def test_corpus_case_gets_expected_verdict(case: dict[str, str]) -> None:
    path = CORPUS / "files" / case["path"]
    fd = os.open(path, os.O_RDONLY)
    try:
        blob = FileBlob(case["path"], fd, os.fstat(fd).st_size)
        fn = analyze_torch_legacy if case["format"] == "torch-legacy" else analyze_pickle
        findings = check(fn(ScanContext(), blob), case["path"])
    finally:
        os.close(fd)
    assert worst(findings) is KIND_TO_VERDICT[case["kind"]], findings
    assert "format.pickle_not_allowed" in rules(findings)


# -- public bugs ----------------------------------------------------------------------------

MEMO_WRITES: dict[str, Callable[[int], bytes]] = {
    "PUT": lambda i: P.PUT + f"{i}\n".encode(),
    "BINPUT": lambda i: P.BINPUT + bytes([i]),
    "LONG_BINPUT": lambda i: P.LONG_BINPUT + i.to_bytes(4, "little"),
}
MEMO_READS: dict[str, Callable[[int], bytes]] = {
    "GET": lambda i: P.GET + f"{i}\n".encode(),
    "BINGET": lambda i: P.BINGET + bytes([i]),
    "LONG_BINGET": lambda i: P.LONG_BINGET + i.to_bytes(4, "little"),
}


def _memo_confusion(put: str, get: str, real: tuple[str, str], decoy: tuple[str, str]) -> bytes:
    """Real names stored with explicit-index puts, decoys with MEMOIZE (keys 2 and 3)."""
    w, r = MEMO_WRITES[put], MEMO_READS[get]
    body = P4 + u(real[0]) + w(0) + u(real[1]) + w(1)
    body += u(decoy[0]) + P.MEMOIZE + u(decoy[1]) + P.MEMOIZE + P.POP * 4
    body += r(0) + r(1) + P.STACK_GLOBAL + u("true") + P.TUPLE1 + P.REDUCE + P.STOP
    return body


def test_pickle_memo_confusion_public_input(tmp_path: Path) -> None:
    """The exact generator of public bug pickle-memo-confusion (picklescan#14)."""
    body = P4 + u("os") + P.BINPUT + b"\x00" + u("system") + P.BINPUT + b"\x01"
    body += u("collections") + P.MEMOIZE + u("OrderedDict") + P.MEMOIZE + P.POP * 4
    body += P.BINGET + b"\x00" + P.BINGET + b"\x01" + P.STACK_GLOBAL
    body += u("true") + P.TUPLE1 + P.REDUCE + P.STOP
    findings = scan(body)
    assert worst(findings) is Verdict.MALICIOUS
    assert evidence(findings, "pickle.unsafe_global") == {"os.system"}
    assert not any("OrderedDict" in f.evidence + f.message for f in findings)


@pytest.mark.parametrize("put", sorted(MEMO_WRITES))
@pytest.mark.parametrize("get", sorted(MEMO_READS))
def test_pickle_memo_confusion_every_memo_opcode(put: str, get: str) -> None:
    findings = scan(_memo_confusion(put, get, ("os", "system"), ("collections", "OrderedDict")))
    assert evidence(findings, "pickle.unsafe_global") == {"os.system"}
    assert not any("OrderedDict" in f.evidence for f in findings)
    # the mirror image: the real memo names the allowlisted callable, decoys are harmless
    findings = scan(_memo_confusion(put, get, ("collections", "OrderedDict"), ("os", "system")))
    assert worst(findings) is Verdict.POLICY, findings


def test_pickle_memo_confusion_memo_overwrite_and_memoize_index() -> None:
    """MEMOIZE uses len(memo), not the highest key; PUT may overwrite a key."""
    body = P4 + u("collections") + P.BINPUT + b"\x05" + u("os") + P.MEMOIZE  # len(memo)=1 -> key 1
    body += u("OrderedDict") + P.BINPUT + b"\x06" + u("system") + P.BINPUT + b"\x06"  # overwrite
    body += P.POP * 4 + P.BINGET + b"\x01" + P.BINGET + b"\x06" + P.STACK_GLOBAL + P.STOP
    assert evidence(scan(body), "pickle.unsafe_global") == {"os.system"}


def test_pickle_allowlisted_module_build_public_input() -> None:
    """The exact generator of public bug pickle-allowlisted-module-build (modelscan#330)."""
    body = P4 + u("numpy") + u("size") + P.STACK_GLOBAL + P.MEMOIZE
    body += u("numpy") + u("__builtins__") + P.STACK_GLOBAL + P.MEMOIZE + P.POP + P.POP
    body += (P.BINGET + b"\x00" + P.EMPTY_DICT + P.EMPTY_DICT + u("shape")
             + P.BINGET + b"\x01" + P.SETITEM + P.TUPLE2 + P.BUILD + P.POP)
    body += P.BINGET + b"\x00" + P.BINGET + b"\x00" + u("eval") + P.TUPLE2 + P.REDUCE
    body += u("None") + P.TUPLE1 + P.REDUCE + P.STOP
    findings = scan(body)
    assert worst(findings) is Verdict.MALICIOUS
    assert "numpy.__builtins__" in evidence(findings, "pickle.unsafe_global")
    assert "numpy.size" in evidence(findings, "pickle.build_on_global")


@pytest.mark.parametrize("target", [
    ("collections", "OrderedDict"), ("torch._utils", "_rebuild_tensor_v2"), ("torch", "Size")])
def test_pickle_allowlisted_module_build_on_allowlisted_global(target: tuple[str, str]) -> None:
    """BUILD on an allowlisted global itself (not an object it created) is malicious."""
    body = P4 + u(target[0]) + u(target[1]) + P.STACK_GLOBAL + P.EMPTY_DICT + u("x")
    body += P.NONE + P.SETITEM + P.BUILD + P.STOP
    findings = scan(body)
    assert evidence(findings, "pickle.build_on_global") == {".".join(target)}
    assert "pickle.unsafe_global" not in rules(findings)


@pytest.mark.parametrize("op", ["SETITEM", "APPEND", "APPENDS", "SETITEMS", "ADDITEMS"])
def test_pickle_allowlisted_module_build_mutation_of_global(op: str) -> None:
    tail = {"SETITEM": u("k") + P.NONE + P.SETITEM, "APPEND": P.NONE + P.APPEND,
            "APPENDS": P.MARK + P.NONE + P.APPENDS, "ADDITEMS": P.MARK + P.NONE + P.ADDITEMS,
            "SETITEMS": P.MARK + u("k") + P.NONE + P.SETITEMS}[op]
    findings = scan(P4 + glob("collections", "OrderedDict") + tail + P.STOP)
    assert evidence(findings, "pickle.build_on_global") == {"collections.OrderedDict"}


def test_pickle_allowlisted_module_build_dunder_state_on_created_object() -> None:
    made = glob("collections", "OrderedDict") + P.EMPTY_TUPLE + P.REDUCE
    benign = scan(P2 + made + P.EMPTY_DICT + binu("_metadata") + P.NONE + P.SETITEM
                  + P.BUILD + P.STOP)
    assert worst(benign) is Verdict.POLICY
    for state in (P.EMPTY_DICT + binu("__class__") + P.NONE + P.SETITEM,
                  P.NONE + P.MARK + binu("__dict__") + P.NONE + P.DICT + P.TUPLE2):
        findings = scan(P2 + made + state + P.BUILD + P.STOP)
        assert "pickle.build_on_global" in rules(findings), findings


@pytest.mark.parametrize("module,name", [
    ("numpy", "__builtins__"), ("torch._utils", "__builtins__"), ("collections", "__dict__"),
    ("torch.__init__", "Size"), ("numpy", "size"), ("torch.storage", "_load_from_bytes"),
    ("torch._utils", "_rebuild_device_tensor_from_numpy"), ("torch", "load"),
    ("zipfile", "os.system"), ("collections", "OrderedDict.fromkeys"),
    ("torch._utils", "_rebuild_tensor_v2.__globals__"), ("Collections", "OrderedDict"),
])
def test_pickle_allowlisted_module_build_allowlist_is_per_qualified_name(
        module: str, name: str) -> None:
    findings = scan(P4 + u(module) + u(name) + P.STACK_GLOBAL + P.STOP)
    assert evidence(findings, "pickle.unsafe_global") == {f"{module}.{name}"}
    assert lookup(module, name) is None


# -- allowlist --------------------------------------------------------------------------

def test_allowlist_entries_are_exact_names_with_reasons() -> None:
    assert "torch._utils._rebuild_tensor_v2" in ALLOWLIST
    assert "torch.storage._load_from_bytes" not in ALLOWLIST
    for qualname, entry in ALLOWLIST.items():
        module, _, name = qualname.rpartition(".")
        assert entry.qualname == qualname and len(entry.reason) > 20
        assert lookup(module, name) is entry
        assert entry.uses <= {"call", "ref"} and entry.uses
        assert "__" not in qualname


# -- benign streams are policy only ------------------------------------------------------

PLAIN = {"a": [1, 2.5, -3, 2**70, None, True], "b": ("x", b"\x00\xff", bytearray(b"z")),
         "c": {frozenset({1}), 3j.imag}, "d": "é" * 3, "e": list(range(300))}


@pytest.mark.parametrize("protocol", range(0, 6))
def test_plain_data_is_policy_only(protocol: int) -> None:
    findings = scan(P.dumps(PLAIN, protocol=protocol))
    assert [f.rule_id for f in findings] == ["format.pickle_not_allowed"], findings


@pytest.mark.parametrize("protocol", range(0, 6))
def test_numpy_arrays_are_policy_only(protocol: int) -> None:
    np = pytest.importorskip("numpy")
    value = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "s": np.float64(1.5)}
    findings = scan(P.dumps(value, protocol=protocol))
    assert worst(findings) is Verdict.POLICY, findings


def test_torch_state_dict_is_policy_only() -> None:
    body = state_dict(("w", tensor("0", 4)), ("h", tensor("1", 2, "BFloat16Storage")),
                      ("p", glob("torch._utils", "_rebuild_parameter") + P.MARK
                       + tensor("2", 3) + P.NEWTRUE + glob("collections", "OrderedDict")
                       + P.EMPTY_TUPLE + P.REDUCE + P.TUPLE + P.REDUCE))
    assert rules(scan(body)) == {"format.pickle_not_allowed"}


@pytest.mark.parametrize("opcode", ["STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE",
                                    "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8"])
def test_stack_global_from_every_string_opcode(opcode: str) -> None:
    def s(text: str) -> bytes:
        b = text.encode()
        return {"STRING": P.STRING + b"'" + b + b"'\n",
                "BINSTRING": P.BINSTRING + len(b).to_bytes(4, "little") + b,
                "SHORT_BINSTRING": P.SHORT_BINSTRING + bytes([len(b)]) + b,
                "UNICODE": P.UNICODE + b + b"\n",
                "BINUNICODE": binu(text), "SHORT_BINUNICODE": u(text),
                "BINUNICODE8": P.BINUNICODE8 + len(b).to_bytes(8, "little") + b}[opcode]
    body = s("posix") + P.BINPUT + b"\x00" + P.POP + P.BINGET + b"\x00" + s("system")
    findings = scan(body + P.STACK_GLOBAL + s("true") + P.TUPLE1 + P.REDUCE + P.STOP)
    assert evidence(findings, "pickle.unsafe_global") == {"posix.system"}
    safe = scan(s("collections") + s("OrderedDict") + P.STACK_GLOBAL + P.STOP)
    assert worst(safe) is Verdict.POLICY


def test_python2_names_are_mapped_for_protocol_below_3() -> None:
    findings = scan(P2 + glob("__builtin__", "eval") + P.STOP)
    [f] = [f for f in findings if f.rule_id == "pickle.unsafe_global"]
    assert f.evidence == "__builtin__.eval" and "builtins.eval" in f.message


# -- calls --------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["REDUCE", "OBJ", "NEWOBJ", "NEWOBJ_EX", "INST"])
def test_every_call_opcode_on_a_dangerous_global(how: str) -> None:
    body = {"REDUCE": glob("os", "system") + binu("true") + P.TUPLE1 + P.REDUCE,
            "OBJ": P.MARK + glob("os", "system") + binu("true") + P.OBJ,
            "NEWOBJ": glob("os", "system") + binu("true") + P.TUPLE1 + P.NEWOBJ,
            "NEWOBJ_EX": glob("os", "system") + binu("t") + P.TUPLE1 + P.EMPTY_DICT + P.NEWOBJ_EX,
            "INST": P.MARK + binu("true") + P.INST + b"os\nsystem\n"}[how]
    findings = scan(P4 + body + P.STOP)
    assert evidence(findings, "pickle.unsafe_global") == {"os.system"}


def test_call_on_a_computed_value_is_unsafe() -> None:
    """Calling a call's result (allowlisted callable) is still a call on a non-global."""
    made = glob("collections", "OrderedDict") + P.EMPTY_TUPLE + P.REDUCE
    findings = scan(P2 + made + P.EMPTY_TUPLE + P.REDUCE + P.STOP)
    assert evidence(findings, "pickle.unsafe_call") == {"result of collections.OrderedDict()"}
    for callee in (binu("x"), P.EMPTY_DICT, P.NONE):
        assert "pickle.unsafe_call" in rules(scan(P2 + callee + P.EMPTY_TUPLE + P.REDUCE + P.STOP))


def test_dynamic_stack_global_is_malicious() -> None:
    made = glob("collections", "OrderedDict") + P.EMPTY_TUPLE + P.REDUCE
    findings = scan(P4 + made + u("system") + P.STACK_GLOBAL + P.STOP)
    assert "pickle.dynamic_global" in rules(findings)
    assert worst(findings) is Verdict.MALICIOUS
    # a bytes operand makes the real unpickler fail: malformed, not a call
    assert "pickle.malformed" in rules(scan(P4 + P.SHORT_BINBYTES + b"\x02os" + u("system")
                                             + P.STACK_GLOBAL + P.STOP))


@pytest.mark.parametrize("args,ok", [
    (binu("abc") + binu("latin1") + P.TUPLE2, True),
    (binu("abc") + binu("zlib_codec") + P.TUPLE2, False),
    (binu("abc") + P.TUPLE1, False),
])
def test_codecs_encode_only_latin1(args: bytes, ok: bool) -> None:
    findings = scan(P2 + glob("_codecs", "encode") + args + P.REDUCE + P.STOP)
    assert (worst(findings) is Verdict.POLICY) is ok, findings


def test_ref_only_allowlisted_names_are_not_callable() -> None:
    for module, name in (("torch", "FloatStorage"), ("numpy", "ndarray")):
        findings = scan(P2 + glob(module, name) + P.BININT + (10**9).to_bytes(4, "little")
                        + P.TUPLE1 + P.REDUCE + P.STOP)
        assert evidence(findings, "pickle.unsafe_call") == {f"{module}.{name}"}


def test_numpy_reconstruct_needs_ndarray_subtype() -> None:
    rec = glob("numpy.core.multiarray", "_reconstruct")
    good = rec + glob("numpy", "ndarray") + P.BININT1 + b"\x00" + P.TUPLE1 + binu("b") + P.TUPLE3
    bad = rec + glob("collections", "OrderedDict") + P.BININT1 + b"\x00" + P.TUPLE1 + binu("b")
    assert worst(scan(P2 + good + P.REDUCE + P.STOP)) is Verdict.POLICY
    assert "pickle.unsafe_call" in rules(scan(P2 + bad + P.TUPLE3 + P.REDUCE + P.STOP))


@pytest.mark.parametrize("ext", [P.EXT1 + b"\xf0", P.EXT2 + b"\x01\x01",
                                 P.EXT4 + b"\x01\x00\x00\x00"])
def test_every_ext_opcode_is_malicious(ext: bytes) -> None:
    findings = scan(P2 + ext + P.STOP)
    assert rules(findings) >= {"pickle.extension_code"}
    assert worst(findings) is Verdict.MALICIOUS


# -- persistent ids ------------------------------------------------------------------------

def test_persistent_ids() -> None:
    ok = scan(P2 + tensor("0", 4) + P.STOP)
    assert rules(ok) == {"format.pickle_not_allowed"}
    odd = scan(P2 + binu("storage") + P.BINPERSID + P.STOP)
    assert "pickle.persistent_id" in rules(odd) and worst(odd) is Verdict.MALFORMED
    text = scan(P.PERSID + b"0\n" + P.STOP)
    assert "pickle.persistent_id" in rules(text)
    conflict = scan(P2 + tensor("0", 4) + tensor("0", 5) + P.TUPLE2 + P.STOP)
    assert "pickle.persistent_id" in rules(conflict)
    # an embedded pickle whose loader has no persistent_load
    data = b"HEAD" + P2 + tensor("0", 4) + P.STOP
    findings, end = analyze_pickle_at(ScanContext(), GuardedBlob("x.npy", data), 4)
    assert end == len(data) and "pickle.persistent_id" in rules(findings)


# -- malformed, truncated, several pickles ------------------------------------------------

@pytest.mark.parametrize("body,rule", [
    (P2 + binu("x"), "pickle.truncated"),
    (P2 + P.BINUNICODE + b"\xff\x00\x00\x00ab", "pickle.truncated"),
    (P2 + b"\xff" + P.STOP, "pickle.malformed"),
    (P.PROTO + b"\x06" + P.NONE + P.STOP, "pickle.malformed"),
    (P2 + P.TUPLE2 + P.STOP, "pickle.malformed"),
    (P2 + P.TUPLE + P.STOP, "pickle.malformed"),
    (P2 + P.BINGET + b"\x07" + P.STOP, "pickle.malformed"),
    (P2 + P.STOP, "pickle.malformed"),
    (P.STRING + b"abc\n" + P.STOP, "pickle.malformed"),
    (P.INT + b"12x\n" + P.STOP, "pickle.malformed"),
    (P4 + P.BINUNICODE + b"\x02\x00\x00\x00\xff\xfe" + P.STOP, "pickle.malformed"),
    (P.PROTO + b"\x05" + P.NEXT_BUFFER + P.STOP, "pickle.malformed"),
    (P4 + P.FRAME + (1000).to_bytes(8, "little") + P.NONE + P.STOP, "pickle.truncated"),
    (P2 + P.MARK + P.NONE + P.NONE + P.DICT + P.MARK + P.NONE + P.SETITEMS + P.STOP,
     "pickle.malformed"),
])
def test_malformed_streams(body: bytes, rule: str) -> None:
    findings = scan(body)
    assert rule in rules(findings) and worst(findings) is Verdict.MALFORMED, findings


def test_pop_on_empty_frame_pops_the_mark() -> None:
    """pickle.py: POP with an empty stack frame discards the MARK (no error)."""
    assert worst(scan(P2 + P.NONE + P.MARK + P.POP + P.STOP)) is Verdict.POLICY


def test_dangerous_global_before_a_cut_is_still_malicious() -> None:
    for cut in (len(P2) + len(SYSTEM_CALL) - 1, len(P2) + len(glob("os", "system")) + 2):
        findings = scan((P2 + SYSTEM_CALL + P.STOP)[:cut])
        assert "pickle.truncated" in rules(findings)
        assert worst(findings) is Verdict.MALICIOUS, findings
    findings = scan(P2 + SYSTEM_CALL + b"\xfe" + P.STOP)
    assert {"pickle.malformed", "pickle.unsafe_global"} <= rules(findings)


def test_every_consecutive_pickle_is_analysed() -> None:
    benign = P.dumps(["a", "b"], protocol=2)
    findings = scan(benign + benign + P2 + SYSTEM_CALL + P.STOP)
    [f] = [f for f in findings if f.rule_id == "pickle.unsafe_global"]
    assert f.offset == 2 * len(benign) + len(P2)
    assert rules(scan(benign + benign)) == {"format.pickle_not_allowed"}
    trailing = scan(benign + b"\n\x00garbage")
    assert "pickle.trailing_data" in rules(trailing) and worst(trailing) is Verdict.MALFORMED


def test_analyze_pickle_at_returns_end_offset() -> None:
    inner = P2 + SYSTEM_CALL + P.STOP
    data = b"\x93NUMPY-header" + inner + b"raw array bytes"
    findings, end = analyze_pickle_at(ScanContext(), GuardedBlob("a.npy", data), 13)
    assert end == 13 + len(inner)
    assert evidence(findings, "pickle.unsafe_global") == {"os.system"}
    assert "format.pickle_not_allowed" not in rules(findings)


# -- nested pickles ------------------------------------------------------------------------

@pytest.mark.parametrize("const", [
    lambda b: P.SHORT_BINBYTES + bytes([len(b)]) + b,
    lambda b: P.BINBYTES + len(b).to_bytes(4, "little") + b,
    lambda b: P.BINUNICODE + len(b).to_bytes(4, "little") + b,
])
def test_nested_pickle_constant_is_analysed(const: Any) -> None:
    for inner in (P2 + glob("posix", "system") + P.STOP, b"cposix\nsystem\n."):
        body = P4 + glob("builtins", "len") + const(inner) + P.TUPLE1 + P.REDUCE + P.STOP
        findings = scan(body)
        nested = [f for f in findings if "#nested@" in f.path]
        assert {f.evidence for f in nested} == {"posix.system"}, findings
        assert "pickle.nested_pickle" in rules(findings)


def test_plain_strings_are_not_nested_pickles() -> None:
    texts = ["Hello world.", "cool stuff.", "(see above).", "c\n\nno stop", "\x80\x09abcdefg"]
    body = P4 + P.MARK + b"".join(binu(t) for t in texts) + P.LIST + P.STOP
    assert rules(scan(body)) == {"format.pickle_not_allowed"}


def test_nested_pickles_are_depth_bounded() -> None:
    inner = P2 + glob("posix", "system") + P.STOP
    for _ in range(6):
        inner = P2 + P.BINBYTES + len(inner).to_bytes(4, "little") + inner + P.STOP
    findings = scan(inner, max_nesting_depth=3)
    assert "scanner.limit_exceeded" in rules(findings)
    assert "posix.system" not in evidence(findings, "pickle.unsafe_global")
    deep = scan(inner, max_nesting_depth=8)
    assert "posix.system" in evidence(deep, "pickle.unsafe_global")


# -- limits and bounded reading --------------------------------------------------------------

def test_limits_are_findings_and_keep_earlier_evidence() -> None:
    body = P2 + SYSTEM_CALL + P.MARK + P.NONE * 20000 + P.TUPLE + P.STOP
    for limits in ({"max_pickle_bytes": 1000}, {"max_pickle_ops": 5000},
                   {"seconds_per_target": -1.0}):
        findings = scan(body, **limits)
        assert "scanner.limit_exceeded" in rules(findings), limits
        assert worst(findings) is Verdict.MALICIOUS
    assert "scanner.limit_exceeded" not in rules(scan(body))


class SyntheticBlob:
    """A huge pickle generated on the fly: PROTO, BINBYTES8 of ``n`` zeros, TUPLE1, STOP."""

    def __init__(self, n: int, tail: bytes = P.TUPLE1 + P.STOP) -> None:
        self.name = "huge.pkl"
        self.head = P4 + P.BINBYTES8 + n.to_bytes(8, "little")
        self.tail = tail
        self.size = len(self.head) + n + len(tail)
        self.max_read = 0

    def read_at(self, offset: int, length: int) -> bytes:
        assert 0 <= offset and offset + length <= self.size
        self.max_read = max(self.max_read, length)
        out = bytearray(length)
        for i, b in enumerate(self.head[offset : offset + length]):
            out[i] = b
        tail_at = self.size - len(self.tail)
        for i in range(max(offset, tail_at), offset + length):
            out[i - offset] = self.tail[i - tail_at]
        return bytes(out)


def test_multi_gigabyte_constant_is_skipped_not_read() -> None:
    blob = SyntheticBlob(8 << 30)
    findings = analyze_pickle(ScanContext(Limits(max_pickle_bytes=16 << 30)), blob)
    assert [f.rule_id for f in findings] == ["format.pickle_not_allowed"]
    assert blob.max_read <= CHUNK
    limited = analyze_pickle(ScanContext(), SyntheticBlob(8 << 30))
    assert "scanner.limit_exceeded" in rules(limited)


# -- legacy torch.save --------------------------------------------------------------------

def test_legacy_plain_checkpoint_is_policy() -> None:
    findings = scan_legacy(legacy())
    assert rules(findings) == {"format.pickle_not_allowed"}, findings


def test_legacy_raw_storage_bytes_are_not_parsed_as_pickles() -> None:
    payload = P2 + glob("posix", "system") + P.STOP  # 18 bytes, looks like a pickle
    raw = (20).to_bytes(8, "little") + payload.ljust(20, b"\x00")
    main = state_dict(("w", tensor("0", 20, "ByteStorage")))
    assert rules(scan_legacy(legacy(main=main, keys=["0"], raw=raw))) == {
        "format.pickle_not_allowed"}


def test_legacy_magic_number_computed_by_eval() -> None:
    magic = P2 + glob("__builtin__", "eval") + binu(hex(MAGIC)) + P.TUPLE1 + P.REDUCE + P.STOP
    findings = scan_legacy(legacy(magic=magic))
    assert worst(findings) is Verdict.MALICIOUS
    assert "__builtin__.eval" in evidence(findings, "pickle.unsafe_global")
    assert "pickle.torch_legacy_header" in rules(findings)


@pytest.mark.parametrize("kw", [
    {"magic": P2 + long1(MAGIC + 1) + P.STOP},
    {"version": P2 + P.BININT2 + b"\xea\x03" + P.STOP},
    {"version": P2 + P.NEWTRUE + P.STOP},
])
def test_legacy_header_literals(kw: dict[str, Any]) -> None:
    findings = scan_legacy(legacy(**kw))
    assert "pickle.torch_legacy_header" in rules(findings)
    assert worst(findings) is Verdict.MALFORMED


@pytest.mark.parametrize("kw", [
    {"raw": (4).to_bytes(8, "little") + bytes(16) + (2).to_bytes(8, "little") + bytes(9)},
    {"raw": (4).to_bytes(8, "little") + bytes(16) + (2).to_bytes(8, "little") + bytes(7)},
    {"raw": (5).to_bytes(8, "little") + bytes(20) + (2).to_bytes(8, "little") + bytes(8)},
    {"keys": ["0"]},
    {"keys": ["0", "1", "2"]},
    {"keys": {"0": 1}},
])
def test_legacy_storage_layout(kw: dict[str, Any]) -> None:
    findings = scan_legacy(legacy(**kw))
    assert "pickle.torch_legacy_layout" in rules(findings), findings
    assert worst(findings) is Verdict.MALFORMED


def test_legacy_malicious_main_and_truncation() -> None:
    main = state_dict(("w", tensor("0", 4)), ("x", SYSTEM_CALL))
    findings = scan_legacy(legacy(main=main))
    assert evidence(findings, "pickle.unsafe_global") == {"os.system"}
    cut = scan_legacy(legacy()[:40])
    assert "pickle.truncated" in rules(cut) and worst(cut) is Verdict.MALFORMED


# -- second opinion ---------------------------------------------------------------------------

def test_second_opinion_adds_what_we_missed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulate an allowlist mistake: picklescan still reports os.system as dangerous."""
    from scanner.core import allowlist as _allowlist

    entry = _allowlist.Entry("os.system", _allowlist.CALL, "deliberately wrong for the test")
    monkeypatch.setitem(_allowlist.ALLOWLIST, "os.system", entry)
    findings = scan(P2 + SYSTEM_CALL + P.STOP)
    assert "pickle.unsafe_global" not in rules(findings)
    assert evidence(findings, "pickle.second_opinion") == {"os.system"}
    assert worst(findings) is Verdict.MALICIOUS


def test_second_opinion_never_clears_and_its_crash_is_ignored(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import picklescan.scanner

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("picklescan bug")

    monkeypatch.setattr(picklescan.scanner, "scan_pickle_bytes", boom)
    findings = scan(P2 + SYSTEM_CALL + P.STOP)
    assert evidence(findings, "pickle.unsafe_global") == {"os.system"}
    assert _pickle_second.second_opinion(BytesBlob("x", b"junk"), 0, 4, {}) == []


def test_no_allowlist_entry_is_rated_dangerous_by_picklescan() -> None:
    """The allowlist and the second opinion must agree: an entry picklescan rates dangerous
    would turn every plain checkpoint that uses it into ``pickle.second_opinion``."""
    import io

    from picklescan.scanner import SafetyLevel, scan_pickle_bytes

    from scanner.core.allowlist import ALLOWLIST

    assert ALLOWLIST
    for qualname in ALLOWLIST:
        module, _, name = qualname.rpartition(".")
        stream = b"c" + module.encode() + b"\n" + name.encode() + b"\n."  # GLOBAL, STOP
        result = scan_pickle_bytes(io.BytesIO(stream), qualname)
        assert [(g.module, g.name) for g in result.globals] == [(module, name)], qualname
        assert result.globals[0].safety is not SafetyLevel.Dangerous, qualname


def test_fickling_frame_divergence_reports_the_buried_os_system() -> None:
    """fickling#317 / python/cpython#154848: BINBYTES declared longer than its FRAME.
    A straight read sees one bytes constant; the old C unpickler reading a file drops
    the rest of the frame and runs the GLOBAL os.system buried in the "constant"."""
    buried = P.GLOBAL + b"os\nsystem\n" + P.UNICODE + b"id\n" + P.TUPLE1 + P.REDUCE + P.MARK
    body = P.PROTO + b"\x05" + P.NONE + P.POP + P.MARK + P.FRAME + (2).to_bytes(8, "little")
    body += P.BINBYTES + b"\x07\x01\x00\x00" + b"\x00\x00" + buried.ljust(261, P.NONE)
    body += P.POP_MARK + P.STOP
    findings = scan(body)
    assert {"pickle.frame_divergence", "pickle.unsafe_global"} <= rules(findings)
    assert "os.system" in evidence(findings, "pickle.unsafe_global")
    assert worst(findings) is Verdict.MALICIOUS


@pytest.mark.parametrize("protocol", [4, 5])
def test_well_framed_pickles_have_no_frame_divergence(protocol: int) -> None:
    body = P.dumps({"k": [b"x" * 70_000, "y" * 100_000, list(range(5000))]}, protocol=protocol)
    assert P.FRAME in body
    assert rules(scan(body)) == {"format.pickle_not_allowed"}
