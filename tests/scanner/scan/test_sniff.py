"""Content sniffing (scanner.scan.sniff): formats come from bytes, never from names; names only
break ties for binary that matches nothing. Inputs are built from raw bytes; nothing is
unpickled or loaded."""

from __future__ import annotations

import io
import os
import pickle
import struct
import tarfile
import zipfile

import pytest
from _shared import CORPUS as _CORPUS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scanner.core.model import BytesBlob, FileBlob
from scanner.core.spec import Format
from scanner.formats.pickle.sniff import looks_like_pickle
from scanner.scan.sniff import HEAD, sniff

CORPUS = _CORPUS
FILES = CORPUS / "files"

# PROTO 2, GLOBAL posix.system, BINUNICODE 'true', TUPLE1, REDUCE, STOP (never loaded)
PAYLOAD = b"\x80\x02cposix\nsystem\nX\x04\x00\x00\x00true\x85R."
PAYLOAD_P0 = b"cposix\nsystem\n(S'true'\ntR."


class CountingBlob:
    """A blob that records how many bytes sniffing reads."""

    def __init__(self, name: str, data: bytes) -> None:
        self.name, self.data, self.size = name, data, len(data)
        self.read = 0

    def read_at(self, offset: int, length: int) -> bytes:
        assert offset >= 0 and length >= 0
        out = self.data[offset : offset + length]
        self.read += len(out)
        return out


def fmt(data: bytes, name: str = "blob") -> Format:
    return sniff(BytesBlob(name, data))


def safetensors_bytes(header: bytes, data: bytes = b"") -> bytes:
    return struct.pack("<Q", len(header)) + header + data


def a_zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


# --- pickles by content, whatever the name -------------------------------------------

@pytest.mark.parametrize("protocol", range(0, 6))
@pytest.mark.parametrize("name", ["x.pkl", "config.json", "model.safetensors", "noext",
                                  "data.txt", "README.md"])
def test_pickles_of_every_protocol_sniff_as_pickle_whatever_the_name(protocol: int,
                                                                     name: str) -> None:
    data = pickle.dumps({"w": [1, 2.5, "x"], "b": (None, True)}, protocol=protocol)
    assert fmt(data, name) is Format("pickle")


@pytest.mark.parametrize("data", [
    PAYLOAD, PAYLOAD_P0,
    b"\x8c\x05posix\x8c\x06system\x93\x8c\x04true\x85R.",  # no PROTO, STACK_GLOBAL
    b"}q\x00(X\x01\x00\x00\x00aK\x01u.",  # protocol 1 dict without PROTO
    PAYLOAD_P0[:-1] + b"\xff\xff garbage",  # fails only after REDUCE: still executes
    b"N.",
])
def test_payload_and_headerless_pickles_are_pickles(data: bytes) -> None:
    assert fmt(data, "model.safetensors") is Format("pickle")


def test_torch_legacy_magic_is_detected() -> None:
    magic = b"\x80\x02\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little") + b"."
    assert fmt(magic + b"\x80\x02M\xe9\x03.", "x.bin") is Format("torch-legacy")
    # the magic produced by eval() instead of a literal is a plain pickle (GHSA-97f8-7cmv-76j2)
    assert fmt(b"\x80\x02c__builtin__\neval\n(X\x02\x00\x00\x0042tR.", "x.pt") is Format("pickle")


@pytest.mark.parametrize("text", [
    "Hello world, this is a README.\n",
    "# Model card\n\nimport torch is shown below\n",
    "(c) 2024 Example Corp. All rights reserved.\n",
    "class Foo:\n    pass\n",
    "cuda\nfalse\n",
    "N/A\n",
    "#version: 0.2\nĠ t\nĠ a\n",
    "[PAD]\n[unused0]\n[CLS]\n",
    "def f(x):\n    return x\n",
    "Lorem ipsum " * 400,
])
def test_text_is_not_mistaken_for_a_pickle(text: str) -> None:
    assert not looks_like_pickle(text.encode()[:HEAD])
    assert fmt(text.encode()) is not Format("pickle")


# --- magic numbers -------------------------------------------------------------------

