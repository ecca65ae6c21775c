"""PaddlePaddle files (scanner/formats/paddle.py), from bytes written here: ProgramDesc
protobufs (.pdmodel), LoDTensor parameter files (.pdiparams) and paddle.save pickles
(.pdparams)."""

from __future__ import annotations

import json
import pickle as P
import struct
from pathlib import Path

import pytest
from scanner_helpers import rules, scan

from scanner.api import scan_target
from scanner.core.model import BytesBlob, Verdict, worst
from scanner.core.spec import Format
from scanner.formats import paddle as _paddle
from scanner.scan.sniff import sniff

EVIL_PICKLE = P.PROTO + b"\x02" + P.GLOBAL + b"os\nsystem\n" + P.SHORT_BINUNICODE + b"\x02id" \
    + P.TUPLE1 + P.REDUCE + P.STOP


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = b""
    while True:
        out += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            return out


def pb(field: int, payload: bytes) -> bytes:
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def vi(field: int, value: int) -> bytes:
    return varint(field << 3) + varint(value)


def op(kind: str, **attrs: str) -> bytes:
    """An OpDesc: inputs(1), type(3), string attrs(4: name 1, type 2 = STRING, s 5)."""
    body = pb(1, pb(1, b"X") + pb(2, b"x")) + pb(3, kind.encode())
    for name, value in attrs.items():
        body += pb(4, pb(1, name.encode()) + vi(2, 2) + pb(5, value.encode()))
    return body


def program(*ops: bytes) -> bytes:
    var = pb(1, b"x") + pb(2, vi(1, 7))
    block = vi(1, 0) + vi(2, -1) + pb(3, var) + b"".join(pb(4, o) for o in ops)
    return pb(1, block) + pb(4, vi(1, 2006000))


def tensor(dtype: int = 5, dims: tuple[int, ...] = (2, 3), data: bytes | None = None) -> bytes:
    desc = vi(1, dtype) + b"".join(vi(2, d) for d in dims)
    size = {5: 4, 3: 8}.get(dtype, 1)
    n = 1
    for d in dims:
        n *= d
    data = b"\x00" * (n * size) if data is None else data
    return struct.pack("<IQIi", 0, 0, 0, len(desc)) + desc + data


BENIGN = program(op("feed", col="0"), op("conv2d", data_format="NCHW"), op("fetch"))


def test_paddle_program_and_params_are_recognised_and_policy(tmp_path: Path) -> None:
    assert sniff(BytesBlob("inference.pdmodel", BENIGN)) is Format("paddle")
    params = tensor() + tensor(3, (4,))
    assert sniff(BytesBlob("inference.pdiparams", params)) is Format("paddle")
    d = tmp_path / "model"
    d.mkdir()
    (d / "inference.pdmodel").write_bytes(BENIGN)
    (d / "inference.pdiparams").write_bytes(params)
    result = scan_target(d)
    assert result.verdict is Verdict.POLICY, result.findings
    assert rules(result.findings) == {"format.paddle_not_allowed"}
    assert any("3 ops" in f.message for f in result.findings)
    assert any("2 tensors" in f.message for f in result.findings)


def test_paddle_py_func_and_file_ops_are_malicious() -> None:
    findings = scan("inference.pdmodel", program(op("feed"), op("py_func", forward="7")))
    assert worst(findings) is Verdict.MALICIOUS and "paddle.python_op" in rules(findings)
    findings = scan("m.pdmodel", program(op("save", file_path="/etc/cron.d/job")))
    bad = [f for f in findings if f.rule_id == "paddle.file_op"]
    assert bad and "/etc/cron.d/job" in bad[0].message and worst(findings) is Verdict.MALICIOUS
    # attrs before the type (legal protobuf field order) are still tied to their op
    reordered = pb(4, pb(1, b"file_path") + vi(2, 2) + pb(5, b"../x")) + pb(3, b"load_combine")
    assert "paddle.file_op" in rules(scan("m.pdmodel", program(reordered)))


