"""TorchScript operators that reach outside the tensor world, and where TorchScript code
names them: the operator table of a lite-interpreter ``bytecode.pkl``, the operators of a
PyTorch Mobile flatbuffer function, and TorchScript source (``code/**.py`` of a
``torch.jit.save`` / ``_save_for_lite_interpreter`` archive, the ``jit_sources`` of a
flatbuffer module). Nothing is imported, unpickled or compiled: ``bytecode.pkl`` goes
through the scanner's symbolic pickle machine, source through ``ast``.

Why it matters: a TorchScript model is a program. ``torch.jit.load`` compiles its source
and ``_load_for_mobile`` runs its bytecode, and both run the operators they name from
torch's own operator registry, with no sandbox; PyTorch's SECURITY.md says to treat
TorchScript models as locally executable code from an unknown source (pytorch/pytorch
#152336; #143403: "there is no safe mode for jit.load"); Black Hat USA 2025, "Safe Harbor
or Hostile Waters: Unveiling the Hidden Perils of the TorchScript Engine in PyTorch"
(Zhou, Song; CVE-2025-32434: ``torch.load(weights_only=True)`` handed TorchScript
archives to ``torch.jit.load``).

``DANGEROUS`` (``torchscript.dangerous_operator``, malicious), drawn from torch's own
operator registry (``torch._C._jit_get_all_schemas()`` of torch 2.13, every schema taking
a file name, a remote worker or a Python callable) and the docs of each:

- ``aten::from_file`` (``torch.from_file``): maps a file named by a string into a tensor
  (reads it; ``shared=True`` maps it writable, so writes to the tensor reach the file);
- ``aten::save`` (``torch.save`` inside TorchScript; ``register_prim_ops_fulljit.cpp``):
  writes a pickle of a value to a path the code names (files written anywhere the
  process may write);
- ``debugprims::load_tensor`` (``torch/_prims/debug_prims.py``): reads a tensor from an
  on-disk content store;
- ``prim::PythonOp``, ``prim::IgnoredPythonOp``: call back into a Python function;
- ``prim::rpc_async``, ``prim::rpc_sync``, ``prim::rpc_remote``
  (``torch.distributed.rpc``): run a function on another worker over the network;
- every operator of the ``c10d``, ``_c10d_functional``, ``_c10d_functional_autograd``,
  ``symm_mem``, ``_dtensor`` namespaces (``NETWORK_NAMESPACES``): collective
  communication with other processes over a process group (network, shared memory).

Operators of a namespace outside ``KNOWN_NAMESPACES`` (torch's own: ``aten``, ``prim``,
``quantized``, ...) are ``torchscript.custom_operator`` (policy): the runtime needs a
custom kernel library for them, native code the file does not show. Profiler records
(``profiler::_record_function_*``) and ``prim::Print``/``aten::warn`` only log: not
listed. Code that cannot be read (a ``bytecode.pkl`` that is not a complete pickle or
whose operator table is not a tuple of names, source that is not Python syntax) is
``torchscript.unreadable`` (malformed): fail closed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator

from scanner.core.blobview import read_bounded
from scanner.core.context import LimitHit, ScanContext
from scanner.core.model import Blob, Finding, Severity, Verdict
from scanner.core.rules import rule

V, S = Verdict, Severity

DANGEROUS_OPERATOR = rule(
    "torchscript.dangerous_operator", V.MALICIOUS, S.CRITICAL,
    "TorchScript code calls an operator that reaches files, Python, other processes or "
    "the network (aten::save, aten::from_file, prim::PythonOp, RPC, c10d collectives)",
    "Do not load this model; TorchScript is a program, and this one reaches outside the "
    "tensors it computes on. Ship safetensors weights instead.",
)
CUSTOM_OPERATOR = rule(
    "torchscript.custom_operator", V.POLICY, S.HIGH,
    "TorchScript code calls operators (or uses classes) outside torch's own namespaces: the "
    "runtime runs custom native kernel code for them that the file does not show",
    "Export with torch's own operators only, or review the custom operator library by hand.",
)
UNREADABLE = rule(
    "torchscript.unreadable", V.MALFORMED, S.HIGH,
    "TorchScript code or operator table cannot be read, so the operators it runs cannot "
    "be checked (fail closed)",
    "Re-export the model with torch.jit.save / _save_for_lite_interpreter, or ship "
    "safetensors weights.",
)

DANGEROUS: dict[str, str] = {
    "aten::from_file": "maps a file named by a string into a tensor (reads it; shared=True "
                       "writes back to it)",
    "aten::save": "writes a pickle of a value to a file path the code names",
    "debugprims::load_tensor": "reads a tensor from an on-disk content store",
    "prim::PythonOp": "calls a Python function",
    "prim::IgnoredPythonOp": "calls a Python function",
    "prim::rpc_async": "runs a function on a remote worker (network)",
    "prim::rpc_sync": "runs a function on a remote worker (network)",
    "prim::rpc_remote": "runs a function on a remote worker (network)",
}
NETWORK_NAMESPACES = frozenset({"c10d", "_c10d_functional", "_c10d_functional_autograd",
                                "symm_mem", "_dtensor", "dist_c10d", "dist_rpc",
                                "dist_autograd", "rpc"})
# Namespaces of operators (and torchbind classes) torch itself registers (torch 2.13's
# registry, plus the mobile backends' prepacked ops).
KNOWN_NAMESPACES = frozenset({
    "aten", "prim", "prims", "quantized", "_quantized", "quantization", "onednn", "mkldnn",
    "mkldnn_prepacked", "mkl", "sparse", "profiler", "static_runtime", "inductor",
    "inductor_prims", "rngprims", "_native", "_test", "onnx", "export", "debug_mode_ops",
    "prepacked", "xnnpack", "_xnnpack", "vulkan", "vulkan_prepack", "metal",
    "metal_prepack", "_nnapi", "_caffe2", "cuda", "upsample",
})
# Bare builtins of TorchScript source that are operators (the rest resolve through
# ``torch.<name>`` -> ``aten::<name>`` and ``ops.<ns>.<name>`` -> ``<ns>::<name>``).
_BARE = {"rpc_async": "prim::rpc_async", "rpc_sync": "prim::rpc_sync",
         "remote": "prim::rpc_remote"}
_LISTED = 8
MAX_SOURCE_BYTES = 8 << 20

Op = tuple[str, str]  # (qualified operator name "ns::name", where it was seen)


def namespace(name: str) -> str:
    """``"aten"`` of ``"aten::add"``; ``""`` for a name without ``::``."""
    return name.split("::", 1)[0] if "::" in name else ""


def danger(name: str) -> str | None:
    """Why the operator ``name`` (``ns::op``, any overload) reaches outside, or None."""
    why = DANGEROUS.get(name)
    if why is None and namespace(name) in NETWORK_NAMESPACES:
        why = "communicates with other processes over a process group (network)"
    return why


def judge(path: str, ops: Iterable[Op], classes: Iterable[Op] = ()) -> list[Finding]:
    """Findings for the operators (and torchbind class names ``ns.Class``) a model uses:
    one ``torchscript.dangerous_operator`` per distinct dangerous operator, one
    ``torchscript.custom_operator`` naming those of unknown namespaces."""
    out: list[Finding] = []
    seen: set[str] = set()
    custom: dict[str, None] = {}
    for name, where in ops:
        why = danger(name)
        if why is not None:
            if name not in seen:
                seen.add(name)
                out.append(DANGEROUS_OPERATOR.finding(
                    path, f"{name} {why} (in {where})"[:400], f"{name} in {where}"[:300]))
        elif namespace(name) not in KNOWN_NAMESPACES:
            custom.setdefault(name or "<unnamed>")
    for name, _ in classes:
        if name.split(".", 1)[0] not in KNOWN_NAMESPACES:
            custom.setdefault(f"class {name}")
    if custom:
        names = list(custom)
        more = f" (+{len(names) - _LISTED} more)" if len(names) > _LISTED else ""
        out.append(CUSTOM_OPERATOR.finding(
            path, f"{len(names)} operator(s)/class(es) outside torch's own namespaces",
            (", ".join(names[:_LISTED]) + more)[:300]))
    return out


# -- TorchScript source ---------------------------------------------------------------


def _dotted(node: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def _operator_of(parts: list[str]) -> str | None:
    """The operator a dotted TorchScript name resolves to, or None."""
    if parts[:2] == ["torch", "ops"]:
        parts = parts[1:]
    if parts[0] == "ops" and len(parts) == 3:
        return f"{parts[1]}::{parts[2]}"
    if parts[0] == "torch" and len(parts) == 2:
        return f"aten::{parts[1]}"
    return None


def source_operators(text: str, where: str) -> Iterator[Op]:
    """Operators TorchScript source names (``torch.<op>``, ``ops.<ns>.<op>``,
    ``torch.ops.<ns>.<op>``, bare ``rpc_*``), with ``where:line``. Raises ``SyntaxError``
    (or ``RecursionError``/``ValueError``) for source ``ast`` cannot parse."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        name: str | None = None
        if isinstance(node, ast.Attribute):  # every prefix of a chain is visited too
            parts = _dotted(node)
            name = _operator_of(parts) if parts else None
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name = _BARE.get(node.func.id)
        if name is not None:
            yield name, f"{where}:{getattr(node, 'lineno', 0)}"


