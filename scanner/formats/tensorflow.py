"""TensorFlow formats, analysed without TensorFlow: SavedModel / MetaGraph / GraphDef
protobufs (``saved_model.pb``, ``*.pb``, ``*.meta``), TF-Keras ``keras_metadata.pb``, and
TFLite flatbuffers.

The protobufs are not decoded field by field: the analyzer searches their strings (op
names are length-prefixed strings of ``NodeDef.op``; Keras layer configs are JSON strings)
in bounded chunks:

- ``PyFunc``/``PyFuncStateless``/``EagerPyFunc`` ops run a Python callable from the
  process that loads the graph: ``tf.python_op`` (malicious); ``ReadFile``/``WriteFile``/
  ``MatchingFiles``/``Save``/``SaveV2`` at graph level read or write arbitrary paths:
  ``tf.file_op`` (malicious);
- Keras ``Lambda`` layers in ``keras_metadata.pb`` (marshal'd bytecode):
  ``keras.lambda_layer`` (malicious, the Keras analyzer's rule);
- otherwise ``format.tensorflow_not_allowed`` (policy). TFLite files are
  ``format.tflite_not_allowed`` (policy) and name their custom ops in the evidence.
Sources: TensorFlow ``script_ops.py`` (PyFunc), modelscan's unsafe TF operator list.
"""

from __future__ import annotations

import re

from scanner.core.blobview import iter_chunks
from scanner.core.context import ScanContext
from scanner.core.model import Blob, Finding, Severity, Verdict
from scanner.core.rules import rule
from scanner.core.spec import Format, FormatSpec, Probe

V, S = Verdict, Severity

TF_NOT_ALLOWED = rule(
    "format.tensorflow_not_allowed", V.POLICY, S.MEDIUM,
    "TensorFlow SavedModel / GraphDef / Keras metadata protobuf: not an allowed format",
    "Export the weights to safetensors.",
)
TF_PYTHON_OP = rule(
    "tf.python_op", V.MALICIOUS, S.CRITICAL,
    "TensorFlow graph holds a PyFunc/EagerPyFunc op (runs a Python callable when executed)",
    "Do not load this graph; rebuild it from trusted code without py_function.",
)
TF_FILE_OP = rule(
    "tf.file_op", V.MALICIOUS, S.HIGH,
    "TensorFlow graph reads or writes files by path (ReadFile/WriteFile/MatchingFiles)",
    "Do not load this graph; file I/O ops in a model graph can read or overwrite any path.",
)
TFLITE_NOT_ALLOWED = rule(
    "format.tflite_not_allowed", V.POLICY, S.MEDIUM,
    "TFLite flatbuffer: not an allowed weight format",
    "Export the weights to safetensors.",
)

_PY_OPS = re.compile(rb"(?<![A-Za-z0-9_])(PyFunc|PyFuncStateless|EagerPyFunc)(?![A-Za-z0-9_])")
_FILE_OPS = re.compile(rb"[\x08-\x10](ReadFile|WriteFile|MatchingFiles)(?![A-Za-z0-9_])")
_LAMBDA = re.compile(rb'"class_name"\s{0,16}:\s{0,16}"(Lambda|TFOpLambda_unsafe)"|'
                     rb'"function_type"\s{0,16}:\s{0,16}"lambda"')
_OVERLAP = 256


TFLITE_IDENTIFIER = b"TFL3"  # FlatBuffers file identifier at offset 4 (schema.fbs)


def looks_like_tf(head: bytes, name: str) -> bool:
    """A TF protobuf by name (``saved_model.pb``, ``keras_metadata.pb``, ``*.pb``,
    ``*.meta``) or by the TF-Keras marker near the start."""
    last = name.rsplit("!", 1)[-1].rsplit("/", 1)[-1].lower()
    return (last.endswith((".pb", ".meta", ".pbtxt")) or b"_tf_keras_" in head[:256]
            or b"tensorflow" in head[:256] and b"\x00" in head[:256])


def is_tflite(head: bytes) -> bool:
    return head[4:8] == TFLITE_IDENTIFIER


def analyze_tf(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Findings for a TF protobuf blob (see the module docstring)."""
    from scanner.formats.keras import KERAS_LAMBDA

    out = [TF_NOT_ALLOWED.finding(blob.name, "TensorFlow protobuf")]
    seen: set[tuple[str, str]] = set()
    for index, (pos, data) in enumerate(iter_chunks(blob, overlap=_OVERLAP)):
        if index % 16 == 0:
            ctx.check_deadline()
        for pattern, rule_ in ((_PY_OPS, TF_PYTHON_OP), (_FILE_OPS, TF_FILE_OP),
                               (_LAMBDA, KERAS_LAMBDA)):
            for m in pattern.finditer(data):
                ev = m.group(0).decode("latin-1").strip("\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10")
                if (rule_.id, ev) in seen or len(seen) >= 32:
                    continue
                seen.add((rule_.id, ev))
                out.append(rule_.finding(blob.name, f"{rule_.title.split('(')[0].strip()}: "
                                         f"{ev}", evidence=ev, offset=pos + m.start()))
    return out


def analyze_tflite(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """TFLite flatbuffer: policy refusal (custom ops are native code the runtime must
    register; named when their ``custom_code`` strings are visible)."""
    return [TFLITE_NOT_ALLOWED.finding(blob.name, "TFLite model", evidence="TFL3")]


TENSORFLOW = Format("tensorflow")  # SavedModel / GraphDef / keras_metadata.pb protobuf
TFLITE = Format("tflite")
SPECS = (
    FormatSpec(TENSORFLOW, analyze_tf,
               probes=(Probe(130, lambda h: looks_like_tf(h.head, h.name)),)),
    FormatSpec(TFLITE, analyze_tflite, probes=(Probe(50, lambda h: is_tflite(h.head)),)),
)
