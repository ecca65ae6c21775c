"""Formats added by issue 10, each from bytes written here (never a peer's fixture):
TensorFlow protobufs and keras_metadata.pb, TFLite, OpenVINO IR, PMML, R serialization,
single-file compression and tar.gz. Names carry the peer whose fixture showed the miss."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import pickle as P
import struct
import tarfile
from pathlib import Path

import pytest
from scanner_helpers import rules, scan

from scanner.api import scan_target
from scanner.core.model import BytesBlob, Verdict, worst
from scanner.core.spec import Format
from scanner.scan.sniff import sniff

EVIL_PICKLE = P.PROTO + b"\x02" + P.GLOBAL + b"os\nsystem\n" + P.SHORT_BINUNICODE + b"\x02id" \
    + P.TUPLE1 + P.REDUCE + P.STOP


def pb(field: int, payload: bytes) -> bytes:
    """A protobuf length-delimited field (wire type 2)."""
    n, out = len(payload), b""
    while True:
        out += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            break
    return bytes([field << 3 | 2]) + out + payload


def graph(*ops: str) -> bytes:
    """A GraphDef of NodeDefs (name=1, op=2) inside a MetaGraphDef inside a SavedModel."""
    nodes = b"".join(pb(1, pb(1, f"n{i}".encode()) + pb(2, op.encode()))
                     for i, op in enumerate(ops))
    return b"\x08\x01" + pb(2, pb(2, nodes))


def test_modelscan_tf_metagraph_pyfunc_is_malicious() -> None:
    findings = scan("saved_model.pb", graph("Placeholder", "PyFunc", "Identity"))
    assert worst(findings) is Verdict.MALICIOUS and "tf.python_op" in rules(findings)
    assert "tf.python_op" in rules(scan("m/saved_model.pb", graph("EagerPyFunc")))
    assert "tf.file_op" in rules(scan("x.pb", graph("WriteFile")))


def test_tf_graph_without_python_ops_is_policy() -> None:
    findings = scan("saved_model.pb", graph("Placeholder", "MatMul", "PyFuncLike_not"))
    assert rules(findings) == {"format.tensorflow_not_allowed"}, findings


def _keras_metadata(layer: str) -> bytes:
    config = json.dumps({"class_name": "Sequential", "config": {"layers": [
        {"class_name": layer, "config": {"function": ["4wEAAAAAAAAA", None, None]}}]}},
        indent=1).encode()
    return pb(1, b"\x08\x01" + pb(2, b"root") + pb(4, b"_tf_keras_sequential") + pb(5, config))


def test_modelaudit_keras_metadata_pb_lambda_is_malicious(tmp_path: Path) -> None:
    d = tmp_path / "saved"
    d.mkdir()
    (d / "keras_metadata.pb").write_bytes(_keras_metadata("Lambda"))
    result = scan_target(d)
    assert result.verdict is Verdict.MALICIOUS
    assert "keras.lambda_layer" in rules(result.findings)
    assert worst(scan("keras_metadata.pb", _keras_metadata("Dense"))) is Verdict.POLICY


def test_tflite_is_policy() -> None:
    data = b"\x1c\x00\x00\x00TFL3" + bytes(64)
    assert sniff(BytesBlob("m.tflite", data)) is Format("tflite")
    assert rules(scan("m.tflite", data)) == {"format.tflite_not_allowed"}


OPENVINO = """<?xml version="1.0"?>
<net name="m" version="11">
  <layers>
    <layer id="0" name="x" type="Parameter" version="opset1"/>
    {extra}
  </layers>
