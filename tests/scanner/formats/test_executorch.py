"""ExecuTorch programs (``.pte``): refused by policy (``format.executorch_not_allowed``);
custom (non-aten) operators and backend delegates named; native code in delegate data is
malicious; offsets, segments and references outside the file are malformed; a file named
``.pte`` that is not a program is never clean.

Programs are built here from the public description (ExecuTorch's "``.pte`` file format"
page and ``schema/program.fbs``: root ``Program`` with slots 0 version, 1 execution_plan,
3 backend_delegate_data, 4 segments; ``ExecutionPlan`` slots 0 name, 6 operators,
7 delegates) with the ``flatbuffers`` package's builder, so the scanner's own reader is
checked against an independent writer. No ExecuTorch install is needed."""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field
from pathlib import Path

import flatbuffers
import pytest

from scanner.api import scan_paths
from scanner.core.model import Verdict

ELF_SO = b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x03\x00\x3e\x00" + bytes(44)  # ET_DYN x86-64


def _pe() -> bytes:
    stub = bytearray(b"MZ" + bytes(126))
    stub[60:64] = (128).to_bytes(4, "little")
    return bytes(stub) + b"PE\x00\x00" + bytes(64)


@dataclass
class Spec:
    """What to put in a program: operators as (name, overload); delegates as (backend id,
    location 0 inline / 1 segment, index); inline delegate blobs; appended segments."""

    operators: list[tuple[str, str]] = field(default_factory=lambda: [("aten::add", "out")])
    delegates: list[tuple[str, int, int]] = field(default_factory=list)
    inline: list[bytes] = field(default_factory=list)
    segments: list[bytes] = field(default_factory=list)
    extended: bool = True
    header_size: int = 24  # 24: eh00 without, 32: with the segment data size field
    segment_offsets: list[tuple[int, int]] | None = None  # override (offset, size) entries


def _vector(b: flatbuffers.Builder, items: list[int]) -> int:
    b.StartVector(4, len(items), 4)
    for item in reversed(items):
        b.PrependUOffsetTRelative(item)
    return int(b.EndVector())


def _flatbuffer(spec: Spec, sizes: list[tuple[int, int]]) -> bytes:
    b = flatbuffers.Builder(1024)
    ops = []
    for name, overload in spec.operators:
        n, o = b.CreateString(name), b.CreateString(overload)
        b.StartObject(2)
        b.PrependUOffsetTRelativeSlot(0, n, 0)
        b.PrependUOffsetTRelativeSlot(1, o, 0)
        ops.append(b.EndObject())
    delegates = []
    for backend, location, index in spec.delegates:
        b.StartObject(2)
        b.PrependInt8Slot(0, location, 0)  # location 0 (inline) is the default: not written
        b.PrependUint32Slot(1, index, 0)
        ref = b.EndObject()
        ident = b.CreateString(backend)
        b.StartObject(3)
        b.PrependUOffsetTRelativeSlot(0, ident, 0)
        b.PrependUOffsetTRelativeSlot(1, ref, 0)
        delegates.append(b.EndObject())
    op_vec, del_vec = _vector(b, ops), _vector(b, delegates)
    plan_name = b.CreateString("forward")
    b.StartObject(9)
    b.PrependUOffsetTRelativeSlot(0, plan_name, 0)
    b.PrependUOffsetTRelativeSlot(6, op_vec, 0)
    b.PrependUOffsetTRelativeSlot(7, del_vec, 0)
    plan = b.EndObject()
    inline = []
    for data in spec.inline:
        vec = b.CreateByteVector(data)
        b.StartObject(1)
        b.PrependUOffsetTRelativeSlot(0, vec, 0)
        inline.append(b.EndObject())
    segs = []
    for offset, size in sizes:
        b.StartObject(2)
        b.PrependUint64Slot(0, offset, 0)
        b.PrependUint64Slot(1, size, 0)
        segs.append(b.EndObject())
    plans, inline_vec, seg_vec = _vector(b, [plan]), _vector(b, inline), _vector(b, segs)
    b.StartObject(7)
    b.PrependUint32Slot(0, 0, 0)
    b.PrependUOffsetTRelativeSlot(1, plans, 0)
    b.PrependUOffsetTRelativeSlot(3, inline_vec, 0)
    b.PrependUOffsetTRelativeSlot(4, seg_vec, 0)
    root = b.EndObject()
    b.Finish(root, file_identifier=b"ET12")
    return bytes(b.Output())


