"""Pickle inputs: ``pickle.dumps`` of plain data (protocols 0-5: memo, FRAME, BYTEARRAY8,
large ints, sets), hand-built malicious streams (GLOBAL, STACK_GLOBAL with memoised
names, INST, OBJ, NEWOBJ, nested REDUCE, BUILD, inside FRAMEs, after a benign prefix),
random opcode programs, and byte mutations of all of them (flips, opcode inserts,
truncations). Names are those a loader unpickles (``pytorch_model.bin``, ``*.pkl``,
``*.pt``, ``*.ckpt``, ``*.joblib``).

Nothing here is ever unpickled: the dumps are of built-in data only, and the malicious
streams are bytes.
"""

from __future__ import annotations

import pickle as P
import struct

from .draw import Draw
from .mutate import mutate
from .oracle import Case

NAMES = ("pytorch_model.bin", "model.pkl", "weights.pt", "last.ckpt", "model.pth",
         "model.joblib", "data.pkl")
DANGEROUS = (("os", "system"), ("posix", "system"), ("nt", "system"), ("builtins", "exec"),
             ("builtins", "eval"), ("subprocess", "Popen"), ("subprocess", "check_output"),
             ("runpy", "_run_code"), ("builtins", "getattr"), ("__builtin__", "eval"))
BENIGN = (("collections", "OrderedDict"), ("torch._utils", "_rebuild_tensor_v2"),
          ("torch", "FloatStorage"), ("numpy.core.multiarray", "_reconstruct"),
          ("numpy", "dtype"), ("builtins", "set"), ("copyreg", "_reconstructor"),
          ("__builtin__", "object"), ("pandas._libs.tslibs.timestamps", "_unpickle_timestamp"))
TOKENS = tuple(bytes([b]) for b in b"(.0123FGIJKLMNPQRSTUVXabcdeghijklmopqrstu}~\x80\x81"
               b"\x82\x83\x84\x85\x86\x87\x88\x89\x8a\x8b\x8c\x8d\x8e\x8f\x90\x91\x92"
               b"\x93\x94\x95\x96\x97\x98") + (b"cos\nsystem\n", b"\x8c\x02os\x8c\x06system\x93",
                                              b"\x95\x00\x00\x00\x00\x00\x00\x00\x00")


# no-op heads the unpickler accepts before a payload: a mark popped, a value popped, a
# protocol or frame op, an empty container popped
PREFIXES = (b"(0", b"N0", b"}0", b"(l0", b"I1\n0", b"S'x'\n0", b"\x80\x02", b"\x80\x04",
            b"\x95\x00\x00\x00\x00\x00\x00\x00\x00", b"(\x88\x890", b"]0", b"V\xe9\n0",
            b"F1.5\n0", b"L5L\n0", b"P0\n0", b"K\x010")


def _str(text: str, memo: int | None = None) -> bytes:
    raw = text.encode()
    op = P.SHORT_BINUNICODE + bytes([len(raw)]) if len(raw) < 256 else \
        P.BINUNICODE + struct.pack("<I", len(raw))
    return op + raw + (b"" if memo is None else P.BINPUT + bytes([memo]))


def _frame(body: bytes) -> bytes:
    return P.PROTO + b"\x04" + P.FRAME + struct.pack("<Q", len(body)) + body