def source_findings(ctx: ScanContext, member: Blob, where: str) -> list[Finding]:
    """Judge one TorchScript source file (bounded, never executed)."""
    try:
        data = read_bounded(member, MAX_SOURCE_BYTES, "max_torchscript_source_bytes")
    except LimitHit as hit:
        return [hit.finding(member.name)]
    ctx.check_deadline()
    return source_text_findings(member.name, data, where)


def source_text_findings(path: str, data: bytes, where: str) -> list[Finding]:
    """``source_findings`` for source already in memory."""
    try:
        ops = list(source_operators(data.decode("utf-8"), where))
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return [UNREADABLE.finding(path, f"TorchScript source {where} cannot be parsed "
                                   f"({type(exc).__name__})", where)]
    return judge(path, ops)


# -- bytecode.pkl ---------------------------------------------------------------------


def bytecode_findings(ctx: ScanContext, member: Blob) -> list[Finding]:
    """Judge the operator tables of a lite-interpreter ``bytecode.pkl``, read by the
    symbolic pickle machine (its own findings come from the pickle analyzer). The value
    is ``(version, (qualified name, (("instructions", ...), ("operators", ((name,
    overload[, n_args]), ...)), ("constants", ...), ...), schema), ...)``
    (torch ``export_module.cpp``); every ``("operators", ...)`` pair is read."""
    from scanner.formats.pickle.values import Seq
    from scanner.formats.pickle.vm import Machine

    res = Machine(ctx, member, 0, persistent_ids=True).run()
    if not res.ok:
        return [UNREADABLE.finding(member.name, "bytecode.pkl is not a complete pickle: its "
                                   "operator table cannot be read", "bytecode.pkl")]
    ops: list[Op] = []
    stack: list[tuple[object, str]] = [(res.value, "bytecode.pkl")]
    while stack:
        value, where = stack.pop()
        if not isinstance(value, Seq) or value.kind not in ("tuple", "list"):
            continue
        items = value.items
        if items is None:
            return [UNREADABLE.finding(member.name, "bytecode.pkl is too large to keep its "
                                       "operator table", "bytecode.pkl")]
        if len(items) == 2 and items[0] == "operators":
            table = items[1]
            entries = table.items if isinstance(table, Seq) else None
            if entries is None:
                return [UNREADABLE.finding(member.name, f"the operator table of {where} is "
                                           "not a tuple", where)]
            for entry in entries:
                fields = entry.items if isinstance(entry, Seq) else None
                if not fields or not isinstance(fields[0], str):
                    return [UNREADABLE.finding(member.name, f"an operator of {where} is not "
                                               "a (name, overload) tuple", where)]
                ops.append((fields[0], f"bytecode.pkl {where}"))
            continue
        if items and isinstance(items[0], str) and items[0].startswith("__torch__"):
            where = items[0][:120]
        stack.extend((item, where) for item in items)
    return judge(member.name, ops)


def archive_member_findings(ctx: ScanContext, member: Blob, inner: str) -> list[Finding]:
    """Operator findings for a member of a TorchScript archive, ``inner`` being its name
    below the archive's top folder: ``bytecode.pkl`` and ``code/**.py``; others: []."""
    if inner == "bytecode.pkl":
        return bytecode_findings(ctx, member)
    if inner.startswith("code/") and inner.endswith(".py"):
        return source_findings(ctx, member, inner)
    return []
