"""PyTorch Mobile flatbuffer modules (``_save_for_lite_interpreter(path,
_use_flatbuffer=True)``, ``torch.jit.save_jit_module_to_flatbuffer``; usually ``.ptl``):
refused by policy, malicious when their functions or TorchScript sources name operators
that reach files, Python, other processes or the network, malformed when any offset
leaves the file.

Source: PyTorch's public schema ``torch/csrc/jit/serialization/mobile_bytecode.fbs``
(``file_identifier "PTMF"``; read as the ``flatc`` output torch ships,
``mobile_bytecode_generated.h``). Layout: a FlatBuffer, bytes 0..3 the u32 offset of the
root ``Module`` table, bytes 4..7 ``PTMF``. Fields read (vtable slot numbers):

- ``Module``: 0 ``bytecode_version`` (u32), 1 ``extra_files`` ([ExtraFile]), 2 ``methods``
  ([u32] indices into ``ivalues``), 4 ``ivalues`` ([IValue]), 7 ``object_types``
  ([ObjectType]), 8 ``jit_sources`` ([ExtraFile]: TorchScript source ``torch.jit.load``
  compiles);
- ``IValue``: 0 ``val_type`` (u8 union tag, 0..16; 16 = ``Function``), 1 ``val``;
- ``Function``: 0 ``qn`` (qualified name), 2 ``operators`` ([Operator]);
- ``Operator``: 0 ``name``, 1 ``overload_name``; ``ExtraFile``: 0 ``name``, 1 ``content``;
- ``ObjectType``: 0 ``type_name``, 1 ``type`` (u8; 2 = ``CUSTOM_CLASS``, a torchbind
  class ``__torch__.torch.classes.<ns>.<Class>``).

Verdicts: every module is ``format.torch_mobile_not_allowed`` (pickle-free, but a
TorchScript program the appliance never serves); every function's operators and every
jit source are judged by ``scanner.formats.torchops`` (``torchscript.dangerous_operator``
malicious, ``torchscript.custom_operator`` policy, custom classes of unknown namespaces
named too); extra files are analysed as nested content (a pickle in one is judged as a
pickle). A file that is not a module, or whose tables, strings, vectors, union tags or
method indices leave the file, is ``torch_mobile.malformed``: fail closed, never clean.
Read with ``scanner.core.flatbuf`` through ``read_at`` (tensor storage never read);
bounds: ``MAX_ITEMS`` objects, jit sources up to ``torchops.MAX_SOURCE_BYTES`` each.
"""

from __future__ import annotations

from scanner.core.blobview import SliceBlob
from scanner.core.context import ScanContext
from scanner.core.flatbuf import Bad, Reader
from scanner.core.model import Blob, Finding, Severity, Verdict
from scanner.core.rules import rule
from scanner.core.spec import Format, FormatSpec, Probe
from scanner.formats.torchops import MAX_SOURCE_BYTES, Op, judge, source_text_findings

V, S = Verdict, Severity

TORCH_MOBILE_NOT_ALLOWED = rule(
    "format.torch_mobile_not_allowed", V.POLICY, S.MEDIUM,
    "PyTorch Mobile flatbuffer module (PTMF, lite interpreter): a TorchScript program, not "
    "an allowed weight format",
    "Ship the weights as safetensors; build mobile modules on the device side from trusted "
    "sources.",
)
MALFORMED = rule(
    "torch_mobile.malformed", V.MALFORMED, S.HIGH,
    "PyTorch Mobile flatbuffer module is malformed or not a module (bad identifier, "
    "tables, strings, vectors or references outside the file)",
    "Re-export the module with _save_for_lite_interpreter(path, _use_flatbuffer=True).",
)

MAGIC = b"PTMF"
NAMES = (".ptl",)
MAX_ITEMS = 1 << 20  # tables followed: ivalues, functions, operators, files, types
_FUNCTION, _MAX_TAG, _CUSTOM_CLASS = 16, 16, 2
_CLASS_PREFIX = "__torch__.torch.classes."


def looks_like_ptmf(head: bytes) -> bool:
    """``PTMF`` at byte 4 and a root offset past the identifier."""
    return len(head) >= 12 and head[4:8] == MAGIC and int.from_bytes(head[:4], "little") >= 8