def test_magic_formats() -> None:
    assert fmt(a_zip({"a.txt": b"hi"}), "weights.txt") is Format("zip")
    assert fmt(b"PK\x05\x06" + b"\x00" * 18) is Format("zip")  # empty zip
    assert fmt(b"7z\xbc\xaf\x27\x1c\x00\x04" + b"\x00" * 24) is Format("7z")
    assert fmt(b"\x93NUMPY\x01\x00" + b"\x00" * 10) is Format("npy")
    assert fmt(b"\x89HDF\r\n\x1a\n" + b"\x00" * 100) is Format("hdf5")
    assert fmt(b"GGUF\x03\x00\x00\x00" + b"\x00" * 16, "model.safetensors") is Format("gguf")


def test_tar_ustar_and_v7() -> None:
    for tar_format in (tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tar_format) as tar:
            info = tarfile.TarInfo("pickle")
            info.size = len(PAYLOAD)
            tar.addfile(info, io.BytesIO(PAYLOAD))
        assert fmt(buf.getvalue(), "x.pt") is Format("tar")
    v7 = bytearray(buf.getvalue()[:512])
    v7[257:265] = b"\x00" * 8
    v7[148:156] = b" " * 8
    v7[148:156] = b"%06o\x00 " % sum(v7)
    assert fmt(bytes(v7) + b"\x00" * 1024) is Format("tar")


def test_zip_with_prefix_and_pickle_zip_polyglot_are_zips() -> None:
    archive = a_zip({"archive/data.pkl": PAYLOAD})
    assert fmt(b"#!/bin/sh\nexit 0\n" + archive) is Format("zip")
    assert fmt(PAYLOAD + archive, "model.pt") is Format("zip")  # zip analyzer sees the prefix
    assert fmt(PAYLOAD + b"PK\x05\x06 not a real end record") is Format("pickle")


def test_hdf5_after_a_user_block() -> None:
    for offset in (512, 1024, 4096):
        data = PAYLOAD.ljust(offset, b"\x00") + b"\x89HDF\r\n\x1a\n" + b"\x00" * 64
        assert fmt(data, "model.pkl") is Format("hdf5")  # the analyzer checks the user block


# --- safetensors and the name tie-break ----------------------------------------------

@pytest.mark.parametrize("data", [
    safetensors_bytes(b'{"__metadata__":{}}'),
    safetensors_bytes(b"\xef\xbb\xbf{}"),  # BOM
    safetensors_bytes(b"  {}"),  # leading space
    safetensors_bytes(b"this is not json"),
    b"\x00" * 8 + b"\x00\x00\x70\x3d",  # header length 0
    struct.pack("<Q", 10_000) + b'{"w": 1}',  # length beyond the file
])
def test_malformed_safetensors_still_sniff_as_safetensors(data: bytes) -> None:
    assert fmt(data, "blob") is Format("safetensors")


def test_name_breaks_ties_only_for_unrecognised_binary() -> None:
    short = b"\x08\x00\x00"
    assert fmt(short, "model.safetensors") is Format("safetensors")
    assert fmt(short, "outer.zip!dir/model.safetensors") is Format("safetensors")
    assert fmt(short, "weights") is Format("unknown")
    assert fmt(short, "pytorch_model.bin") is Format("pickle")  # fail closed: pickle checks
    # a name never overrides content
    assert fmt(b'{"a": 1}', "model.safetensors") is Format("json")
    assert fmt(PAYLOAD, "model.gguf") is Format("pickle")


# --- ONNX heuristics -----------------------------------------------------------------

def test_onnx_by_protobuf_structure() -> None:
    graph = b"\x0a\x02\x22\x00"  # node {op_type ""}
    model = b"\x08\x08" + b"\x12\x04test" + b"\x3a" + bytes([len(graph)]) + graph
    assert fmt(model) is Format("onnx")
    assert fmt(b"\x08\x08") is Format("onnx")  # ir_version only, whole file
    # sentencepiece-like protobuf (field 1 is a message) is not ONNX
    assert fmt(b"\x0a\x05\x0a\x03abc" * 3) is Format("unknown")
    # ONNX field numbers with the wrong wire type are not ONNX
    assert fmt(b"\x08\x08\x10\x04\x00\x01\x02") is Format("unknown")