def pir(*ops: dict[str, object]) -> bytes:
    """A Paddle 3 PIR JSON program (paddle.jit.save -> inference.json)."""
    return json.dumps({"base_code": {"magic": "pir", "trainable": False, "version": 1},
                       "program": {"regions": [{"#": "region_0", "blocks": [
                           {"#": "block_0", "args": [], "ops": list(ops)}]}]}}).encode()


def test_paddle_pir_json_program(tmp_path: Path) -> None:
    benign = pir({"#": "p", "A": [0, 1, 1, "conv.w"], "O": {"%": 1}},
                 {"#": "1.conv2d", "I": [{"%": 1}], "O": [{"%": 2}],
                  "A": [{"N": "data_format", "AT": {"#": "0.a_str", "D": "NCHW"}}]})
    assert sniff(BytesBlob("inference.json", benign)) is Format("paddle")
    d = tmp_path / "m"
    d.mkdir()
    (d / "inference.json").write_bytes(benign)
    result = scan_target(d)
    assert result.verdict is Verdict.POLICY and rules(result.findings) == {
        "format.paddle_not_allowed"}, result.findings
    evil = pir({"#": "1.save_combine", "A": [
        {"N": "file_path", "AT": {"#": "0.a_str", "D": "/root/.ssh/authorized_keys"}}]})
    findings = scan("inference.json", evil)
    assert worst(findings) is Verdict.MALICIOUS
    assert any("/root/.ssh/authorized_keys" in f.message for f in findings
               if f.rule_id == "paddle.file_op")
    # nested regions (control flow ops) are walked too
    nested = pir({"#": "1.if", "regions": [{"blocks": [{"ops": [{"#": "1.py_func"}]}]}]})
    assert "paddle.python_op" in rules(scan("inference.json", nested))
    assert worst(scan("inference.json", benign[:-9])) is Verdict.MALFORMED


def test_paddle_pdparams_are_pickles_judged_by_the_pickle_rules() -> None:
    benign = P.dumps({"linear.weight": [1.0, 2.0], "StructuredToParameterName@@": {}},
                     protocol=2)
    assert sniff(BytesBlob("model.pdparams", benign)) is Format("pickle")
    assert worst(scan("model.pdparams", benign)) is Verdict.POLICY
    assert worst(scan("model.pdparams", EVIL_PICKLE)) is Verdict.MALICIOUS


@pytest.mark.parametrize("name, blob, why", [
    ("m.pdmodel", BENIGN[:-7], "runs past"),
    ("m.pdmodel", BENIGN + b"\x00", "invalid field tag"),
    ("m.pdiparams", tensor() + tensor()[:-3], "runs past the end"),
    ("m.pdiparams", tensor() + tensor(dtype=9), "data_type 9"),
    ("m.pdiparams", tensor() + b"\x01\x00\x00\x00" + tensor()[4:], "version is not 0"),
])
def test_malformed_paddle_files_are_never_clean(name: str, blob: bytes, why: str) -> None:
    findings = scan(name, blob)
    assert worst(findings) is Verdict.MALFORMED, findings
    assert any(why in f.message for f in findings if f.rule_id == "paddle.malformed"), findings


def test_paddle_limits_are_findings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_paddle, "MAX_TENSORS", 2)
    findings = scan("m.pdiparams", tensor() * 3)
    assert "scanner.limit_exceeded" in rules(findings)
    nested = BENIGN
    monkeypatch.setattr(_paddle, "_SCHEMA", {k: {**v, 99: 0} for k, v in
                                             _paddle._SCHEMA.items()})
    for _ in range(70):
        nested = pb(99, nested)
    assert "scanner.limit_exceeded" in rules(scan("m.pdmodel", pb(1, vi(1, 0) + vi(2, -1))
                                                  + nested))
