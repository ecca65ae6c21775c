"""PaddlePaddle inference files, analysed without Paddle:

- ``*.pdmodel`` (``paddle.static.save_inference_model``, ``paddle.jit.save``): a
  ``ProgramDesc`` protobuf (paddle/fluid/framework/framework.proto), walked with
  ``scanner.formats.protowire``: ProgramDesc.blocks(1) -> BlockDesc.ops(4) -> OpDesc.type(3),
  attrs(4) -> Attr.name(1), s(5), strings(8). A ``py_func`` op calls a Python callable of
  the loading process (``paddle.python_op``, malicious); ``save``/``load``/
  ``save_combine``/``load_combine`` ops read or write the path in their ``file_path``
  attribute when the program runs (``paddle.file_op``, malicious). Anything else is
  ``format.paddle_not_allowed`` (policy).
- ``*.pdiparams`` (``save_combine``) and per-variable parameter files: LoDTensors back to
  back (paddle/fluid/framework/lod_tensor.cc ``SerializeToStream``): uint32 version 0,
  uint64 lod_level, per level uint64 byte size + offsets, uint32 tensor version 0, int32
  ``TensorDesc`` size, the ``TensorDesc`` protobuf (data_type(1), dims(2)) and
  prod(dims) * element size raw bytes. Data only: policy; every length is checked
  against the file (``paddle.malformed``).
- ``*.json`` PIR programs (Paddle 3 ``paddle.jit.save``; paddle/fluid/pir/
  serialize_deserialize: ``{"base_code": {"magic": "pir", ...}, "program": {"regions":
  [{"blocks": [{"ops": [{"#": "1.conv2d", "A": [{"N": name, "AT": {"D": value}}]}]}]}]}}``,
  op names compressed as ``<dialect id>.<op>``): parsed strictly, checked like any JSON,
  and every op (nested regions too) judged by the same op rules.
- ``*.pdparams`` / ``*.pdopt`` (``paddle.save``) are pickles and go to the pickle
  analyzer by content.

Recognised from content: a ProgramDesc whose first block is block 0 with parent -1
(``0a <len> 08 00 10 ff..ff 01``), a LoDTensor header whose ``TensorDesc`` parses, or a
JSON object whose head holds ``"base_code"`` and ``"magic": "pir"``.
Bounds: ``MAX_TENSORS`` tensors, ``MAX_LOD_LEVEL`` levels, TensorDesc of ``MAX_DESC``
bytes, the walker's own limits; the deadline is checked per tensor.
"""

from __future__ import annotations

import math
import re

from scanner.core.context import LimitHit, ScanContext
from scanner.core.model import Blob, BytesBlob, Finding, Severity, Verdict
from scanner.core.rules import rule
from scanner.core.spec import Format, FormatSpec, Probe
from scanner.formats.protowire import LEAF, ProtoError, Reader, walk_findings

V, S = Verdict, Severity

PADDLE_NOT_ALLOWED = rule(
    "format.paddle_not_allowed", V.POLICY, S.MEDIUM,
    "PaddlePaddle program (.pdmodel) or parameters (.pdiparams): not an allowed format",
    "Export the weights to safetensors.",
)
PADDLE_MALFORMED = rule(
    "paddle.malformed", V.MALFORMED, S.HIGH,
    "PaddlePaddle program or parameter file cannot be parsed (protobuf, lengths, sizes)",
    "Re-export the model with Paddle; do not load this file.",
)
PADDLE_PYTHON_OP = rule(
    "paddle.python_op", V.MALICIOUS, S.CRITICAL,
    "PaddlePaddle program holds a py_func op (calls a Python callable when it runs)",
    "Do not load this program; rebuild it from trusted code without py_func.",
)
PADDLE_FILE_OP = rule(
    "paddle.file_op", V.MALICIOUS, S.HIGH,
    "PaddlePaddle program reads or writes a file by path when it runs (save/load ops)",
    "Do not load this program; inference programs never carry save/load ops.",
)