# --- text formats --------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ('{"model_type": "llama"}', Format("json")),
    ('  \n[{"a": 1}]', Format("json")),
    ("[]", Format("json")),
    ('\ufeff{"a": 1}', Format("json")),  # BOM: the JSON analyzer reports it
    ('{"chat_template": "{% for m in messages %}{{ m }}{% endfor %}"}', Format("json")),
    ("{% for m in messages %}{{ m.content }}{% endfor %}", Format("jinja")),
    ("{{ bos_token }}{% if x %}y{% endif %}", Format("jinja")),
    ("import os\nos.system('true')\n", Format("python")),
    ("from transformers import PreTrainedModel\n\nclass M(PreTrainedModel):\n    pass\n",
     Format("python")),
    ("#!/usr/bin/env python3\nprint('x')\n", Format("python")),
    ("# Title\n\n```python\nimport torch\n```\n", Format("text")),
    ("torch==2.4.0\nnumpy\n", Format("text")),
    ("[link](https://example.com)\n", Format("text")),
])
def test_text_formats(text: str, expected: Format) -> None:
    assert fmt(text.encode()) is expected


def test_name_hints_for_text() -> None:
    assert fmt(b"x = 1\n", "modeling_x.py") is Format("python")
    assert fmt(b"hello\n", "chat_template.jinja") is Format("jinja")
    assert fmt(b"x = 1\n", "notes.txt") is Format("text")


def test_empty_and_binary() -> None:
    assert fmt(b"") is Format("empty")
    assert fmt(bytes(range(256)) * 4) is Format("unknown")
    assert fmt("é".encode() * 3000) is Format("text")  # multi-byte char cut by the 4 KiB head


# --- the corpus (tests/fixtures/corpus) -----------------------------------------------

def corpus_expectations() -> list[tuple[str, Format]]:
    out = [(str(p.relative_to(FILES)), Format("pickle")) for p in (FILES / "pickle").iterdir()]
    out += [(str(p.relative_to(FILES)), Format("safetensors"))
            for p in (FILES / "malformed").glob("st_*.safetensors")]
    out += [
        ("container/pt_zip_data_txt.zip", Format("zip")),
        ("container/hf_training_args_payload/training_args.bin", Format("zip")),
        ("fs/hf_pickle_as_safetensors/model.safetensors", Format("zip")),
        ("container/npy_object_payload.npy", Format("npy")),
        ("container/joblib_sklearn_payload.joblib", Format("pickle")),
        ("container/pt_legacy_magic_eval.pt", Format("pickle")),
        ("policy/legacy_plain.pt", Format("torch-legacy")),
        ("formats/keras_h5_lambda.h5", Format("hdf5")),
        ("formats/keras_v3_lambda.keras", Format("zip")),
        ("formats/onnx_external_traversal/model.onnx", Format("onnx")),
        ("policy/model.onnx", Format("onnx")),
        ("policy/tiny.gguf", Format("gguf")),
        ("benign/hf_llama_tiny/config.json", Format("json")),
        ("benign/hf_llama_tiny/tokenizer.json", Format("json")),
        ("benign/hf_llama_tiny/model.safetensors", Format("safetensors")),
        ("benign/hf_llama_tiny_sharded/chat_template.jinja", Format("jinja")),
        ("hfcode/hf_auto_map_local_code/modeling_evil.py", Format("python")),
    ]
    return out


@pytest.mark.parametrize(("path", "expected"), corpus_expectations())
def test_corpus_files(path: str, expected: Format) -> None:
    fd = os.open(FILES / path, os.O_RDONLY)
    try:
        assert sniff(FileBlob(path, fd, os.fstat(fd).st_size)) is expected
    finally:
        os.close(fd)


# --- properties ----------------------------------------------------------------------

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=6000), st.sampled_from(["x", "a.safetensors", "b.pt", "c.json",
                                                  "d.py", "z.zip!e.npy"]))
def test_sniff_never_raises_and_reads_a_bounded_amount(data: bytes, name: str) -> None:
    blob = CountingBlob(name, data)
    assert isinstance(sniff(blob), Format)
    assert blob.read <= HEAD + 65_557 + 4 + 8 * 32


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 5), st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
    | st.binary(), lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=20))
def test_any_pickled_value_sniffs_as_pickle(protocol: int, value: object) -> None:
    data = pickle.dumps(value, protocol=protocol)
    assert fmt(data, "x.json") in (Format("pickle"), Format("torch-legacy"))


