"""ONNX model analyzer: a bounded protobuf wire-format walk (no ``onnx`` package).

Every ONNX model is refused by policy (``format.onnx_not_allowed``). The walk follows the
message types that can hold tensors (ModelProto -> GraphProto -> NodeProto ->
AttributeProto -> nested graphs, FunctionProto, TrainingInfoProto, SparseTensorProto) and
reads each TensorProto's ``external_data`` entries: a ``location`` that is absolute or has
a '..' component makes the loader read files outside the model folder (CVE-2022-25882,
CVE-2024-27318) and is malicious. Anything the walk cannot parse is malformed.
Field numbers: onnx/onnx.proto (IR version 10).
"""

from __future__ import annotations

from scanner.core.archive import reference_escapes
from scanner.core.context import LimitHit, ScanContext
from scanner.core.model import Blob, BytesBlob, Finding, Severity, Verdict
from scanner.core.rules import rule
from scanner.core.spec import Format, FormatSpec, Probe
from scanner.formats.protowire import ProtoError, Reader

ONNX_NOT_ALLOWED = rule(
    "format.onnx_not_allowed", Verdict.POLICY, Severity.MEDIUM,
    "ONNX model: not an allowed weight format",
    "Export the weights to safetensors.",
)
ONNX_MALFORMED = rule(
    "onnx.malformed", Verdict.MALFORMED, Severity.HIGH,
    "ONNX protobuf cannot be parsed",
    "Re-export the model; do not load this file.",
)
ONNX_EXTERNAL_ESCAPE = rule(
    "onnx.external_data_escape", Verdict.MALICIOUS, Severity.CRITICAL,
    "ONNX tensor external_data location escapes the model folder "
    "(CVE-2022-25882, CVE-2024-27318)",
    "Do not load this model; external data locations must be relative names inside the "
    "model folder without '..'.",
)

MODEL, GRAPH, NODE, ATTRIBUTE, TENSOR, SPARSE, TRAINING, FUNCTION, ENTRY = range(9)
# message type -> {field number: message type of that (length-delimited) field}
_SCHEMA: dict[int, dict[int, int]] = {
    MODEL: {7: GRAPH, 20: TRAINING, 21: FUNCTION},
    GRAPH: {1: NODE, 5: TENSOR, 15: SPARSE},
    NODE: {5: ATTRIBUTE},
    ATTRIBUTE: {5: TENSOR, 6: GRAPH, 10: TENSOR, 11: GRAPH, 22: SPARSE, 23: SPARSE},
    TENSOR: {13: ENTRY},
    SPARSE: {1: TENSOR, 2: TENSOR},
    TRAINING: {1: GRAPH, 2: GRAPH},
    FUNCTION: {7: NODE, 11: ATTRIBUTE},
}
_MODEL_FIELDS = {1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 21: 2, 25: 2}
MAX_DEPTH = 128
MAX_ENTRY = 1 << 16
WINDOW = 1 << 20


class _Bad(Exception):
    pass


def _Reader(blob: Blob) -> Reader:  # noqa: N802 - reads like the class it hands out
    """The shared protobuf reader with a 1 MiB window (few syscalls for dense messages)."""
    return Reader(blob, WINDOW)


def _fields(data: bytes) -> dict[int, bytes]:
    """Length-delimited fields of a small in-memory message (last one wins, as protobuf)."""
    out: dict[int, bytes] = {}
    reader = _Reader(BytesBlob("", data))
    pos = 0
    while pos < len(data):
        tag, pos = reader.varint(pos)
        wire = tag & 7
        if wire == 2:
            length, pos = reader.varint(pos)
            if pos + length > len(data):
                raise _Bad("string field runs past its message")
            out[tag >> 3] = data[pos : pos + length]
            pos += length
        elif wire == 0:
            _, pos = reader.varint(pos)
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise _Bad(f"invalid wire type {wire}")
    return out