def malicious_seeds() -> list[tuple[str, bytes]]:
    """(label, bytes): streams that call ``os.system`` & co. when unpickled."""
    seeds: list[tuple[str, bytes]] = [
        ("p0-global-reduce", b"cos\nsystem\n(S'echo fuzz'\ntR."),
        ("p0-inst", b"(S'echo fuzz'\nios\nsystem\n."),
        ("p1-obj", b"(cos\nsystem\nS'echo fuzz'\no."),
        ("p2-global-reduce", P.PROTO + b"\x02cos\nsystem\nX\x09\x00\x00\x00echo fuzz\x85R."),
        ("p4-stack-global", P.PROTO + b"\x04" + _str("os") + _str("system") + P.STACK_GLOBAL
         + _str("echo fuzz") + P.TUPLE1 + P.REDUCE + P.STOP),
        ("p4-stack-global-memo", P.PROTO + b"\x04" + _str("os", 0) + _str("system", 1)
         + P.STACK_GLOBAL + P.BINGET + b"\x00" + P.POP + _str("echo") + P.TUPLE1 + P.REDUCE
         + P.STOP),
        ("p4-memo-names", P.PROTO + b"\x04" + _str("posix") + P.MEMOIZE + _str("x") + P.POP
         + P.BINGET + b"\x00" + _str("system") + P.STACK_GLOBAL + _str("id") + P.TUPLE1
         + P.REDUCE + P.STOP),
        ("p4-frame", _frame(_str("subprocess") + _str("Popen") + P.STACK_GLOBAL
                            + P.EMPTY_LIST + _str("id") + P.APPEND + P.TUPLE1 + P.REDUCE
                            + P.STOP)),
        ("p2-newobj", P.PROTO + b"\x02" + b"csubprocess\nPopen\n" + _str("id") + P.TUPLE1
         + P.NEWOBJ + P.STOP),
        ("p4-newobj-ex", P.PROTO + b"\x04cos\nsystem\n" + P.EMPTY_TUPLE + P.EMPTY_DICT
         + P.NEWOBJ_EX + P.STOP),
        ("p2-nested-reduce", P.PROTO + b"\x02cbuiltins\ngetattr\n(cbuiltins\n__import__\n"
         b"(X\x02\x00\x00\x00ostRX\x06\x00\x00\x00systemtR(X\x02\x00\x00\x00idtR."),
        ("p2-build-setstate", P.PROTO + b"\x02ccollections\nOrderedDict\n)R}X\x0c\x00\x00\x00"
         b"__setstate__cbuiltins\nexec\nsb" + P.EMPTY_DICT + b"b."),
        ("p2-benign-prefix", P.dumps({"weights": [1.0, 2.0]}, protocol=2)[:-1] + P.POP
         + b"cos\nsystem\n(X\x02\x00\x00\x00idtR."),
        ("p5-runpy", P.PROTO + b"\x05" + _str("runpy") + _str("_run_code") + P.STACK_GLOBAL
         + _str("print(1)") + P.EMPTY_DICT + P.TUPLE2 + P.REDUCE + P.STOP),
        ("p3-eval-dict", P.PROTO + b"\x03}(X\x01\x00\x00\x00acbuiltins\neval\n"
         b"X\x01\x00\x00\x001\x85Ru."),
    ]
    legacy = b"".join(P.dumps(v, protocol=2) for v in (
        0x1950A86A20F9469CFC6C, 1001, {"protocol_version": 1001, "little_endian": True,
                                       "type_sizes": {"short": 2, "int": 4, "long": 4}}))
    seeds += [("torch-legacy-" + label, legacy + data) for label, data in seeds[:6]]
    return seeds


def benign_seeds() -> list[tuple[str, bytes]]:
    """(label, bytes): ``pickle.dumps`` of plain built-in data at every protocol."""
    shared = [1, 2, 3]
    values: list[object] = [
        {"a": 1, "b": [1.5, None, True], "c": ("x", b"\x00\xff")},
        [shared, shared, {"k": shared}],
        {"big": 1 << 100, "neg": -(1 << 70), "set": {1, 2}, "fs": frozenset({"q"})},
        {"text": "x" * 300, "blob": b"y" * 70_000},
        [bytearray(b"abc"), 2.5, -1, 255, 65536],
        {str(i): i for i in range(40)},
    ]
    return [(f"dumps-{i}-p{proto}", P.dumps(value, protocol=proto))
            for i, value in enumerate(values) for proto in range(6)]


MALICIOUS = malicious_seeds()
BENIGN_SEEDS = benign_seeds()