PROGRAM, BLOCK, OP, ATTR = range(4)
_SCHEMA = {PROGRAM: {1: BLOCK}, BLOCK: {4: OP}, OP: {3: LEAF, 4: ATTR},
           ATTR: {1: LEAF, 5: LEAF, 8: LEAF}}
_PROGRAM_START = b"\x08\x00\x10" + b"\xff" * 9 + b"\x01"  # idx 0, parent_idx -1
PYTHON_OPS = frozenset({"py_func"})
FILE_OPS = frozenset({"save", "load", "save_combine", "load_combine"})
# VarType.Type -> bytes per element (framework.proto; 32/33: float8 e4m3fn/e5m2)
ELEMENT_BYTES = {0: 1, 1: 2, 2: 4, 3: 8, 4: 2, 5: 4, 6: 8, 19: 8, 20: 1, 21: 1, 22: 2,
                 23: 8, 24: 16, 32: 1, 33: 1}
MAX_TENSORS = 1 << 20
MAX_LOD_LEVEL = 16
MAX_DESC = 1 << 16
MAX_DIMS = 16
MAX_FINDINGS = 32


class _Bad(Exception):
    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


def _u(blob: Blob, pos: int, n: int, what: str) -> int:
    data = blob.read_at(pos, n)
    if len(data) != n:
        raise _Bad(f"{what} runs past the end of the file", pos)
    return int.from_bytes(data, "little")


def _tensor_desc(desc: bytes, at: int) -> tuple[int, list[int]]:
    """(data_type, dims) of a ``VarType.TensorDesc``; raises ``_Bad``."""
    dtype: int | None = None
    dims: list[int] = []
    reader = Reader(BytesBlob("", desc))
    pos = 0
    try:
        while pos < len(desc):
            tag, pos = reader.varint(pos)
            field, wire = tag >> 3, tag & 7
            if field == 1 and wire == 0:
                dtype, pos = reader.varint(pos)
            elif field == 2 and wire == 0:
                value, pos = reader.varint(pos)
                dims.append(value - (1 << 64) if value >> 63 else value)
            elif field == 2 and wire == 2:
                length, pos = reader.varint(pos)
                stop = pos + length
                if stop > len(desc):
                    raise _Bad("packed dims run past the TensorDesc", at)
                while pos < stop:
                    value, pos = reader.varint(pos)
                    dims.append(value - (1 << 64) if value >> 63 else value)
            else:
                raise _Bad(f"unexpected TensorDesc field tag {tag}", at)
            if len(dims) > MAX_DIMS:
                raise _Bad(f"TensorDesc has more than {MAX_DIMS} dims", at)
    except ProtoError as exc:
        raise _Bad(f"invalid TensorDesc: {exc}", at) from None
    if dtype not in ELEMENT_BYTES:
        raise _Bad(f"TensorDesc data_type {dtype} is not a tensor element type", at)
    return dtype, dims


def _tensor_at(blob: Blob, pos: int) -> tuple[int, int, list[int]]:
    """(position after the tensor, data_type, dims) of the LoDTensor at ``pos``."""
    if _u(blob, pos, 4, "tensor version") != 0:
        raise _Bad("LoDTensor version is not 0", pos)
    levels = _u(blob, pos + 4, 8, "lod_level")
    if levels > MAX_LOD_LEVEL:
        raise _Bad(f"lod_level {levels} above {MAX_LOD_LEVEL}", pos + 4)
    pos += 12
    for _ in range(levels):
        size = _u(blob, pos, 8, "lod level size")
        if size % 8 or size > blob.size - pos - 8:
            raise _Bad(f"lod level of {size} bytes does not fit", pos)
        pos += 8 + size
    if _u(blob, pos, 4, "tensor desc version") != 0:
        raise _Bad("Tensor version is not 0", pos)
    desc_size = _u(blob, pos + 4, 4, "TensorDesc size")
    if not 2 <= desc_size <= MAX_DESC or desc_size > blob.size - pos - 8:
        raise _Bad(f"TensorDesc size {desc_size} does not fit", pos + 4)
    dtype, dims = _tensor_desc(blob.read_at(pos + 8, desc_size), pos + 8)
    if any(d < 0 for d in dims):
        raise _Bad(f"negative dimension in {dims}", pos + 8)
    nbytes = math.prod(dims) * ELEMENT_BYTES[dtype]
    data = pos + 8 + desc_size
    if nbytes > blob.size - data:
        raise _Bad(f"tensor data ({nbytes} bytes) runs past the end of the file", data)
    return data + nbytes, dtype, dims


