"""Non-pickle, non-safetensors formats: NumPy .npy, GGUF, ONNX and Keras HDF5. Inputs are
built from raw bytes here (or read from the corpus in tests/fixtures); nothing is loaded."""

from __future__ import annotations

import json
import os
import struct
import tracemalloc
from collections.abc import Mapping
from pathlib import Path

import pytest
from _shared import CORPUS as _CORPUS
from _shared import CountingBlob, deadline_hits
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scanner_helpers import rules as ids

from scanner.api import scan_paths
from scanner.core.context import Limits, ScanContext
from scanner.core.model import BytesBlob, FileBlob, Finding, Verdict, worst
from scanner.core.rules import RULES
from scanner.formats import gguf as _gguf
from scanner.formats.gguf import analyze_gguf
from scanner.formats.keras import analyze_hdf5, analyze_keras_config
from scanner.formats.numpy import analyze_npy
from scanner.formats.onnx import analyze_onnx
from scanner.scan.dispatch import analyze_blob

CORPUS = _CORPUS
FILES = CORPUS / "files"
PAYLOAD = b"\x80\x02cposix\nsystem\nX\x04\x00\x00\x00true\x85R."  # never loaded
KIND = {"benign": Verdict.CLEAN, "policy": Verdict.POLICY, "malicious": Verdict.MALICIOUS,
        "malformed": Verdict.MALFORMED}


def checked(findings: list[Finding]) -> list[Finding]:
    for f in findings:
        assert f.message and f.rule_id in RULES, f
        json.dumps(f.to_dict())
    return findings


# --- NumPy .npy ----------------------------------------------------------------------