def looks_like_onnx(head: bytes, size: int) -> bool:
    """Sniff: ``head`` starts a ModelProto (ir_version first, then only ModelProto field
    numbers with their wire types, lengths within ``size``)."""
    if len(head) < 2 or head[0] != 0x08:
        return False
    reader = _Reader(BytesBlob("", head))
    pos, fields = 0, 0
    try:
        while pos < len(head):
            tag, pos = reader.varint(pos)
            field, wire = tag >> 3, tag & 7
            if _MODEL_FIELDS.get(field) != wire:
                return False
            value, pos = reader.varint(pos)
            if fields == 0 and not 1 <= value <= 100:
                return False
            if wire == 2:
                if pos + value > size:
                    return False
                pos += value
            fields += 1
    except (_Bad, ProtoError):
        pass  # the head ended inside a field
    return fields >= 2 or (fields == 1 and pos == size)


class _Walk:
    def __init__(self, ctx: ScanContext, blob: Blob) -> None:
        self.ctx, self.blob = ctx, blob
        self.reader = _Reader(blob)
        self.findings: list[Finding] = []
        self.fields = 0

    def run(self) -> None:
        # frames: (message type, position, end, tensor name for evidence)
        stack: list[tuple[int, int, int, str]] = [(MODEL, 0, self.blob.size, "")]
        while stack:
            kind, pos, end, tensor = stack.pop()
            while pos < end:
                self.fields += 1
                if not self.fields & 0xFFF:
                    self.ctx.check_deadline()
                tag, pos = self.reader.varint(pos)
                field, wire = tag >> 3, tag & 7
                if field == 0 or wire not in (0, 1, 2, 5):
                    raise _Bad(f"invalid field tag {tag} at offset {pos}")
                if wire == 0:
                    _, pos = self.reader.varint(pos)
                    continue
                if wire in (1, 5):
                    pos += 8 if wire == 1 else 4
                    continue
                length, pos = self.reader.varint(pos)
                if pos + length > end:
                    raise _Bad(f"field {field} ({length} bytes) runs past its message at "
                               f"offset {pos}")
                sub = _SCHEMA.get(kind, {}).get(field)
                if kind == TENSOR and field == 8:
                    tensor = self.blob.read_at(pos, min(length, 256)).decode("utf-8", "replace")
                elif sub == ENTRY:
                    self.entry(pos, length, tensor)
                elif sub is not None:
                    if len(stack) >= MAX_DEPTH:
                        raise LimitHit("onnx message nesting depth", MAX_DEPTH)
                    stack.append((kind, pos + length, end, tensor))
                    stack.append((sub, pos, pos + length, ""))
                    break
                pos += length
            else:
                if pos != end:
                    raise _Bad(f"fixed-size field runs past its message at offset {end}")

    def entry(self, pos: int, length: int, tensor: str) -> None:
        if length > MAX_ENTRY:
            raise _Bad(f"external_data entry of {length} bytes at offset {pos}")
        fields = _fields(self.blob.read_at(pos, length))
        if fields.get(1) != b"location":
            return
        location = fields.get(2, b"").decode("utf-8", "replace")
        why = reference_escapes(location)
        if why is not None:
            self.findings.append(ONNX_EXTERNAL_ESCAPE.finding(
                self.blob.name, f"tensor {tensor!r} external_data location {location[:200]!r} "
                f"({why})", evidence=location[:500], offset=pos))


def analyze_onnx(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Findings for an ONNX ModelProto blob: always the policy refusal, plus external data
    escapes and structural errors. Never raises for bad input."""
    findings = [ONNX_NOT_ALLOWED.finding(blob.name, ONNX_NOT_ALLOWED.title)]
    walk = _Walk(ctx, blob)
    try:
        walk.run()
    except _Bad as exc:
        walk.findings.append(ONNX_MALFORMED.finding(blob.name, f"invalid ONNX protobuf: {exc}"))
    except ProtoError as exc:
        walk.findings.append(ONNX_MALFORMED.finding(
            blob.name, f"invalid ONNX protobuf: {exc} at offset {exc.offset}"))
    except LimitHit as hit:
        walk.findings.append(hit.finding(blob.name))
    return findings + walk.findings


ONNX = Format("onnx")
SPECS = (FormatSpec(ONNX, analyze_onnx, name_hints=(".onnx",), claims=(".onnx",),
                    probes=(Probe(140, lambda h: looks_like_onnx(h.head, h.size)),)),)