def test_picklescan_protocol0_global_then_garbage_is_a_pickle_import() -> None:
    """Issue 10: one GLOBAL then an invalid byte. CPython's find_class imports the module
    (its import side effects run) before the next opcode fails: a pickle, malicious."""
    from scanner.core.context import ScanContext
    from scanner.core.model import BytesBlob, Verdict, worst
    from scanner.scan.dispatch import analyze_blob

    data = b"cos\nsystem\n\xff\xfe garbage"
    assert looks_like_pickle(data)
    findings = analyze_blob(ScanContext(), BytesBlob("x.bin", data))
    assert worst(findings) is Verdict.MALICIOUS
    assert "os.system" in {f.evidence for f in findings if f.rule_id == "pickle.unsafe_global"}


def test_word_list_starting_with_c_is_text_not_a_global() -> None:
    """``cat\\ndog\\nfish`` is one GLOBAL (``at.dog``) then text: a vocab file, not a pickle."""
    assert not looks_like_pickle(b"cat\ndog\nfish\nbird\n")
    assert not looks_like_pickle(b"copyright\nnotice\nSome text follows.\n")


def _flat_sniff(blob: BytesBlob) -> Format:
    """The sniff order as one flat list (every magic and probe, sorted by (order, registry
    position)): the reference the first-byte tables must agree with."""
    from scanner.core.spec import Head
    from scanner.scan.registry import SPECS
    from scanner.scan.sniff import NAME_TESTS, TEXT_TESTS, _text

    tests = []
    for index, spec in enumerate(SPECS):
        for magic in spec.magic:
            tests.append((spec.order, index,
                          lambda h, m=magic: h.head.startswith(m), spec.format))
        tests += [(p.order, index, p.test, spec.format) for p in spec.probes
                  if not p.text and not p.by_name]
    head = Head(blob, blob.read_at(0, HEAD))
    for test, found in NAME_TESTS:
        if test(head):
            return found
    if blob.size == 0:
        return Format("empty")
    for _, _, test, found in sorted(tests, key=lambda t: t[:2]):
        if test(head):
            return found
    text = _text(head.head, complete=len(head.head) >= blob.size)
    if text is None:
        return sniff(blob)  # name-hint fallback: not what this test compares
    decoded = Head(blob, head.head, text)
    return next((f for t, f in TEXT_TESTS if t(decoded)), Format("text"))


def _every_magic() -> list[bytes]:
    from scanner.scan.registry import SPECS

    return [m for s in SPECS for m in s.magic]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.sampled_from([b"", *_every_magic()]), st.binary(max_size=80))
def test_magics_grouped_by_first_byte_keep_the_flat_order(magic: bytes, tail: bytes) -> None:
    """scformats: magic numbers are looked up by the blob's first byte; the outcome is the
    one of running every test in (order, registry) order."""
    blob = BytesBlob("blob", magic + tail)
    assert sniff(blob) == _flat_sniff(blob)


def test_layout_probes_run_first_even_for_empty_and_are_skipped_by_content_sniff() -> None:
    """scformats: an OCI blob is recognised by its content-addressed path before any
    content test (an empty blob too); sniffing by content alone sees what it holds."""
    import hashlib

    digest = hashlib.sha256(PAYLOAD).hexdigest()
    blob = BytesBlob(f"layout/blobs/sha256/{digest}", PAYLOAD)
    assert sniff(blob) is Format("oci")
    assert sniff(blob, by_name=False) is Format("pickle")
    empty = BytesBlob(f"layout/blobs/sha256/{hashlib.sha256(b'').hexdigest()}", b"")
    assert sniff(empty) is Format("oci")
    assert sniff(empty, by_name=False) is Format("empty")
    assert sniff(BytesBlob("blobs/sha256/not-a-digest", PAYLOAD)) is Format("pickle")


def test_content_analysis_without_a_dispatcher_is_a_finding_not_a_pass() -> None:
    """core.context: ``analyze_content`` with no dispatcher registered fails closed."""
    from scanner.core import context

    saved = context._BY_CONTENT[:]
    context._BY_CONTENT[:] = []
    try:
        found, findings = context.ScanContext().analyze_content(BytesBlob("x", PAYLOAD))
    finally:
        context._BY_CONTENT[:] = saved
    assert found is Format("unknown")
    assert [f.rule_id for f in findings] == ["scanner.internal_error"]