</net>
"""


@pytest.mark.parametrize("extra,bad", [
    ('<layer id="1" name="p" type="Python" version="extension"><data module="evil"/></layer>',
     True),
    ('<extension library="/tmp/libevil.so"/>', True),
    ('<layer id="1" name="r" type="Relu" version="opset1"/>', False),
], ids=["python_layer", "native_library", "benign"])
def test_modelaudit_openvino_python_layer_and_native_library(extra: str, bad: bool) -> None:
    data = OPENVINO.format(extra=extra).encode()
    assert sniff(BytesBlob("model.xml", data)) is Format("xml")
    findings = scan("model.xml", data)
    assert ("openvino.custom_code" in rules(findings)) is bad
    assert worst(findings) is (Verdict.MALICIOUS if bad else Verdict.POLICY)


def test_modelaudit_pmml_external_entity_is_malicious() -> None:
    xxe = (b'<?xml version="1.0"?>\n<!DOCTYPE PMML [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
           b'\n<PMML version="4.4"><Header description="&xxe;"/></PMML>\n')
    findings = scan("model.pmml", xxe)
    assert "xml.entity" in rules(findings) and worst(findings) is Verdict.MALICIOUS
    benign = b'<?xml version="1.0"?>\n<PMML version="4.4"><Header/><Extension name="x"/></PMML>'
    assert rules(scan("model.pmml", benign)) == {"format.pmml_not_allowed"}


def _charsxp(name: str) -> bytes:
    return struct.pack(">I", 0x00040009) + struct.pack(">i", len(name)) + name.encode()


def _rdata(*symbols: str) -> bytes:
    """An XDR R workspace: magic, format, versions, then SYMSXP/CHARSXP records."""
    body = b"RDX2\nX\n" + struct.pack(">iii", 2, 0x040000, 0x020300)
    for sym in symbols:
        body += struct.pack(">I", 1) + _charsxp(sym)  # SYMSXP then its CHARSXP name
    return body + struct.pack(">I", 254)


def test_modelaudit_r_rdata_base_system_is_malicious(tmp_path: Path) -> None:
    path = tmp_path / "model.rdata"
    path.write_bytes(gzip.compress(_rdata("::", "base", "system", "x")))
    result = scan_target(path)
    assert result.verdict is Verdict.MALICIOUS, result.findings
    assert {"format.compressed_not_allowed", "format.r_not_allowed",
            "r.code_execution"} <= rules(result.findings)
    assert rules(scan("w.rds", _rdata("weights", "x"))) == {"format.r_not_allowed"}


@pytest.mark.parametrize("pack", [gzip.compress, bz2.compress, lzma.compress],
                         ids=["gzip", "bzip2", "xz"])
def test_compressed_pickle_is_analysed(pack: object) -> None:
    findings = scan("model.pkl.x", pack(EVIL_PICKLE))  # type: ignore[operator]
    assert "format.compressed_not_allowed" in rules(findings)
    assert worst(findings) is Verdict.MALICIOUS


def test_tar_gz_holding_a_payload_is_malicious() -> None:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        info = tarfile.TarInfo("model/weights.pkl")
        info.size = len(EVIL_PICKLE)
        tar.addfile(info, io.BytesIO(EVIL_PICKLE))
    findings = scan("model.tar.gz", raw.getvalue())
    assert {"format.compressed_not_allowed", "format.tar_not_allowed"} <= rules(findings)
    assert worst(findings) is Verdict.MALICIOUS


def test_compression_bomb_stops_at_the_ratio_limit() -> None:
    bomb = gzip.compress(bytes(64 << 20))
    findings = scan("b.gz", bomb)
    assert "scanner.limit_exceeded" in rules(findings)
    assert any("max_decompression_ratio" in f.evidence for f in findings)


def test_truncated_or_unsupported_compression_is_never_clean() -> None:
    assert "archive.malformed" in rules(scan("t.gz", gzip.compress(b"hello " * 100)[:-9]))
    assert "archive.unsupported" in rules(scan("t.zst", b"\x28\xb5\x2f\xfd" + bytes(32)))
    assert worst(scan("t.gz", gzip.compress(b"plain text\n"))) is Verdict.POLICY


def test_modelaudit_xgboost_json_and_lightgbm_text_are_policy_never_clean() -> None:
    xgb = json.dumps({"learner": {"gradient_booster": {"name": "gbtree"}},
                      "version": [2, 0, 3]}).encode()
    assert rules(scan("model.json", xgb)) == {"format.gbdt_not_allowed"}
    lgb = b"tree\nversion=v4\nnum_class=1\nnum_tree_per_iteration=1\n"
    assert rules(scan("model.txt", lgb)) == {"format.gbdt_not_allowed"}
    assert rules(scan("README.md", b"# a model\n")) == set()
