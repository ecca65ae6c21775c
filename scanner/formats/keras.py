"""Keras analyzers: legacy HDF5 ``.h5`` files (without h5py) and Keras v3 ``config.json``.

Keras rebuilds a model from its JSON config. A ``Lambda`` layer (``function_type:
lambda``, or a ``__lambda__`` object in Keras 3) carries marshal'd Python bytecode that runs
on load (CVE-2024-3660; ``.h5`` loading ignores ``safe_mode``: CVE-2025-9905), and a
``module`` + ``class_name`` pair is imported by name, so a module outside Keras runs
arbitrary callables (safe_mode bypasses such as CVE-2025-1550). Lambda layers and
known-dangerous callables (``scanner.core.allowlist.classify``: ``os.system``,
``tensorflow.py_function`` ...) are malicious; a custom layer from a module nothing is
known about (``my_layers.MyDense``, issue 30) is ``keras.custom_object`` (policy).

HDF5 is not parsed: the file is streamed in 1 MiB windows (overlapping) and the JSON
``"key": "value"`` pairs of interest are decoded (escapes included) wherever they sit, so
the ``model_config`` attribute is found in any layout. Any HDF5 file is refused by policy.
"""

from __future__ import annotations

import builtins
import json
import re
from collections.abc import Iterator
from dataclasses import replace

from scanner.core.allowlist import DANGEROUS, classify
from scanner.core.blobview import SliceBlob, iter_chunks, read_bounded
from scanner.core.context import LimitHit, ScanContext
from scanner.core.model import Blob, Finding, Severity, Verdict
from scanner.core.rules import Rule, rule
from scanner.core.spec import Format, FormatSpec, Probe
from scanner.core.strict_json import JSONProblem, loads_strict

HDF5_NOT_ALLOWED = rule(
    "format.hdf5_not_allowed", Verdict.POLICY, Severity.MEDIUM,
    "HDF5 file (Keras .h5): not an allowed weight format",
    "Export the weights to safetensors; rebuild the architecture from trusted code.",
)
KERAS_LAMBDA = rule(
    "keras.lambda_layer", Verdict.MALICIOUS, Severity.CRITICAL,
    "Keras Lambda layer: marshal'd Python bytecode runs when the model is loaded "
    "(CVE-2024-3660, CVE-2025-9905)",
    "Do not load this model; replace Lambda layers by registered custom layers in trusted code.",
)
KERAS_UNSAFE_OBJECT = rule(
    "keras.unsafe_object", Verdict.MALICIOUS, Severity.CRITICAL,
    "Keras config imports a known-dangerous object from outside Keras (runs commands or "
    "code, file or network I/O) or a Keras function that downloads, unpickles or disables "
    "safe mode (CVE-2025-1550 class)",
    "Do not load this model; configs must reference Keras objects only.",
)
KERAS_CUSTOM_OBJECT = rule(
    "keras.custom_object", Verdict.POLICY, Severity.HIGH,
    "Keras config imports a custom object (layer, loss, ...) from a module outside Keras "
    "that is not a known-dangerous callable: the loader imports that module (code of the "
    "serving environment), but nothing shows that it runs commands or code",
    "Export the weights to safetensors and rebuild the architecture from trusted code; "
    "review the custom module before loading.",
)
KERAS_CONFIG_INVALID = rule(
    "keras.config_invalid", Verdict.MALFORMED, Severity.HIGH,
    "Keras config.json is not valid JSON",
    "Re-save the model with Keras; do not load this file.",
)

ALLOWED_MODULES = ("keras", "keras_hub", "keras_nlp", "keras_cv", "tf_keras")
LAMBDA_CLASSES = {"Lambda", "__lambda__"}
# Keras objects that load pickles, fetch files or turn safe mode off.
UNSAFE_NAMES = {"TorchModuleWrapper", "get_file", "enable_unsafe_deserialization",
                "load_model", "load_weights"}
MAX_NODES = 1_000_000
_PAIR = re.compile(
    rb'"((?:[^"\\\x00-\x1f]|\\.){1,64})"\s{0,256}:\s{0,256}"((?:[^"\\\x00-\x1f]|\\.){0,256})"')
# Safety net for pairs split by unusual whitespace: the bare marker strings themselves.
_MARKERS = re.compile(rb'"(Lambda|__lambda__)"')
_HINTS = (b"class_name", b"function_type", b'"module"', b"\\u", b"ambda")
OVERLAP = 4096


