"""Every container ``joblib.load`` opens is opened here too (joblib ``compressor.py``
prefixes; ``numpy_pickle_compat.read_zfile`` for the legacy ``ZF`` file): raw zlib,
LZMA "alone", xz, gzip, bzip2 and ``ZF``; a stream that follows another one is read as
Python's file readers read it. Files are compressed here from hand-written pickle bytes
and ``pickle.dumps`` of harmless values; nothing is loaded."""

from __future__ import annotations

import bz2
import gzip
import lzma
import pickle
import zlib
from collections.abc import Callable

import pytest

from scanner.core.context import ScanContext
from scanner.core.model import BytesBlob, Finding, Verdict, worst
from scanner.formats.compressed import kind_of
from scanner.scan.dispatch import analyze_blob

# PROTO 2, GLOBAL posix.system, BINUNICODE 'true', TUPLE1, REDUCE, STOP
EVIL = b"\x80\x02cposix\nsystem\nX\x04\x00\x00\x00true\x85R."
HARMLESS = pickle.dumps({"coef": [1.5, 2.5], "name": "ridge"}, protocol=2)


def zf(data: bytes) -> bytes:
    """joblib < 0.10 ``write_zfile``: b"ZF", hex length left-justified to 19, zlib."""
    return b"ZF" + f"{len(data):#x}".ljust(19).encode() + zlib.compress(data)


CONTAINERS: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "zlib": ("zlib", zlib.compress),
    "lzma": ("lzma", lambda d: lzma.compress(d, format=lzma.FORMAT_ALONE)),
    "xz": ("xz", lzma.compress),
    "gzip": ("gzip", gzip.compress),
    "bz2": ("bzip2", bz2.compress),
    "zf": ("joblib-zf", zf),
}


def _scan(data: bytes, name: str = "model.joblib") -> list[Finding]:
    return analyze_blob(ScanContext(), BytesBlob(name, data))


@pytest.mark.parametrize("container", sorted(CONTAINERS))
def test_payload_in_every_joblib_container_is_malicious(container: str) -> None:
    kind, pack = CONTAINERS[container]
    data = pack(EVIL)
    assert kind_of(data[:4096]) == kind
    findings = _scan(data)
    assert worst(findings) is Verdict.MALICIOUS, findings
    assert "format.compressed_not_allowed" in {f.rule_id for f in findings}


@pytest.mark.parametrize("container", sorted(CONTAINERS))
def test_harmless_pickle_in_every_container_is_policy(container: str) -> None:
    findings = _scan(CONTAINERS[container][1](HARMLESS))
    assert worst(findings) is Verdict.POLICY, findings


@pytest.mark.parametrize("container", ["zlib", "lzma", "xz", "bz2", "gzip"])
def test_second_stream_is_read_like_the_loader(container: str) -> None:
    pack = CONTAINERS[container][1]
    assert worst(_scan(pack(HARMLESS) + pack(EVIL))) is Verdict.MALICIOUS


@pytest.mark.parametrize("text", [b"x^2 + y^2 = r^2\n" * 8, b"xylophone notes\n" * 8,
                                  b"ZF is not a joblib file\n", b"]\n"])
def test_text_that_starts_like_a_container_is_not_one(text: bytes) -> None:
    assert kind_of(text) is None