def _module(ctx: ScanContext, blob: Blob, ops: list[Op], out: list[Finding]) -> None:
    """Read the module, appending the operators found to ``ops`` and other findings to
    ``out`` as it goes (so what was read before a ``Bad`` is still judged)."""
    r = Reader(blob, what="module", max_items=MAX_ITEMS, limit="max_torch_mobile_items")
    if not looks_like_ptmf(r.bytes_at(0, 12, "header")):
        raise Bad("not a PyTorch Mobile module: bytes 4..7 are not 'PTMF' or the root "
                  "offset is below 8", 4)
    root = r.u32(0)
    r.need(root, 4, "root table")
    version = r.scalar(root, 0, 4)
    n_values = r.vector(root, 4)[1]
    for index, value in enumerate(r.tables(root, 4)):
        if index % 4096 == 0:
            ctx.check_deadline()
        tag = r.scalar(value, 0, 1)
        if tag > _MAX_TAG:
            raise Bad(f"ivalue {index} has union tag {tag} (0..{_MAX_TAG})", value)
        at = r.field(value, 1)
        if tag == _FUNCTION:
            if at is None:
                raise Bad(f"function ivalue {index} has no function table", value)
            function = r.deref(at)
            qn = r.string(function, 0) or f"<function {index}>"
            for op in r.tables(function, 2):
                ops.append((r.string(op, 0) or "", f"function {qn[:120]}"))
    start, count = r.vector(root, 2)
    for i in range(count):
        index = r.u32(start + 4 * i)
        if index >= n_values:
            raise Bad(f"method {i} names ivalue {index} of {n_values}", start + 4 * i)
    classes: list[Op] = []
    types: list[str] = []
    for table in r.tables(root, 7):
        name = r.string(table, 0) or ""
        types.append(name)
        if r.scalar(table, 1, 1) == _CUSTOM_CLASS:
            short = name[len(_CLASS_PREFIX):] if name.startswith(_CLASS_PREFIX) else name
            classes.append((short, "object types"))
    out[0] = TORCH_MOBILE_NOT_ALLOWED.finding(
        blob.name, f"PyTorch Mobile flatbuffer module (bytecode version {version}, "
        f"{n_values} values, {len(types)} object types)", evidence="PTMF")
    out += judge(blob.name, ops, classes)
    ops.clear()  # judged
    for table in r.tables(root, 8):  # TorchScript sources torch.jit.load compiles
        name = r.string(table, 0) or "<unnamed>"
        data = _content(r, table, MAX_SOURCE_BYTES)
        out += source_text_findings(blob.name, data, f"jit source {name[:120]}")
    for table in r.tables(root, 1):
        ctx.check_deadline()
        name = r.string(table, 0) or "<unnamed>"
        at = r.field(table, 1)
        if at is None:
            continue
        start = r.deref(at)
        length = r.u32(start)
        r.need(start + 4, length, f"extra file {name[:80]!r}")
        out += ctx.analyze(SliceBlob(f"{blob.name}!extra/{name[:200]}", blob, start + 4,
                                     length))


def _content(r: Reader, table: int, limit: int) -> bytes:
    """The raw bytes of string field 1 (``content``) of an ``ExtraFile`` table."""
    at = r.field(table, 1)
    if at is None:
        return b""
    start = r.deref(at)
    length = r.u32(start)
    if length > limit:
        raise Bad(f"jit source at {start} is {length} bytes (at most {limit} read)", start)
    return r.bytes_at(start + 4, length, "jit source")


def analyze_torch_mobile(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Findings for a PyTorch Mobile flatbuffer module (see the module docstring)."""
    ops: list[Op] = []
    out = [TORCH_MOBILE_NOT_ALLOWED.finding(blob.name, "PyTorch Mobile flatbuffer module",
                                            evidence="PTMF")]
    try:
        _module(ctx, blob, ops, out)
    except Bad as bad:
        out += judge(blob.name, ops)  # operators read before the damage still count
        out.append(MALFORMED.finding(blob.name, str(bad), f"offset {bad.offset}"
                                     if bad.offset is not None else "", bad.offset))
    return out


TORCH_MOBILE = Format("torch-mobile")
SPECS = (FormatSpec(TORCH_MOBILE, analyze_torch_mobile, probes=(Probe(66, lambda h: (
    looks_like_ptmf(h.head))),), name_hints=NAMES, claims=(*NAMES, ".pt")),)