# TensorFlow's own copies of Keras (tf.keras in TF 2.x, the pre-2.6 in-tree Keras).
TF_KERAS = ("tensorflow.keras", "tensorflow.python.keras")
# TensorFlow value classes a config may name (shapes, specs, dtypes): data, never code.
TF_VALUE_CLASSES = frozenset({
    "TensorShape", "TensorSpec", "DType", "RaggedTensorSpec", "SparseTensorSpec",
    "IndexedSlicesSpec", "BoundedTensorSpec"})
# tf.keras records TensorFlow ops called on Keras tensors as TFOpLambda /
# SlicingOpLambda layers whose ``function`` names the op (``math.add``,
# ``__operators__.getitem``); Keras rebuilds them with ``getattr`` on the ``tf`` module.
OP_LAMBDA_CLASSES = frozenset({"TFOpLambda", "SlicingOpLambda"})
# Op namespaces that compute on tensors only (no files, no Python callbacks, no loading).
SAFE_OP_NAMESPACES = ("math.", "nn.", "linalg.", "__operators__.", "bitwise.", "signal.",
                      "image.resize", "random.", "experimental.numpy.")
SAFE_OPS = frozenset({
    "reshape", "concat", "stack", "unstack", "expand_dims", "squeeze", "transpose", "cast",
    "identity", "shape", "split", "gather", "gather_nd", "where", "tile", "matmul",
    "clip_by_value", "pad", "range", "zeros_like", "ones_like", "zeros", "ones", "fill",
    "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "broadcast_to",
    "one_hot", "slice", "strided_slice", "add", "subtract", "multiply", "divide", "maximum",
    "minimum", "abs", "exp", "sqrt", "square", "pow", "einsum", "argmax", "argmin",
    "sort", "argsort", "cumsum", "rank", "size", "boolean_mask", "sequence_mask", "norm",
    "stop_gradient", "ensure_shape", "convert_to_tensor", "roll", "repeat", "meshgrid",
})


def module_allowed(module: str, cls: object = None) -> bool:
    """True for ``keras`` and the Keras family packages (``keras.src.layers`` ...),
    TensorFlow's copies of Keras (``tensorflow.keras.layers`` ...), and a TensorFlow
    value class (``TensorShape``, ``TensorSpec``, ``DType`` ...) named ``cls``."""
    if module.split(".", 1)[0] in ALLOWED_MODULES:
        return True
    if any(module == m or module.startswith(m + ".") for m in TF_KERAS):
        return True
    return module.split(".", 1)[0] == "tensorflow" and cls in TF_VALUE_CLASSES


def op_allowed(function: str) -> bool:
    """A TFOpLambda ``function`` (the op's path below ``tf``) that only computes on
    tensors (``math.add``, ``reshape``, ``__operators__.getitem``); no part may be
    private or a dunder (``math.add.__globals__``)."""
    name = function[3:] if function.startswith("tf.") else function
    if name.startswith("compat.v1."):
        name = name[len("compat.v1."):]
    parts = name.split(".")
    return (name in SAFE_OPS or name.startswith(SAFE_OP_NAMESPACES)) and all(
        part.isidentifier() and (not part.startswith("_") or part == "__operators__")
        for part in parts)


# Names of Python's own builtins (exec, eval, open ...): older Keras versions resolved
# module "builtins" through Python, so these stay unsafe.
_PY_BUILTINS = frozenset(dir(builtins))


def _keras_builtin_function(obj: dict[str, object]) -> bool:
    """``{"module": "builtins", "class_name": "function", "config": "mae"}``: Keras 3 looks
    such a name up only in its own modules (activations, losses, metrics, ...;
    ``serialization_lib._retrieve_class_or_fn``), never in Python's ``builtins``."""
    config = obj.get("config")
    return (obj.get("module") == "builtins" and obj.get("class_name") == "function"
            and isinstance(config, str) and config.isidentifier()
            and config not in UNSAFE_NAMES and config not in _PY_BUILTINS)


def _dangerous(module: str, cls: str) -> bool:
    """Whether ``module`` + ``class_name`` is evidence (``scanner.core.allowlist.
    classify``: known-dangerous modules and names, attribute walks, the standard
    library); an unknown custom module is ``keras.custom_object`` (policy)."""
    if not module or not all(p.isidentifier() for p in module.split(".")):
        return True
    return classify(module, cls).tier == DANGEROUS


