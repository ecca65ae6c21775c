"""Core ML files (scanner/formats/coreml.py), from bytes written here: .mlmodel protobufs
(neural networks, pipelines, custom layers/models, linked models), an .mlpackage folder
(Manifest.json, model.mlmodel, MIL weight.bin)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from scanner_helpers import rules, scan

from scanner.api import scan_target
from scanner.core.model import BytesBlob, Verdict, worst
from scanner.core.spec import Format
from scanner.scan.sniff import sniff


def varint(n: int) -> bytes:
    out = b""
    while True:
        out += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            return out


def pb(field: int, payload: bytes) -> bytes:
    return varint(field << 3 | 2) + varint(len(payload)) + payload


DESCRIPTION = pb(2, pb(1, pb(1, b"image")) + pb(10, pb(1, b"logits")))


def layer(name: bytes, body: bytes = pb(140, pb(1, b"\x01\x02"))) -> bytes:
    return pb(1, pb(1, name) + pb(2, b"image") + pb(3, b"logits") + body)


def model(kind_field: int, body: bytes) -> bytes:
    return b"\x08\x04" + DESCRIPTION + pb(kind_field, body)


BENIGN = model(500, layer(b"dense") + layer(b"relu", pb(130, b"")))
CUSTOM_LAYER = model(500, layer(b"dense") + layer(b"evil", pb(500, pb(10, b"EvilLayer"))))


def weight_blob(size: int = 8, offset: int = 128) -> bytes:
    header = struct.pack("<II", 1, 2) + b"\x00" * 56
    meta = b"\xef\xbe\xad\xde" + struct.pack("<IQQQ", 5, size, offset, 0) + b"\x00" * 32
    return header + meta + b"\x00" * size


def test_mlmodel_is_recognised_and_policy() -> None:
    assert sniff(BytesBlob("Model.mlmodel", BENIGN)) is Format("coreml")
    assert sniff(BytesBlob("noname", BENIGN)) is Format("coreml")  # by content
    findings = scan("Model.mlmodel", BENIGN)
    assert rules(findings) == {"format.coreml_not_allowed"}, findings
    assert "2 neural network layers" in findings[0].message
    # an ONNX ModelProto (ir_version, producer_name "pytorch") stays ONNX
    onnx = b"\x08\x07" + pb(2, b"pytorch") + pb(3, b"2.1") + pb(7, pb(1, b""))
    assert sniff(BytesBlob("m.onnx", onnx)) is Format("onnx")
    # a TF SavedModel (schema version 1, one MetaGraphDef opening with meta_info_def)
    saved = b"\x08\x01" + pb(2, pb(1, pb(1, b"serve")) + pb(2, pb(1, pb(2, b"PyFunc"))))
    assert sniff(BytesBlob("saved_model.pb", saved)) is Format("tensorflow")
    assert sniff(BytesBlob("model", saved)) is not Format("coreml")
    assert sniff(BytesBlob("model", saved + pb(2, b"\x0a\x00"))) is not Format("coreml")


def test_mlpackage_folder_is_policy(tmp_path: Path) -> None:
    pkg = tmp_path / "Model.mlpackage"
    data = pkg / "Data" / "com.apple.CoreML"
    (data / "weights").mkdir(parents=True)
    (data / "model.mlmodel").write_bytes(BENIGN)
    (data / "weights" / "weight.bin").write_bytes(weight_blob())
    manifest = {"fileFormatVersion": "1.0.0", "rootModelIdentifier": "A", "itemInfoEntries": {
        "A": {"author": "com.apple.CoreML", "name": "model.mlmodel",
              "path": "com.apple.CoreML/model.mlmodel"},
        "B": {"author": "com.apple.CoreML", "name": "weights",
              "path": "com.apple.CoreML/weights"}}}
    (pkg / "Manifest.json").write_text(json.dumps(manifest))
    result = scan_target(pkg)
    assert result.verdict is Verdict.POLICY, result.findings
    assert rules(result.findings) == {"format.coreml_not_allowed"}
    assert {f.path for f in result.findings} == {
        "Manifest.json", "Data/com.apple.CoreML/model.mlmodel",
        "Data/com.apple.CoreML/weights/weight.bin"}
    manifest["itemInfoEntries"]["A"]["path"] = "../../../etc/passwd"  # type: ignore[index]
    (pkg / "Manifest.json").write_text(json.dumps(manifest))
    result = scan_target(pkg)
    assert result.verdict is Verdict.MALICIOUS
    assert "coreml.path_escape" in rules(result.findings)


def test_custom_layers_and_models_are_malicious() -> None:
    findings = scan("Model.mlmodel", CUSTOM_LAYER)
    bad = [f for f in findings if f.rule_id == "coreml.custom_code"]
    assert worst(findings) is Verdict.MALICIOUS and bad[0].evidence == "EvilLayer"
    assert "'evil'" in bad[0].message
    custom_model = model(555, pb(10, b"MyCustomModel") + pb(40, b"does things"))
    assert "coreml.custom_code" in rules(scan("m.mlmodel", custom_model))
    # inside a pipeline, inside a loop body of a classifier network
    loop = layer(b"loop", pb(615, pb(4, layer(b"in_loop", pb(500, pb(10, b"Hidden"))))))
    piped = model(202, pb(1, b"\x08\x04" + DESCRIPTION + pb(403, loop)))
    assert [f.evidence for f in scan("p.mlmodel", piped)
            if f.rule_id == "coreml.custom_code"] == ["Hidden"]


def test_linked_models_inside_are_policy_escaping_ones_malicious() -> None:
    def linked(name: bytes, path: bytes) -> bytes:
        return model(556, pb(1, pb(1, pb(1, name)) + pb(2, pb(1, path))))

    inside = scan("m.mlmodel", linked(b"Features.mlmodelc", b".:sub"))
    assert worst(inside) is Verdict.POLICY and "coreml.linked_model" in rules(inside)
    for name, path in ((b"../../x.mlmodelc", b"."), (b"x.mlmodelc", b".:/usr/lib")):
        findings = scan("m.mlmodel", linked(name, path))
        assert worst(findings) is Verdict.MALICIOUS and "coreml.path_escape" in rules(findings)


@pytest.mark.parametrize("name, blob", [
    ("Model.mlmodel", CUSTOM_LAYER[:-4]),
    ("Model.mlmodel", BENIGN + b"\x07"),
    ("weight.bin", weight_blob()[:-1]),
    ("weight.bin", weight_blob(offset=4096)),
])
def test_malformed_coreml_is_never_clean(name: str, blob: bytes) -> None:
    findings = scan(name, blob)
    assert worst(findings) is Verdict.MALFORMED, findings
    assert "coreml.malformed" in rules(findings)


def test_coreml_manifest_errors_and_limits() -> None:
    bad = json.dumps({"rootModelIdentifier": "A", "itemInfoEntries": {"A": {"name": 1}}})
    assert "coreml.malformed" in rules(scan("x.mlpackage/Manifest.json", bad.encode()))
    nested = b"\x08\x04" + DESCRIPTION
    for _ in range(40):  # Model -> Pipeline -> Model ... deeper than the walker allows
        nested = b"\x08\x04" + DESCRIPTION + pb(202, pb(1, nested))
    findings = scan("deep.mlmodel", nested)
    assert "scanner.limit_exceeded" in rules(findings) and worst(findings) is Verdict.MALFORMED