def npy(header: str | bytes, data: bytes = b"", major: int = 1) -> bytes:
    raw = header.encode("latin-1") if isinstance(header, str) else header
    prefix = 10 if major == 1 else 12
    raw = raw.ljust(((prefix + len(raw) + 1 + 63) // 64) * 64 - prefix - 1) + b"\n"
    length = struct.pack("<H" if major == 1 else "<I", len(raw))
    return b"\x93NUMPY" + bytes([major, 0]) + length + raw + data


def header(descr: object, shape: object = (2,), fortran: object = False) -> str:
    return f"{{'descr': {descr!r}, 'fortran_order': {fortran!r}, 'shape': {shape!r}, }}"


def scan_npy(data: bytes) -> list[Finding]:
    return checked(analyze_npy(ScanContext(), BytesBlob("a.npy", data)))


@pytest.mark.parametrize(("descr", "shape", "itemsize"), [
    ("<f4", (2, 3), 4), ("|b1", (5,), 1), ("<U3", (2,), 12), ("|S7", (), 7),
    ("<M8[ns]", (1,), 8), ([("a", "<i4"), ("b", "<f8", (2,))], (3,), 20),
])
def test_numeric_npy_is_policy_only(descr: object, shape: tuple[int, ...],
                                    itemsize: int) -> None:
    count = 1
    for d in shape:
        count *= d
    for major in (1, 2, 3):
        findings = scan_npy(npy(header(descr, shape), b"\x00" * (count * itemsize), major))
        assert ids(findings) == {"format.npy_not_allowed"}


@pytest.mark.parametrize("descr", ["|O", "O", "|O8", [("a", "<i4"), ("b", "|O")],
                                   ("|O", (2,))])
def test_object_npy_hands_the_data_to_the_pickle_analyzer(descr: object) -> None:
    findings = scan_npy(npy(header(descr, (1,)), PAYLOAD))
    assert {"npy.object_dtype", "pickle.unsafe_global"} <= ids(findings)
    assert worst(findings) is Verdict.MALICIOUS


@pytest.mark.parametrize("data", [
    npy(header("<f4", (4,)), b"\x00" * 8),  # shape says 16 bytes
    npy(header("<f4", (1,)), b"\x00" * 8),  # trailing bytes
    b"\x93NUMPY\x01\x00\xff\x7f{}",  # header length past the end
    npy("{'descr': __import__('os').system('true'), 'fortran_order': False, 'shape': ()}"),
    npy("{'descr': '<f4', 'shape': (1,)}", b"\x00" * 4),  # missing key
    npy(header("<f4", (-1,))),
    npy(header("<f4", (1,), fortran=1), b"\x00" * 4),
    npy(header("float128", (1,)), b"\x00" * 16),  # numpy never writes this form
    npy("[" * 5000 + "]" * 5000),
    npy(header("<f4", tuple([2] * 65))),
    b"\x93NUMPY\x09\x00\x10\x00",
])
def test_malformed_npy(data: bytes) -> None:
    findings = scan_npy(data)
    assert "npy.malformed" in ids(findings)
    assert worst(findings) is Verdict.MALFORMED


# --- GGUF ----------------------------------------------------------------------------

def gstr(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def kv_str(key: str, value: str) -> bytes:
    return gstr(key) + struct.pack("<I", 8) + gstr(value)


def kv_u32(key: str, value: int) -> bytes:
    return gstr(key) + struct.pack("<II", 4, value)


def kv_str_array(key: str, values: list[str]) -> bytes:
    return gstr(key) + struct.pack("<IIQ", 9, 8, len(values)) + b"".join(map(gstr, values))


def tensor(name: str, dims: list[int], ggml_type: int = 0, offset: int = 0) -> bytes:
    return (gstr(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
            + struct.pack("<IQ", ggml_type, offset))


def gguf(kvs: list[bytes], tensors: list[bytes] = (), data: bytes = b"",  # type: ignore[assignment]
         version: int = 3, align: int = 32) -> bytes:
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    head += b"".join(kvs) + b"".join(tensors)
    return head + b"\x00" * ((-len(head)) % align) + data


CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}")


def scan_gguf(data: bytes, name: str = "m.gguf") -> list[Finding]:
    return checked(analyze_gguf(ScanContext(), BytesBlob(name, data)))


def test_valid_gguf_is_refused_by_policy_and_its_template_is_checked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import scanner.formats.template.jinja as template

    got: list[tuple[str, str, str]] = []

    def record(path: str, text: str, *, location: str = "") -> list[Finding]:
        got.append((path, text, location))
        return []

    monkeypatch.setattr(template, "check_template", record)
    data = gguf([kv_str("general.architecture", "llama"), kv_u32("general.alignment", 64),
                 kv_str_array("tokenizer.ggml.tokens", ["<s>", "</s>", "a"]),
                 kv_str("tokenizer.chat_template", CHATML),
                 kv_str("tokenizer.chat_template.tool_use", "{{ x }}"),
                 kv_str_array("tokenizer.chat_templates", ["tool_use"])],
                [tensor("w", [64, 2], 0, 0), tensor("q", [32], 8, 512)],
                b"\x00" * 600, align=64)
    findings = scan_gguf(data)
    assert ids(findings) == {"format.gguf_not_allowed"}
    assert got == [("m.gguf", CHATML, "tokenizer.chat_template"),
                   ("m.gguf", "{{ x }}", "tokenizer.chat_template.tool_use")]


def test_malicious_gguf_chat_template_is_reported() -> None:
    evil = "{{ cycler.__init__.__globals__.os.popen('true').read() }}"
    findings = scan_gguf(gguf([kv_str("tokenizer.chat_template", evil)]))
    assert worst(findings) is Verdict.MALICIOUS
    assert "format.gguf_not_allowed" in ids(findings)


@pytest.mark.parametrize(("data", "why"), [
    (gguf([kv_str("general.name", "xyzxyz")])[:58], "runs past"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gstr("general.name") + struct.pack("<IQ", 8, 2**62)
     + b"abc", "runs past"),
    (b"GGUF" + struct.pack("<IQQ", 3, 2**60, 0), "cannot fit"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gstr("a") + struct.pack("<IIQ", 9, 4, 2**61),
     "cannot fit"),
    (gguf([], [tensor("w", [2**32, 2**32])]), "overflow"),
    (gguf([], [tensor("w", [2**63 + 1])]), "overflow"),
    (gguf([], [tensor("w", [1, 1, 1, 1, 1])]), "dims"),
    (gguf([], [tensor("w", [4], 1234)], b"\x00" * 64), "unknown ggml type"),
    (gguf([], [tensor("w", [4], 0, 3)], b"\x00" * 64), "not aligned"),
    (gguf([], [tensor("w", [4], 0, 2**40)], b"\x00" * 64), "outside"),
    (gguf([], [tensor("w", [30], 2)], b"\x00" * 64), "block size"),
    (gguf([], [tensor("w", [4]), tensor("w", [4], 0, 32)], b"\x00" * 64), "duplicate"),
    (gguf([kv_u32("a", 1), kv_u32("a", 2)]), "duplicate"),
    (gguf([kv_u32("general.alignment", 48)]), "power of two"),
    (gguf([gstr("a") + struct.pack("<I", 77)]), "unknown value type"),
    (gguf([], version=7), "version"),
    (b"GGUF" + struct.pack("<I", 3 << 24) + b"\x00" * 16, "version"),
])
def test_gguf_hostile_lengths_are_malformed(data: bytes, why: str) -> None:
    findings = scan_gguf(data)
    assert "format.gguf_not_allowed" in ids(findings)
    bad = [f for f in findings if f.rule_id == "gguf.malformed"]
    assert bad and why in bad[0].message, [f.message for f in findings]


def test_gguf_refused_unparsed(tmp_path: Path) -> None:
    """Public bug gguf-refused-unparsed (llama.cpp#19003, PR#18674): hostile GGUF headers,
    also behind a .safetensors name, are refused from the magic with a few small reads and
    <16 MiB, and every length is checked before it is used (a loop over 2**63 entries or a
    2**62-byte string would read far more than the file holds)."""
    huge_str = (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gstr("general.name")
                + struct.pack("<IQ", 8, 2**62) + b"abc")
    dims = gguf([], [tensor("token_embd.weight", [1152, 2**42 + 1])])
    wraps = gguf([], [tensor("token_embd.weight", [2**40, 2**40])])
    many = b"GGUF" + struct.pack("<IQQ", 3, 0, 2**63) + b"\x00" * 64
    for name, data in [("huge_string.gguf", huge_str), ("overflow_dims.gguf", dims),
                       ("wrapping_dims.gguf", wraps), ("many_kv.gguf", many),
                       ("model.safetensors", huge_str)]:
        path = tmp_path / name
        path.write_bytes(data)
        fd = os.open(path, os.O_RDONLY)
        try:
            tracemalloc.start()
            blob = CountingBlob(FileBlob(name, fd, os.fstat(fd).st_size))
            findings = analyze_blob(ScanContext(), blob)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        finally:
            os.close(fd)
        assert "format.gguf_not_allowed" in ids(findings), name
        assert "gguf.malformed" in ids(findings), name
        assert worst(findings) in (Verdict.POLICY, Verdict.MALFORMED)
        assert peak < 16 << 20, (name, peak)
        assert blob.calls <= 64 and blob.bytes <= 4 * len(data), (name, blob.calls, blob.bytes)
        assert deadline_hits(findings) == [], name


def test_large_gguf_vocabulary_parses_quickly() -> None:
    tokens = [f"tok{i}" for i in range(150_000)]
    data = gguf([kv_str_array("tokenizer.ggml.tokens", tokens)])
    # Exactly the policy finding: no scanner.limit_exceeded (its deadline included).
    assert ids(scan_gguf(data)) == {"format.gguf_not_allowed"}


# --- ONNX ----------------------------------------------------------------------------

def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def field(num: int, payload: bytes | str) -> bytes:
    raw = payload.encode() if isinstance(payload, str) else payload
    return varint(num << 3 | 2) + varint(len(raw)) + raw


def vfield(num: int, value: int) -> bytes:
    return varint(num << 3) + varint(value)


def onnx_tensor(name: str, location: str | None = None) -> bytes:
    body = vfield(1, 4) + vfield(2, 1) + field(8, name)
    if location is None:
        return body + field(9, b"\x00" * 16)
    entries = [("location", location), ("offset", "0"), ("length", "16")]
    body += b"".join(field(13, field(1, k) + field(2, v)) for k, v in entries)
    return body + vfield(14, 1)


def onnx_graph(initializers: list[bytes] = (), nodes: list[bytes] = (),  # type: ignore[assignment]
               sparse: list[bytes] = ()) -> bytes:  # type: ignore[assignment]
    node = field(1, "W") + field(2, "Y") + field(4, "Identity")
    return (b"".join(field(1, n) for n in [node, *nodes]) + field(2, "g")
            + b"".join(field(5, t) for t in initializers)
            + b"".join(field(15, s) for s in sparse))


def onnx_model(graph: bytes, extra: bytes = b"") -> bytes:
    return (vfield(1, 8) + field(2, "test") + field(7, graph)
            + field(8, field(1, "") + vfield(2, 13)) + extra)


def scan_onnx(data: bytes) -> list[Finding]:
    return checked(analyze_onnx(ScanContext(), BytesBlob("m.onnx", data)))


@pytest.mark.parametrize("location", ["weights.bin", "sub/dir/w.bin", "a..b.bin",
                                      "subdir/../weights.bin", "./w.bin", "a/b/../../w.bin"])
def test_onnx_inside_the_folder_is_policy_only(location: str) -> None:
    for init in (onnx_tensor("W"), onnx_tensor("W", location)):
        assert ids(scan_onnx(onnx_model(onnx_graph([init])))) == {"format.onnx_not_allowed"}


ESCAPES = ["../../../../etc/passwd", "/etc/passwd", "sub/../../x.bin", "..\\..\\x.bin",
           "a/./../../x.bin", "sub\\..\\..\\x.bin",
           "C:\\Windows\\x", "\\\\server\\share\\x"]


@pytest.mark.parametrize("location", ESCAPES)
def test_onnx_external_data_escape_in_initializers(location: str) -> None:
    findings = scan_onnx(onnx_model(onnx_graph([onnx_tensor("W", location)])))
    assert "onnx.external_data_escape" in ids(findings)
    assert worst(findings) is Verdict.MALICIOUS


def test_onnx_external_data_escape_anywhere_in_the_model() -> None:
    bad = onnx_tensor("W", "../secret")
    inner = onnx_graph([bad])
    attr_graph = field(1, "then_branch") + vfield(20, 5) + field(6, inner)
    attr_tensor = field(1, "value") + vfield(20, 4) + field(5, bad)
    places = [
        onnx_model(onnx_graph(nodes=[field(4, "If") + field(5, attr_graph)])),
        onnx_model(onnx_graph(nodes=[field(4, "Constant") + field(5, attr_tensor)])),
        onnx_model(onnx_graph(sparse=[field(1, bad) + field(2, onnx_tensor("I"))])),
        onnx_model(onnx_graph(), field(21, field(1, "f") + field(7, field(5, attr_tensor)))),
        onnx_model(onnx_graph(), field(20, field(1, inner))),
    ]
    for model in places:
        assert "onnx.external_data_escape" in ids(scan_onnx(model))


@pytest.mark.parametrize("data", [
    onnx_model(onnx_graph([onnx_tensor("W")]))[:-5],
    onnx_model(onnx_graph()) + b"\x0b",  # wire type 3 (groups)
    vfield(1, 8) + field(7, b"\x0a\xff\xff\xff\xff\x0f"),  # nested length past its parent
    b"\x08" + b"\xff" * 12,  # varint longer than 10 bytes
])
def test_unparseable_onnx_is_malformed(data: bytes) -> None:
    findings = scan_onnx(data)
    assert {"format.onnx_not_allowed", "onnx.malformed"} <= ids(findings)


def test_onnx_nesting_is_bounded() -> None:
    graph = onnx_graph()
    for _ in range(200):
        graph = onnx_graph(nodes=[field(5, field(1, "g") + field(6, graph))])
    findings = scan_onnx(onnx_model(graph))
    assert "scanner.limit_exceeded" in ids(findings)


# --- Keras HDF5 ----------------------------------------------------------------------

def h5(*attrs: bytes, at: int = 0x800, userblock: bytes = b"", size: int = 0x4000) -> bytes:
    body = bytearray(b"\x89HDF\r\n\x1a\n" + b"\x00" * (size - 8))
    pos = at
    for attr in attrs:
        body[pos : pos + len(attr)] = attr
        pos += len(attr) + 64
    if userblock:
        return userblock.ljust(512, b"\x00") + bytes(body)
    return bytes(body)


def keras2_config(layer: Mapping[str, object]) -> bytes:
    return json.dumps({"class_name": "Sequential", "config": {"layers": [
        {"class_name": "InputLayer", "config": {"batch_input_shape": [None, 4]}}, layer]}}
    ).encode()


LAMBDA2 = {"class_name": "Lambda", "config": {"function": ["4wEAAA==", None, None],
                                             "function_type": "lambda", "module": "__main__"}}


def scan_h5(data: bytes) -> list[Finding]:
    return checked(analyze_hdf5(ScanContext(), BytesBlob("m.h5", data)))


def test_hdf5_without_lambda_is_policy_only() -> None:
    dense = {"class_name": "Dense", "config": {"units": 4, "activation": "relu"}}
    assert ids(scan_h5(h5(keras2_config(dense)))) == {"format.hdf5_not_allowed"}
    assert ids(scan_h5(h5())) == {"format.hdf5_not_allowed"}


def test_hdf5_lambda_layer_is_malicious() -> None:
    findings = scan_h5(h5(keras2_config(LAMBDA2)))
    assert "keras.lambda_layer" in ids(findings)
    assert worst(findings) is Verdict.MALICIOUS


def test_hdf5_lambda_hidden_by_json_escapes_or_whitespace() -> None:
    escaped = b'{"class_name": "\\u004cambda", "config": {}}'
    spaced = b'{"class_name"' + b" " * 2000 + b': "Lambda"}'
    for attr in (escaped, spaced):
        assert "keras.lambda_layer" in ids(scan_h5(h5(attr)))


def test_hdf5_config_straddling_a_read_window_is_found() -> None:
    config = keras2_config(LAMBDA2)
    assert "keras.lambda_layer" in ids(scan_h5(h5(config, at=(1 << 20) - 40, size=2 << 20)))


def test_hdf5_objects_outside_keras_are_malicious() -> None:
    attr = (b'{"module": "keras.layers", "class_name": "Dense"}'
            b'{"class_name": "system", "module": "os"}')
    findings = scan_h5(h5(attr))
    assert "keras.unsafe_object" in ids(findings)
    assert any("'os'" in f.message for f in findings)


def test_hdf5_user_block_is_analysed() -> None:
    findings = analyze_blob(ScanContext(), BytesBlob("m.h5", h5(userblock=PAYLOAD)))
    assert {"format.hdf5_not_allowed", "pickle.unsafe_global"} <= ids(findings)
    zero_block = h5(userblock=b"\x00")
    assert ids(analyze_blob(ScanContext(), BytesBlob("z.h5", zero_block))) == {
        "format.hdf5_not_allowed"}


def test_keras_v3_config_checks() -> None:
    def cfg(obj: object) -> list[Finding]:
        return checked(analyze_keras_config(ScanContext(), "m.keras!config.json",
                                            json.dumps(obj).encode()))

    assert cfg({"module": "keras.layers", "class_name": "Dense", "config": {}}) == []
    assert cfg({"module": "keras_hub.src.models", "class_name": "Gemma", "config": {}}) == []
    assert ids(cfg({"module": "builtins", "class_name": "function", "config": "exec"})) == {
        "keras.unsafe_object"}
    assert ids(cfg({"module": "keras.src.utils", "class_name": "function",
                    "config": "get_file"})) == {"keras.unsafe_object"}
    assert ids(cfg({"module": "keras.layers", "class_name": "TorchModuleWrapper"})) == {
        "keras.unsafe_object"}
    assert ids(cfg({"layers": [{"class_name": "__lambda__", "config": {"code": "x"}}]})) == {
        "keras.lambda_layer"}
    bad = analyze_keras_config(ScanContext(), "c.json", b'{"a": 1, "a": 2}')
    assert ids(bad) == {"keras.config_invalid"}


# --- the corpus (tests/fixtures/corpus) -----------------------------------------------

def corpus_cases() -> list[tuple[str, str]]:
    index = CORPUS / "cases.json"
    mine = {"policy/array.npy", "policy/tiny.gguf", "policy/model.onnx",
            "malformed/gguf_tensor_offset_oob.gguf"}
    return [(c["path"], c["kind"]) for c in json.loads(index.read_text())["cases"]
            if (c["path"].startswith("formats/") and not c["path"].endswith(".keras"))
            or c["path"] in mine or c["path"] == "container/npy_object_payload.npy"]


@pytest.mark.parametrize(("path", "kind"), corpus_cases())
def test_corpus_format_cases(path: str, kind: str) -> None:
    target = FILES / path
    files = sorted(target.iterdir()) if target.is_dir() else [target]
    findings: list[Finding] = []
    for file in files:
        fd = os.open(file, os.O_RDONLY)
        try:
            findings += analyze_blob(ScanContext(Limits()),
                                     FileBlob(str(file.relative_to(FILES)), fd,
                                              os.fstat(fd).st_size))
        finally:
            os.close(fd)
    assert worst(findings) is KIND[kind], [f.to_dict() for f in findings]


def test_gguf_module_constants_are_sane() -> None:
    assert all(block > 0 and size > 0 for block, size in _gguf.GGML_TYPES.values())


# --- property: hostile bytes never crash an analyzer, the policy finding always stays --

ANALYZERS = [(analyze_npy, b"\x93NUMPY\x01\x00", "format.npy_not_allowed"),
             (analyze_gguf, b"GGUF\x03\x00\x00\x00", "format.gguf_not_allowed"),
             (analyze_onnx, b"\x08\x08", "format.onnx_not_allowed"),
             (analyze_hdf5, b"\x89HDF\r\n\x1a\n", "format.hdf5_not_allowed")]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(ANALYZERS), st.binary(max_size=400))
def test_format_analyzers_never_raise(case: tuple[object, bytes, str], tail: bytes) -> None:
    analyzer, magic, policy = case
    blob = CountingBlob(BytesBlob("f", magic + tail))
    findings = analyzer(ScanContext(Limits(seconds_per_target=5)), blob)  # type: ignore[operator]
    assert policy in ids(checked(findings))
    assert deadline_hits(findings) == []
    assert blob.bytes <= 4 * blob.size + 64, (blob.bytes, blob.size)


def test_modelaudit_onnx_external_data_subdir_dotdot_stays_inside() -> None:
    """False alarm (issue 10): ``subdir/../weights.bin`` normalises to ``weights.bin``."""
    findings = scan_onnx(onnx_model(onnx_graph([onnx_tensor("W", "subdir/../weights.bin")])))
    assert ids(findings) == {"format.onnx_not_allowed"}
    assert worst(findings) is Verdict.POLICY


def test_modelaudit_keras_dense_model_is_policy(tmp_path: Path) -> None:
    """False alarm (issue 10): a Keras 3 .keras file with a Dense layer and a metric
    serialised as {"module": "builtins", "class_name": "function"} (Keras resolves it in
    its own modules only)."""
    import zipfile

    dense = {"module": "keras.layers", "class_name": "Dense", "config": {
        "name": "dense", "units": 2, "activation": "relu",
        "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform",
                               "config": {"seed": None}, "registered_name": None}},
        "registered_name": None, "build_config": {"input_shape": [None, 4]}}
    config = {"module": "keras", "class_name": "Sequential", "config": {"layers": [dense]},
              "compile_config": {"loss": "mse", "metrics": [
                  {"module": "builtins", "class_name": "function", "config": "mae",
                   "registered_name": "function"}]}}
    path = tmp_path / "m.keras"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("metadata.json", json.dumps({"keras_version": "3.5.0"}))
        z.writestr("config.json", json.dumps(config))
    findings = scan_paths([path]).targets[0].findings
    assert worst(findings) is Verdict.POLICY, findings
    config["compile_config"]["metrics"][0]["class_name"] = "eval"  # type: ignore[index]
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("metadata.json", json.dumps({"keras_version": "3.5.0"}))
        z.writestr("config.json", json.dumps(config))
    assert worst(scan_paths([path]).targets[0].findings) is Verdict.MALICIOUS