def _judge(obj: dict[str, object]) -> Iterator[tuple[Rule, str]]:
    """(rule, evidence) for one JSON object of a Keras config."""
    cls, module = obj.get("class_name"), obj.get("module")
    if cls in LAMBDA_CLASSES or obj.get("function_type") == "lambda":
        yield KERAS_LAMBDA, f"class_name={cls!r}"
    if (isinstance(cls, str) and isinstance(module, str) and not module_allowed(module, cls)
            and not _keras_builtin_function(obj)):
        evidence = f"module={module[:100]!r} class_name={cls[:100]!r}"
        yield (KERAS_UNSAFE_OBJECT if _dangerous(module, cls) else KERAS_CUSTOM_OBJECT,
               evidence)
    if cls in OP_LAMBDA_CLASSES and "config" in obj:  # (a bare class_name pair: no config)
        inner = obj.get("config")
        function = inner.get("function") if isinstance(inner, dict) else None
        if not (isinstance(function, str) and op_allowed(function)):
            yield KERAS_UNSAFE_OBJECT, f"{cls} function={str(function)[:100]!r}"
    config = obj.get("config")
    for name in (cls, config if cls == "function" else None):
        if isinstance(name, str) and name in UNSAFE_NAMES:
            yield KERAS_UNSAFE_OBJECT, f"{name!r}"


def analyze_keras_config(ctx: ScanContext, path: str, data: bytes) -> list[Finding]:
    """Findings for a Keras v3 ``config.json`` (bytes of the archive member at ``path``):
    Lambda layers and objects imported from outside Keras; invalid JSON is malformed."""
    try:
        root = loads_strict(data, max_depth=256)
    except JSONProblem as exc:
        return [KERAS_CONFIG_INVALID.finding(path, str(exc), offset=exc.offset)]
    found: dict[tuple[str, str], Finding] = {}
    stack: list[object] = [root]
    nodes = 0
    while stack:
        node = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise LimitHit("keras config nodes", MAX_NODES)
        if isinstance(node, dict):
            for rule_, evidence in _judge(node):
                found.setdefault((rule_.id, evidence), rule_.finding(
                    path, f"{rule_.title.split(':')[0]}: {evidence}", evidence=evidence))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return list(found.values())


# Base names (lower case) of JSON files that Keras deserializes with
# ``deserialize_keras_object`` when handed the folder that holds them:
# ``keras.saving.load_model(dir)`` (keras/src/saving/saving_api.py ``is_keras_dir``: a
# directory with a ``config.json``; ``hf://`` repositories after ``snapshot_download``) ->
# saving_lib ``_load_model_from_dir`` reads ``config.json`` and builds the model from it
# before any weights are read; ``metadata.json`` is not required. keras_hub ``from_preset``
# deserializes ``config.json`` and its ``task.json``, ``preprocessor.json``,
# ``image_converter.json`` and ``audio_converter.json`` the same way.
_PRESET = "keras_hub from_preset"
FOLDER_CONFIG_NAMES: dict[str, str] = {  # base name -> the loaders named in findings
    "config.json": f"keras.saving.load_model (model folder), {_PRESET}",
    **dict.fromkeys(("task.json", "preprocessor.json", "image_converter.json",
                     "audio_converter.json"), _PRESET)}
# ``deserialize_keras_object`` builds an object only from a dict that has a
# ``class_name`` key (a dict without one is walked value by value): a document whose bytes
# never spell that key, neither plainly nor with a ``\u`` escape of an ASCII character
# (0x40-0x7f: letters, ``_``), holds nothing Keras imports or runs. A transformers
# config.json pays these two byte searches only.
_CLASS_NAME = b"class_name"
_ASCII_ESCAPE = re.compile(rb"\\u00[4-7][0-9A-Fa-f]")


def keras_folder_config(ctx: ScanContext, rel: str, blob: Blob) -> list[Finding]:
    """Findings for a file of a scanned folder as Keras's folder loaders read it: a
    ``FOLDER_CONFIG_NAMES`` file whose bytes may spell a ``class_name`` key is judged by
    ``analyze_keras_config`` (the analysis of a ``.keras`` zip's ``config.json``), each
    message naming the loader; any other file, or a document that cannot hold a Keras
    object, gives ``[]``. Raises ``LimitHit`` for a file over ``max_json_bytes`` or a
    config over ``MAX_NODES`` nodes (the caller reports it)."""
    loader = FOLDER_CONFIG_NAMES.get(rel[rel.rfind("/") + 1:].lower())
    if loader is None:
        return []
    data = read_bounded(blob, ctx.limits.max_json_bytes, "max_json_bytes")
    if _CLASS_NAME not in data and _ASCII_ESCAPE.search(data) is None:
        return []
    prefix = f"read by {loader} as Keras config: "
    return [replace(f, message=prefix + f.message) for f in analyze_keras_config(ctx, rel, data)]


