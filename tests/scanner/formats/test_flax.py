"""Flax msgpack checkpoints (scanner/formats/flax.py), from bytes written here by a small msgpack
encoder (flax.serialization's layout: arrays as extension type 1)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from scanner_helpers import rules, scan

from scanner.api import scan_target
from scanner.core.model import BytesBlob, Verdict, worst
from scanner.core.spec import Format
from scanner.formats import flax as _flax
from scanner.scan.sniff import sniff


class Ext:
    def __init__(self, code: int, data: bytes) -> None:
        self.code, self.data = code, data


def pack(v: object) -> bytes:
    """msgpack (use_bin_type=True) for the types a flax state dict holds."""
    if v is None:
        return b"\xc0"
    if isinstance(v, bool):
        return b"\xc3" if v else b"\xc2"
    if isinstance(v, int):
        if 0 <= v <= 0x7F:
            return bytes([v])
        return b"\xcf" + struct.pack(">Q", v) if v >= 0 else b"\xd3" + struct.pack(">q", v)
    if isinstance(v, float):
        return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, str):
        raw = v.encode()
        return (bytes([0xA0 | len(raw)]) if len(raw) < 32 else b"\xd9" + bytes([len(raw)])) \
            + raw
    if isinstance(v, bytes):
        return b"\xc6" + struct.pack(">I", len(v)) + v
    if isinstance(v, (list, tuple)):
        return bytes([0x90 | len(v)]) + b"".join(pack(x) for x in v)
    if isinstance(v, dict):
        head = bytes([0x80 | len(v)]) if len(v) < 16 else b"\xde" + struct.pack(">H", len(v))
        return head + b"".join(pack(k) + pack(x) for k, x in v.items())
    if isinstance(v, Ext):
        return b"\xc9" + struct.pack(">Ib", len(v.data), v.code) + v.data
    raise TypeError(type(v))


def array(shape: tuple[int, ...], dtype: str = "float32", size: int = 4,
          extra: int = 0) -> Ext:
    n = 1
    for d in shape:
        n *= d
    return Ext(1, pack([list(shape), dtype, b"\x00" * (n * size + extra)]))


def state(**leaves: object) -> bytes:
    return pack({"params": {"Dense_0": {"bias": array((3,)), "kernel": array((2, 3))},
                            **leaves}})


def test_flax_checkpoint_is_recognised_and_policy(tmp_path: Path) -> None:
    blob = state(step=7, scale=Ext(3, pack(["float32", b"\0\0\x80\x3f"])),
                 z=Ext(2, pack([1.0, -2.0])), name="gpt2", empty={})
    assert sniff(BytesBlob("flax_model.msgpack", blob)) is Format("flax-msgpack")
    # recognised from content, whatever the name; a head of a big file suffices
    big = pack({"params": {"w": array((1 << 12, 64))}})
    assert sniff(BytesBlob("weights", big)) is Format("flax-msgpack")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "flax_model.msgpack").write_bytes(blob)
    result = scan_target(tmp_path / "m")
    assert result.verdict is Verdict.POLICY, result.findings
    assert rules(result.findings) == {"format.flax_msgpack_not_allowed"}
    assert "2 arrays" in result.findings[0].message


def test_not_msgpack_maps_are_left_to_other_sniffers() -> None:
    assert sniff(BytesBlob("x", b"\x80\x04\x95")) is not Format("flax-msgpack")  # pickle PROTO 4
    assert sniff(BytesBlob("x", bytes([0x81, 0x01, 0x02]))) is not Format("flax-msgpack")  # int key


@pytest.mark.parametrize("blob, why", [
    (state()[:-5], "past its container"),
    (state() + b"\x00", "after the checkpoint map"),
    (state(w=array((2, 2), extra=1)), "does not match its shape"),
    (state(w=array((2,), dtype="object", size=8)), "not a numeric dtype"),
    (state(w=Ext(9, b"\x00")), "extension type 9"),
    (state(w="x").replace(b"\xa1x", b"\xa1\xff"), "not UTF-8"),
    (state(w=None).replace(b"\xc0", b"\xc1"), "0xc1"),
    (pack({"params": {}})[:-1] + b"\xdd\xff\xff\xff\xff", "cannot fit"),
])
def test_malformed_msgpack_is_never_clean(blob: bytes, why: str) -> None:
    findings = scan("flax_model.msgpack", blob)
    assert worst(findings) is Verdict.MALFORMED, findings
    assert any(why in f.message for f in findings if f.rule_id == "flax.malformed"), findings


def test_flax_limits_are_findings(monkeypatch: pytest.MonkeyPatch) -> None:
    deep: object = {"leaf": 1}
    for _ in range(_flax.MAX_DEPTH + 2):
        deep = {"a": deep}
    findings = scan("deep.msgpack", pack(deep))
    assert "scanner.limit_exceeded" in rules(findings) and worst(findings) is Verdict.MALFORMED
    monkeypatch.setattr(_flax, "MAX_OBJECTS", 5)
    assert "scanner.limit_exceeded" in rules(scan("m.msgpack", state()))