_PIR_MAGIC = re.compile(rb'"magic"\s{0,16}:\s{0,16}"pir"')


def looks_like_pir(head: bytes) -> bool:
    """Sniff: a Paddle PIR JSON program (``base_code.magic == "pir"`` near the start)."""
    return head.lstrip()[:1] == b"{" and b'"base_code"' in head[:1024] and \
        _PIR_MAGIC.search(head, 0, 1024) is not None


def _program_head(head: bytes) -> bool:
    if head[:1] != b"\x0a":
        return False
    try:
        _, pos = Reader(BytesBlob("", head)).varint(1)
    except ProtoError:
        return False
    return head[pos:pos + len(_PROGRAM_START)] == _PROGRAM_START


def looks_like_paddle(head: bytes, blob: Blob) -> bool:
    """Sniff: a ProgramDesc head, or a LoDTensor whose header and TensorDesc parse."""
    if _program_head(head):
        return True
    if head[:4] != b"\x00\x00\x00\x00" or len(head) < 24:
        return False
    try:
        _tensor_at(blob, 0)
    except _Bad:
        return False
    return True


def _pir_ops(doc: object) -> list[tuple[str, list[str]]]:
    """(op name, file_path attribute strings) for every op of a PIR JSON program."""
    out: list[tuple[str, list[str]]] = []
    stack: list[object] = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ops = node.get("ops")
            if isinstance(ops, list):
                for op in ops:
                    if isinstance(op, dict) and isinstance(op.get("#"), str):
                        paths = [str(a.get("AT", {}).get("D"))[:300] for a in op.get("A", [])
                                 if isinstance(a, dict) and a.get("N") == "file_path"
                                 and isinstance(a.get("AT"), dict)] \
                            if isinstance(op.get("A"), list) else []
                        out.append((op["#"], paths))
            stack.extend(v for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, (dict, list)))
    return out


def _pir(ctx: ScanContext, blob: Blob) -> list[Finding]:
    from scanner.core.blobview import read_bounded
    from scanner.core.strict_json import JSONProblem, loads_strict
    from scanner.formats.text import analyze_json

    out = analyze_json(ctx, blob)
    try:
        doc = loads_strict(read_bounded(blob, ctx.limits.max_json_bytes, "max_json_bytes"))
    except JSONProblem:
        return [PADDLE_NOT_ALLOWED.finding(blob.name, "PaddlePaddle PIR program (invalid "
                                           "JSON)")] + out
    base = doc.get("base_code") if isinstance(doc, dict) else None
    if not isinstance(base, dict) or base.get("magic") != "pir" or not isinstance(
            doc.get("program"), dict):
        out.append(PADDLE_MALFORMED.finding(blob.name, "PIR program has no base_code.magic "
                                            "'pir' and program object", "/base_code"))
    ops = _pir_ops(doc)
    judge = _Ops(blob.name)
    for name, paths in ops:
        judge.op_type = name.rsplit(".", 1)[-1]
        judge.attrs = [("file_path", paths)] if paths else []
        if len(judge.findings) < MAX_FINDINGS:
            judge.judge()
    return [PADDLE_NOT_ALLOWED.finding(blob.name, f"PaddlePaddle PIR program ({len(ops)} "
                                       "ops)")] + judge.findings + out


