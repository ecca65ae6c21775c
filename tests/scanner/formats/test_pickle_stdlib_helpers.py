"""Plain pickles that use Python's private reduction helpers and run nothing are not
malicious: ``copyreg._reconstructor`` with ``object`` or a builtin container/number base
(protocol 0/1 encoding of builtin subclasses), ``copyreg.__newobj__`` of a tier class,
``_codecs.encode`` (bytes at protocols 0-2), ``array._array_reconstructor``, and
stdlib value classes (SimpleNamespace, pathlib paths, array). The same helpers around a
callable that runs code stay malicious. Streams come from ``pickle.dumps`` of harmless
values or are written as protocol-0 opcodes; nothing is loaded."""

from __future__ import annotations

import array
import pathlib
import pickle
import types

import pytest

from scanner.core.context import ScanContext
from scanner.core.model import BytesBlob, Verdict, worst
from scanner.formats.pickle.analyze import analyze_pickle


def _verdict(data: bytes) -> Verdict:
    return worst(analyze_pickle(ScanContext(), BytesBlob("p.pkl", data)))


@pytest.mark.parametrize("protocol", range(6))
@pytest.mark.parametrize("value", [
    types.SimpleNamespace(a=1, b=[2]), array.array("i", [1, 2]), array.array("d", [0.5]),
    pathlib.PurePosixPath("/a/b"), pathlib.PureWindowsPath("c:/x"), b"\x00\xffbytes",
    bytearray(b"xy"), {"k": {1, 2}, "f": frozenset({3})},
], ids=["namespace", "array_i", "array_d", "posixpath", "winpath", "bytes", "bytearray",
        "sets"])
def test_stdlib_values_are_not_malicious(value: object, protocol: int) -> None:
    assert _verdict(pickle.dumps(value, protocol=protocol)) <= Verdict.POLICY


@pytest.mark.parametrize("base", [b"object", b"dict", b"list", b"int", b"str", b"set"])
def test_reconstructor_with_builtin_base_is_policy(base: bytes) -> None:
    state = b"N" if base == b"object" else b"(dp1\n"
    data = (b"ccopy_reg\n_reconstructor\n(ccollections\nOrderedDict\nc__builtin__\n" + base
            + b"\n" + state + b"tR.")
    assert _verdict(data) is Verdict.POLICY


@pytest.mark.parametrize("data", [
    b"ccopy_reg\n_reconstructor\n(cposix\nsystem\nc__builtin__\nobject\nNtR.",
    b"ccopy_reg\n_reconstructor\n(ccollections\nOrderedDict\ncposix\nsystem\nS'id'\ntR.",
    b"ccopyreg\n__newobj__\n(cposix\nsystem\nS'id'\ntR.",
], ids=["cls_is_system", "base_is_system", "newobj_system"])
def test_helpers_around_code_stay_malicious(data: bytes) -> None:
    assert _verdict(data) is Verdict.MALICIOUS


def test_newobj_helper_of_a_tier_class_is_policy() -> None:
    assert _verdict(b"ccopyreg\n__newobj__\n(ccollections\nOrderedDict\ntR.") is Verdict.POLICY