def build(spec: Spec) -> bytes:
    """A ``.pte`` file: the FlatBuffer, the extended header inserted at byte 8 (the root
    offset moved by the bytes inserted; every other offset is relative), then the
    segments, each aligned to 64 bytes."""
    sizes, pos = [], 0
    for data in spec.segments:
        sizes.append((pos, len(data)))
        pos += -(-len(data) // 64) * 64
    if spec.segment_offsets is not None:
        sizes = spec.segment_offsets
    fb = _flatbuffer(spec, sizes)
    if not spec.extended:
        return fb
    inserted = 32  # keeps the FlatBuffer's 8-byte alignment
    program = len(fb) + inserted
    base = -(-program // 64) * 64 if spec.segments or sizes else 0
    seg_data = b"".join(d + bytes(-len(d) % 64) for d in spec.segments)
    header = b"eh00" + struct.pack("<IQQ", spec.header_size, program, base)
    if spec.header_size >= 32:
        header += struct.pack("<Q", len(seg_data))
    header += bytes(inserted - len(header))
    root = struct.unpack_from("<I", fb)[0] + inserted
    out = struct.pack("<I", root) + fb[4:8] + header + fb[8:]
    if base:
        out += bytes(base - len(out)) + seg_data
    return out


def _scan(tmp_path: Path, data: bytes, name: str = "model.pte") -> tuple[Verdict | None,
                                                                        dict[str, str]]:
    path = tmp_path / name
    path.write_bytes(data)
    (result,) = scan_paths([path]).targets
    return result.verdict, {f.rule_id: f"{f.message} | {f.evidence}" for f in result.findings}


@pytest.mark.parametrize("extended", [True, False])
@pytest.mark.parametrize("header_size", [24, 32])
def test_aten_program_is_policy_only(tmp_path: Path, extended: bool, header_size: int) -> None:
    spec = Spec(extended=extended, header_size=header_size,
                segments=[bytes(1000)] if extended else [])
    verdict, rules = _scan(tmp_path, build(spec))
    assert (verdict, set(rules)) == (Verdict.POLICY, {"format.executorch_not_allowed"}), rules


def test_recognised_by_content_under_another_name(tmp_path: Path) -> None:
    verdict, rules = _scan(tmp_path, build(Spec()), name="program.dat")
    assert (verdict, set(rules)) == (Verdict.POLICY, {"format.executorch_not_allowed"}), rules


def test_custom_operators_are_named(tmp_path: Path) -> None:
    spec = Spec(operators=[("aten::add", "out"), ("evil_ns::run_shell", "out"),
                           ("llama::sdpa_with_kv_cache", "")])
    verdict, rules = _scan(tmp_path, build(spec))
    assert verdict is Verdict.POLICY
    evidence = rules["executorch.custom_operator"]
    assert "evil_ns::run_shell.out" in evidence and "llama::sdpa_with_kv_cache" in evidence
    assert "aten::add" not in evidence


@pytest.mark.parametrize("location", [0, 1])
def test_delegate_backend_is_named(tmp_path: Path, location: int) -> None:
    blob = b"XNNPACK compiled subgraph" + bytes(300)
    spec = Spec(delegates=[("XnnpackBackend", location, 0)],
                inline=[blob] if location == 0 else [],
                segments=[blob] if location == 1 else [])
    verdict, rules = _scan(tmp_path, build(spec))
    assert verdict is Verdict.POLICY, rules
    assert "XnnpackBackend" in rules["executorch.delegate"]
    assert ("inline 0" if location == 0 else "segment 0") in rules["executorch.delegate"]


@pytest.mark.parametrize("library", [ELF_SO, _pe()], ids=["elf", "pe"])
@pytest.mark.parametrize("location", [0, 1])
def test_native_library_in_delegate_data_is_malicious(tmp_path: Path, library: bytes,
                                                      location: int) -> None:
    blob = bytes(200) + library + bytes(100)
    spec = Spec(delegates=[("AotiBackend", location, 0)],
                inline=[blob] if location == 0 else [],
                segments=[bytes(64), blob] if location == 1 else [])
    if location == 1:
        spec.delegates = [("AotiBackend", 1, 1)]
    verdict, rules = _scan(tmp_path, build(spec))
    assert verdict is Verdict.MALICIOUS and "executorch.native_code" in rules, rules


def test_native_library_in_constant_segment_only_is_not_native_code(tmp_path: Path) -> None:
    # Constant tensor bytes are data the runtime never loads as code: not a delegate blob.
    verdict, rules = _scan(tmp_path, build(Spec(segments=[ELF_SO + bytes(100)])))
    assert verdict is Verdict.POLICY and "executorch.native_code" not in rules, rules


@pytest.mark.parametrize("entries", [[(0, 1 << 20)], [(1 << 40, 16)], [(0, 64), (64, 1 << 62)]],
                         ids=["size", "offset", "second"])
def test_segment_outside_the_file_is_malformed(tmp_path: Path,
                                               entries: list[tuple[int, int]]) -> None:
    spec = Spec(segments=[bytes(128)], segment_offsets=entries)
    verdict, rules = _scan(tmp_path, build(spec))
    assert verdict is Verdict.MALFORMED and "past the end" in str(rules), rules
    assert "executorch.malformed" in rules


def test_segments_without_extended_header_are_malformed(tmp_path: Path) -> None:
    spec = Spec(extended=False, segment_offsets=[(0, 16)])
    verdict, rules = _scan(tmp_path, build(spec))
    assert verdict is Verdict.MALFORMED and "executorch.malformed" in rules, rules


@pytest.mark.parametrize("delegate", [("XnnpackBackend", 0, 3), ("XnnpackBackend", 1, 0),
                                      ("XnnpackBackend", 7, 0)],
                         ids=["inline-index", "segment-index", "location"])
def test_delegate_reference_outside_its_table_is_malformed(
        tmp_path: Path, delegate: tuple[str, int, int]) -> None:
    spec = Spec(delegates=[delegate], inline=[b"blob"])
    verdict, rules = _scan(tmp_path, build(spec))
    assert verdict is Verdict.MALFORMED and "executorch.malformed" in rules, rules


@pytest.mark.parametrize("at,value", [(16, 1 << 40), (24, 1 << 40), (12, 1 << 20), (12, 8)],
                         ids=["program-size", "segment-base", "header-size", "header-small"])
def test_extended_header_outside_the_file_is_malformed(tmp_path: Path, at: int,
                                                       value: int) -> None:
    data = bytearray(build(Spec(segments=[bytes(64)])))
    width = 4 if at == 12 else 8
    data[at:at + width] = value.to_bytes(width, "little")
    verdict, rules = _scan(tmp_path, bytes(data))
    assert verdict is Verdict.MALFORMED and "executorch.malformed" in rules, rules


def test_segment_data_size_past_the_file_is_malformed(tmp_path: Path) -> None:
    data = bytearray(build(Spec(header_size=32, segments=[bytes(64)])))
    data[32:40] = (1 << 30).to_bytes(8, "little")
    verdict, rules = _scan(tmp_path, bytes(data))
    assert verdict is Verdict.MALFORMED and "executorch.malformed" in rules, rules


def test_root_offset_outside_the_file_is_malformed(tmp_path: Path) -> None:
    data = bytearray(build(Spec()))
    data[0:4] = (len(data) + 100).to_bytes(4, "little")
    verdict, rules = _scan(tmp_path, bytes(data))
    assert verdict is Verdict.MALFORMED and "executorch.malformed" in rules, rules


def test_truncated_program_is_malformed(tmp_path: Path) -> None:
    data = build(Spec(operators=[("aten::mm", "out")] * 20, segments=[bytes(64)]))
    verdict, rules = _scan(tmp_path, data[: len(data) // 3])
    assert verdict is Verdict.MALFORMED, rules


@pytest.mark.parametrize("content", [b"", b"hello, not a program\n", bytes(range(256)),
                                     b"\x08\x00\x00\x00ETxx" + bytes(64)],
                         ids=["empty", "text", "binary", "bad-digits"])
def test_named_pte_that_is_not_a_program_is_not_clean(tmp_path: Path, content: bytes) -> None:
    verdict, _ = _scan(tmp_path, content)
    assert verdict is not None and verdict >= Verdict.MALFORMED


def test_mutated_programs_fail_closed(tmp_path: Path) -> None:
    """Random byte changes never crash the reader (no ``scanner.internal_error``) and never
    make a program with a delegate clean."""
    base = build(Spec(operators=[("aten::add", "out"), ("x::y", "")],
                      delegates=[("XnnpackBackend", 0, 0)], inline=[b"z" * 40],
                      segments=[bytes(64)]))
    rng = random.Random(22)
    for _ in range(200):
        data = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        verdict, rules = _scan(tmp_path, bytes(data))
        assert "scanner.internal_error" not in rules, rules
        assert verdict is not None and verdict >= Verdict.POLICY


@pytest.mark.parametrize("limit", ["MAX_PROGRAM_BYTES", "MAX_ITEMS"])
def test_limits_are_findings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: str) -> None:
    from scanner.formats import executorch

    monkeypatch.setattr(executorch, limit, 1)
    data = build(Spec(operators=[("aten::add", "out")] * 3))
    verdict, rules = _scan(tmp_path, data)
    assert verdict is Verdict.MALFORMED and "scanner.limit_exceeded" in rules, rules


def test_a_blob_shared_by_many_delegates_is_read_once(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from scanner.formats import executorch

    calls: list[tuple[int, int]] = []
    real = executorch.first_embedded_image

    def counting(ctx: object, blob: object, start: int, end: int) -> object:
        calls.append((start, end))
        return real(ctx, blob, start, end)  # type: ignore[arg-type]

    monkeypatch.setattr(executorch, "first_embedded_image", counting)
    spec = Spec(delegates=[("XnnpackBackend", 0, 0)] * 50, inline=[b"q" * 64])
    verdict, rules = _scan(tmp_path, build(spec))
    assert verdict is Verdict.POLICY and len(calls) == 1, (rules, calls)