class _Ops:
    """Visitor collecting each op's type and string attributes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.findings: list[Finding] = []
        self.blocks = self.ops = 0
        self.op_type = ""
        self.attrs: list[tuple[str, list[str]]] = []
        self.attr_name = ""
        self.attr_strings: list[str] = []
        self.offset = 0

    def open(self, kind: int) -> None:
        if kind == BLOCK:
            self.blocks += 1
        elif kind == OP:
            self.ops += 1
            self.op_type, self.attrs = "", []
        elif kind == ATTR:
            self.attr_name, self.attr_strings = "", []

    def leaf(self, kind: int, field: int, value: bytes | int, offset: int) -> None:
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        if kind == OP:
            self.op_type, self.offset = text, offset
        elif field == 1:
            self.attr_name = text
        else:
            self.attr_strings.append(text)

    def close(self, kind: int) -> None:
        if kind == ATTR:
            self.attrs.append((self.attr_name, self.attr_strings))
        elif kind == OP and len(self.findings) < MAX_FINDINGS:
            self.judge()

    def judge(self) -> None:
        op = self.op_type
        if op in PYTHON_OPS:
            self.findings.append(PADDLE_PYTHON_OP.finding(
                self.path, f"op {op!r} runs a Python callable", evidence=op,
                offset=self.offset))
        elif op in FILE_OPS:
            paths = [s for name, strings in self.attrs if name == "file_path"
                     for s in strings]
            self.findings.append(PADDLE_FILE_OP.finding(
                self.path, f"op {op!r} touches {paths[0][:200]!r}" if paths else
                f"op {op!r} reads or writes files", evidence=f"{op}: {paths[:1]}"[:300],
                offset=self.offset))


def _program(ctx: ScanContext, blob: Blob) -> list[Finding]:
    ops = _Ops(blob.name)
    out = walk_findings(ctx, blob, _SCHEMA, PROGRAM, ops, PADDLE_MALFORMED, "ProgramDesc")
    return [PADDLE_NOT_ALLOWED.finding(
        blob.name, f"PaddlePaddle program ({ops.blocks} blocks, {ops.ops} ops)")] \
        + ops.findings + out


def _params(ctx: ScanContext, blob: Blob) -> list[Finding]:
    pos, count = 0, 0
    out: list[Finding] = []
    try:
        while pos < blob.size:
            if count >= MAX_TENSORS:
                raise LimitHit("paddle tensor count", MAX_TENSORS)
            ctx.check_deadline()
            pos, _, _ = _tensor_at(blob, pos)
            count += 1
    except _Bad as bad:
        out.append(PADDLE_MALFORMED.finding(
            blob.name, f"invalid parameter file at tensor {count}: {bad}", offset=bad.offset))
    except LimitHit as hit:
        out.append(hit.finding(blob.name))
    return [PADDLE_NOT_ALLOWED.finding(
        blob.name, f"PaddlePaddle parameters ({count} tensors read)")] + out


def analyze_paddle(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Findings for a Paddle program or parameter blob (see the module docstring)."""
    if looks_like_pir(blob.read_at(0, 4096)):
        return _pir(ctx, blob)
    if blob.read_at(0, 1) == b"\x0a":
        return _program(ctx, blob)
    return _params(ctx, blob)


PADDLE = Format("paddle")  # ProgramDesc (.pdmodel), PIR JSON, LoDTensor params (.pdiparams)
SPECS = (FormatSpec(
    PADDLE, analyze_paddle, name_hints=(".pdmodel", ".pdiparams"), binary=False,
    # PIR JSON is tested after ONNX, on any head (as a byte test: before text decoding).
    probes=(Probe(112, lambda h: looks_like_paddle(h.head, h.blob)),
            Probe(150, lambda h: looks_like_pir(h.head))),
),)