def _program(draw: Draw) -> bytes:
    """A random opcode program: pushes, containers, memo, globals (dangerous or not,
    GLOBAL or STACK_GLOBAL), calls and builds, optionally framed."""
    parts: list[bytes] = []
    memo = 0
    for _ in range(draw.integer(1, 30)):
        kind = draw.integer(0, 13)
        if kind == 0:
            parts.append(P.BININT1 + bytes([draw.integer(0, 255)]))
        elif kind == 1:
            parts.append(_str(draw.choice(("os", "system", "a", "", "torch", "x" * 40))))
        elif kind == 2:
            parts.append(draw.choice((P.MARK, P.EMPTY_LIST, P.EMPTY_DICT, P.EMPTY_TUPLE,
                                      P.NONE, P.NEWTRUE)))
        elif kind == 3:
            parts.append(draw.choice((P.APPEND, P.APPENDS, P.SETITEM, P.SETITEMS, P.TUPLE,
                                      P.TUPLE1, P.TUPLE2, P.TUPLE3, P.LIST, P.DICT, P.POP,
                                      P.POP_MARK, P.DUP, P.ADDITEMS, P.FROZENSET)))
        elif kind == 4:
            parts.append(P.MEMOIZE)
            memo += 1
        elif kind == 5:
            parts.append(P.BINGET + bytes([draw.integer(0, max(0, memo))]))
        elif kind == 6:
            module, name = draw.choice(DANGEROUS + BENIGN)
            parts.append(P.GLOBAL + f"{module}\n{name}\n".encode())
        elif kind == 7:
            module, name = draw.choice(DANGEROUS + BENIGN)
            parts.append(_str(module) + _str(name) + P.STACK_GLOBAL)
        elif kind == 8:
            parts.append(draw.choice((P.REDUCE, P.BUILD, P.NEWOBJ, P.OBJ, P.NEWOBJ_EX)))
        elif kind == 9:
            module, name = draw.choice(DANGEROUS + BENIGN)
            parts.append(P.INST + f"{module}\n{name}\n".encode())
        elif kind == 10:
            parts.append(P.BINPERSID if draw.chance(0.5) else P.PERSID + b"0\n")
        elif kind == 11:
            parts.append(P.BINBYTES + struct.pack("<I", draw.integer(0, 8)) + draw.blob(8))
        elif kind == 12:
            parts.append(P.LONG1 + bytes([draw.integer(0, 9)]) + draw.blob(9))
        else:
            parts.append(draw.choice((P.BINFLOAT + b"\x00" * 8, P.BYTEARRAY8 + b"\x01"
                                      + b"\x00" * 7 + b"z", P.NEXT_BUFFER, P.READONLY_BUFFER)))
    body = b"".join(parts) + P.STOP
    proto = draw.integer(0, 5)
    if proto >= 4 and draw.chance(0.5):
        return _frame(body)
    return (P.PROTO + bytes([proto]) if proto >= 2 else b"") + body


# snippets repeated thousands of times: deep marks and nesting, long memo chains, many
# calls on one object (the analyser's work must stay bounded by its op budget and deadline)
REPEATS = (P.MARK, P.EMPTY_LIST + P.MARK, P.DUP + P.APPEND, P.MEMOIZE + P.BINGET + b"\x00",
           P.EMPTY_TUPLE + P.TUPLE1, P.MARK + P.LIST, P.NONE + P.POP, P.BINPUT + b"\xff",
           P.LONG_BINGET + b"\xff\xff\xff\x7f", b"cbuiltins\nset\n" + P.EMPTY_TUPLE + P.REDUCE,
           _str("os") + _str("system") + P.STACK_GLOBAL + P.POP, P.FRAME + b"\x01" + b"\x00" * 7,
           P.EMPTY_DICT + P.MARK + P.NONE + P.NONE + P.SETITEMS)


def _stress(draw: Draw) -> bytes:
    head = P.PROTO + b"\x04" + P.EMPTY_LIST + P.MEMOIZE
    return head + draw.choice(REPEATS) * draw.integer(100, 5_000) + P.STOP


def generate(draw: Draw) -> Case:
    """One pickle case: a seed or a program, then 0-4 rounds of mutation; sometimes
    followed by a second stream (torch's legacy format holds several)."""
    source = draw.integer(0, 9)
    if source < 4:
        label, data = draw.choice(MALICIOUS)
        seed = f"mal:{label}"
    elif source < 7:
        label, data = draw.choice(BENIGN_SEEDS)
        seed = f"ok:{label}"
    elif source < 9:
        data, seed = _program(draw), "gen:program"
    else:
        data, seed = _stress(draw), "gen:stress"
    if draw.chance(0.2):
        data = b"".join(draw.choice(PREFIXES) for _ in range(draw.integer(1, 3))) + data
    if draw.chance(0.75):
        data = mutate(draw, data, TOKENS)
    if draw.chance(0.1):
        data += draw.choice(MALICIOUS)[1]
    return Case(draw.choice(NAMES), data, seed)