def _decode(raw: bytes) -> str | None:
    try:
        value = json.loads(b'"' + raw + b'"')
    except ValueError:
        return None
    return value if isinstance(value, str) else None


class _Pairs:
    """Pairs each ``class_name`` with the ``module`` next to it (either order), as Keras
    imports them together; ``config`` is read for ``class_name: function`` objects."""

    def __init__(self) -> None:
        self.module: str | None = None
        self.cls: str | None = None
        self.paired = False

    def objects(self, key: str, value: str) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        if key == "module":
            if self.cls is not None and not self.paired:
                out.append({"class_name": self.cls, "module": value})
                self.paired = True
            else:
                self.module = value
        elif key == "class_name":
            self.cls, self.paired = value, False
            out.append({"class_name": value})
            if self.module is not None:
                out.append({"class_name": value, "module": self.module})
                self.module, self.paired = None, True
        elif key == "config":
            if self.cls == "function":
                out.append({"class_name": "function", "config": value})
        elif key == "function_type":
            out.append({key: value})
        elif key == "function" and self.cls in OP_LAMBDA_CLASSES:
            out.append({"class_name": self.cls, "config": {"function": value}})
        return out


def _scan_pairs(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Keras config ``"key": "value"`` pairs anywhere in the file, decoded."""
    found: dict[tuple[str, str], Finding] = {}
    markers: dict[str, Finding] = {}
    pairs = _Pairs()
    for base, chunk in iter_chunks(blob, overlap=OVERLAP):
        ctx.check_deadline()
        if not any(h in chunk for h in _HINTS):
            continue
        for m in _MARKERS.finditer(chunk):
            evidence = f"string {m.group(1).decode()!r}"
            markers.setdefault(evidence, KERAS_LAMBDA.finding(
                blob.name, f"Keras Lambda marker {evidence}", evidence=evidence,
                offset=base + m.start()))
        for m in _PAIR.finditer(chunk):
            key, value = _decode(m.group(1)), _decode(m.group(2))
            if key is None or value is None:
                continue
            for obj in pairs.objects(key, value):
                for rule_, evidence in _judge(obj):
                    found.setdefault((rule_.id, evidence), rule_.finding(
                        blob.name, f"{rule_.title.split(':')[0]}: {evidence}",
                        evidence=evidence, offset=base + m.start()))
    if not any(rule_id == KERAS_LAMBDA.id for rule_id, _ in found):
        found.update(((KERAS_LAMBDA.id, e), f) for e, f in markers.items())
    return list(found.values())


HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"  # superblock signature (HDF5 file format spec, II.A)
HDF5_MAX_USERBLOCK = 1 << 30


def hdf5_superblock(blob: Blob) -> int | None:
    """Offset of the HDF5 superblock: 0, 512, 1024, 2048, ... (HDF5 spec, userblock)."""
    offset = 0
    while offset + 8 <= blob.size and offset <= HDF5_MAX_USERBLOCK:
        if blob.read_at(offset, 8) == HDF5_MAGIC:
            return offset
        offset = 512 if offset == 0 else offset * 2
    return None


def _userblock(ctx: ScanContext, blob: Blob, superblock: int) -> list[Finding]:
    """Bytes before a superblock at 512, 1024, ... form the HDF5 user block: a loader that
    reads from offset 0 (pickle, zip, ...) sees them, so non-zero user blocks are analysed."""
    for _, chunk in iter_chunks(blob, 0, superblock):
        if chunk.strip(b"\x00"):
            return ctx.analyze(SliceBlob(f"{blob.name}!<userblock>", blob, 0, superblock))
    return []


def analyze_hdf5(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Findings for an HDF5 blob: always ``format.hdf5_not_allowed``; Keras Lambda layers
    and non-Keras objects in the model config anywhere in the file; a non-empty user block
    is analysed as a nested blob. Never raises for bad input."""
    findings = [HDF5_NOT_ALLOWED.finding(blob.name, HDF5_NOT_ALLOWED.title)]
    try:
        superblock = hdf5_superblock(blob) or 0
        if superblock:
            findings += _userblock(ctx, blob, superblock)
        findings += _scan_pairs(ctx, blob)
    except LimitHit as hit:
        findings.append(hit.finding(blob.name))
    return findings


HDF5 = Format("hdf5")  # Keras .h5
SPECS = (FormatSpec(
    HDF5, analyze_hdf5, order=20, magic=(HDF5_MAGIC,), name_hints=(".h5", ".hdf5"),
    claims=(".h5", ".hdf5"),
    probes=(Probe(90, lambda h: hdf5_superblock(h.blob) is not None),),  # after a user block
),)
