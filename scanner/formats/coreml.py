"""Core ML models, analysed without coremltools: ``.mlmodel`` protobufs, the
``Manifest.json`` of an ``.mlpackage`` folder and its MIL weight blob (``weight.bin``).

- ``.mlmodel`` (apple/coremltools mlmodel/format/Model.proto): walked with
  ``scanner.formats.protowire`` through pipelines (Pipeline.models(1), PipelineClassifier/
  Regressor.pipeline(1)) and neural networks (NeuralNetwork/Classifier/Regressor.layers(1),
  branch(605) and loop(615) sub-networks). A custom layer (NeuralNetworkLayer.custom(500))
  or a custom model (Model.customModel(555)) makes Core ML instantiate the class its
  ``className`` names (code outside the model, chosen by the file):
  ``coreml.custom_code`` (malicious). A linked model (Model.linkedModel(556)) loads
  another compiled model by file name from a search path: ``coreml.path_escape``
  (malicious) when a name or search path is absolute or leaves the folder, else
  ``coreml.linked_model`` (policy: that file is judged on its own).
- ``Manifest.json`` (``fileFormatVersion``, ``itemInfoEntries``, ``rootModelIdentifier``):
  every item ``path`` (relative to the package's ``Data/``) must stay inside it
  (``coreml.path_escape``).
- ``weight.bin`` (MIL blob storage v2: 64-byte header ``count``, ``version = 2``; blob
  metadata starting with the 0xDEADBEEF sentinel): the first record's data must lie in
  the file.
Every Core ML file is at least ``format.coreml_not_allowed`` (policy). Unparseable
structure is ``coreml.malformed``.
"""

from __future__ import annotations

from scanner.core.archive import reference_escapes
from scanner.core.context import ScanContext
from scanner.core.model import Blob, BytesBlob, Finding, Severity, Verdict
from scanner.core.rules import rule
from scanner.core.spec import Format, FormatSpec, Probe
from scanner.core.strict_json import JSONProblem, loads_strict
from scanner.formats.protowire import LEAF, ProtoError, Reader, walk_findings

V, S = Verdict, Severity

COREML_NOT_ALLOWED = rule(
    "format.coreml_not_allowed", V.POLICY, S.MEDIUM,
    "Core ML model (.mlmodel, .mlpackage): not an allowed format",
    "Export the weights to safetensors.",
)
COREML_MALFORMED = rule(
    "coreml.malformed", V.MALFORMED, S.HIGH,
    "Core ML protobuf, package manifest or weight blob cannot be parsed",
    "Re-export the model with coremltools; do not load this file.",
)
COREML_CUSTOM_CODE = rule(
    "coreml.custom_code", V.MALICIOUS, S.HIGH,
    "Core ML custom layer or custom model: the runtime instantiates the class the file names",
    "Do not load this model; rebuild it from built-in layers only.",
)
COREML_PATH_ESCAPE = rule(
    "coreml.path_escape", V.MALICIOUS, S.CRITICAL,
    "Core ML linked model or package item path is absolute or leaves the model folder",
    "Reference only files inside the model package by relative names without '..'.",
)
COREML_LINKED = rule(
    "coreml.linked_model", V.POLICY, S.MEDIUM,
    "Core ML linked model: loads another compiled model by file name at run time",
    "Ship a self-contained model.",
)

(MODEL, PIPE_WRAP, PIPELINE, NN, LAYER, CUSTOM_LAYER, BRANCH, LOOP, CUSTOM_MODEL, LINKED,
 LINKED_FILE, LINK_NAME, LINK_PATH) = range(13)
_SCHEMA: dict[int, dict[int, int]] = {
    MODEL: {1: LEAF, 200: PIPE_WRAP, 201: PIPE_WRAP, 202: PIPELINE, 303: NN, 403: NN,
            500: NN, 555: CUSTOM_MODEL, 556: LINKED},
    PIPE_WRAP: {1: PIPELINE},
    PIPELINE: {1: MODEL},
    NN: {1: LAYER},
    LAYER: {1: LEAF, 500: CUSTOM_LAYER, 605: BRANCH, 615: LOOP},
    CUSTOM_LAYER: {10: LEAF},
    BRANCH: {1: NN, 2: NN},
    LOOP: {3: NN, 4: NN},
    CUSTOM_MODEL: {10: LEAF},
    LINKED: {1: LINKED_FILE},
    LINKED_FILE: {1: LINK_NAME, 2: LINK_PATH},
    LINK_NAME: {1: LEAF},
    LINK_PATH: {1: LEAF},
}
# ModelDescription's first field tags: input(1), output(10), predictedFeatureName(11),
# predictedProbabilitiesName(12), trainingInput(50), metadata(100)
_DESCRIPTION_TAGS = (b"\x0a", b"\x52", b"\x5a", b"\x62", b"\x92\x03", b"\xa2\x06")
# Model.Type oneof field numbers (Model.proto: pipelines 200-202, regressors 300-304,
# classifiers 400-404, generic 500-502, custom/linked 555/556, 560, feature engineering
# 600-610, identity 900, Core ML provided models 2000-2006, serializedModel 3000)
_TYPE_FIELDS = frozenset([*range(200, 203), *range(300, 305), *range(400, 405),
                          *range(500, 503), 555, 556, 560, *range(600, 611), 900,
                          *range(2000, 2007), 3000])
MIL_SENTINEL = b"\xef\xbe\xad\xde"
MAX_MANIFEST = 1 << 20
MAX_FINDINGS = 32


def _name(name: str) -> str:
    return name.rsplit("!", 1)[-1].rsplit("/", 1)[-1]


def _is_model(head: bytes, blob: Blob) -> bool:
    """``specificationVersion`` (1..16), a ModelDescription, then isUpdatable(10) or a
    model type field. (A TF SavedModel also starts ``08 01 12``: its MetaGraphDef is
    followed by another MetaGraphDef (field 2) or the end of the file, never by these.)"""
    if len(head) < 4 or head[0] != 0x08 or not 1 <= head[1] <= 16 or head[2] != 0x12:
        return False
    reader = Reader(BytesBlob("", head))
    try:
        length, pos = reader.varint(3)
    except ProtoError:
        return False
    if not head[pos:].startswith(_DESCRIPTION_TAGS) or pos + length > blob.size:
        return False
    after = pos + length
    try:
        tag, _ = Reader(BytesBlob("", blob.read_at(after, 8))).varint(0)
    except ProtoError:
        return False
    return tag == 0x50 or (tag & 7 == 2 and tag >> 3 in _TYPE_FIELDS)


def _is_weights(head: bytes) -> bool:
    return len(head) >= 128 and head[4:8] == b"\x02\x00\x00\x00" and \
        head[64:68] == MIL_SENTINEL


def looks_like_coreml(head: bytes, blob: Blob) -> bool:
    """Sniff (content): an ``.mlmodel`` protobuf or a MIL weight blob."""
    return _is_model(head, blob) or _is_weights(head)


def looks_like_manifest(name: str, head: bytes) -> bool:
    """Sniff (place and content): an ``.mlpackage`` ``Manifest.json``."""
    return _name(name) == "Manifest.json" and b'"itemInfoEntries"' in head and \
        b'"rootModelIdentifier"' in head


class _Model:
    """Visitor: custom classes, linked model names, counts."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.findings: list[Finding] = []
        self.models = self.layers = 0
        self.layer = ""
        self.link_name, self.link_paths = "", ""

    def add(self, finding: Finding) -> None:
        if len(self.findings) < MAX_FINDINGS:
            self.findings.append(finding)

    def open(self, kind: int) -> None:
        if kind == MODEL:
            self.models += 1
        elif kind == LAYER:
            self.layers += 1
            self.layer = ""
        elif kind == LINKED_FILE:
            self.link_name, self.link_paths = "", ""

    def leaf(self, kind: int, field: int, value: bytes | int, offset: int) -> None:
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        if kind == LAYER:
            self.layer = text[:200]
        elif kind == CUSTOM_LAYER:
            self.add(COREML_CUSTOM_CODE.finding(
                self.path, f"custom layer {self.layer!r} instantiates class {text[:200]!r}",
                evidence=text[:300], offset=offset))
        elif kind == CUSTOM_MODEL:
            self.add(COREML_CUSTOM_CODE.finding(
                self.path, f"custom model instantiates class {text[:200]!r}",
                evidence=text[:300], offset=offset))
        elif kind == LINK_NAME:
            self.link_name = text
        elif kind == LINK_PATH:
            self.link_paths = text

    def close(self, kind: int) -> None:
        if kind != LINKED_FILE:
            return
        refs = [self.link_name] + [p for p in self.link_paths.split(":") if p]
        for ref in refs:
            why = reference_escapes(ref)
            if why is not None:
                self.add(COREML_PATH_ESCAPE.finding(
                    self.path, f"linked model reference {ref[:200]!r} ({why})",
                    evidence=ref[:300]))
                return
        self.add(COREML_LINKED.finding(
            self.path, f"linked model {self.link_name[:200]!r}", evidence=self.link_name[:300]))


def _model(ctx: ScanContext, blob: Blob) -> list[Finding]:
    visitor = _Model(blob.name)
    out = walk_findings(ctx, blob, _SCHEMA, MODEL, visitor, COREML_MALFORMED, "Core ML")
    return [COREML_NOT_ALLOWED.finding(
        blob.name, f"Core ML model ({visitor.models} models, {visitor.layers} "
        "neural network layers)")] + visitor.findings + out


def _weights(blob: Blob) -> list[Finding]:
    out = [COREML_NOT_ALLOWED.finding(blob.name, "Core ML MIL weight blob")]
    meta = blob.read_at(64, 64)
    size = int.from_bytes(meta[8:16], "little")
    offset = int.from_bytes(meta[16:24], "little")
    count = int.from_bytes(blob.read_at(0, 4), "little")
    if count < 1 or len(meta) < 64 or offset < 128 or offset + size > blob.size:
        out.append(COREML_MALFORMED.finding(
            blob.name, f"weight blob record (offset {offset}, {size} bytes, {count} "
            "records) does not fit in the file", offset=64))
    return out


def _manifest(ctx: ScanContext, blob: Blob) -> list[Finding]:
    from scanner.core.blobview import read_bounded
    from scanner.formats.text import analyze_json

    out = [COREML_NOT_ALLOWED.finding(blob.name, "Core ML package manifest")]
    out += analyze_json(ctx, blob)
    try:
        doc = loads_strict(read_bounded(blob, MAX_MANIFEST, "coreml manifest bytes"))
    except JSONProblem:
        return out  # json.invalid reported by analyze_json
    entries = doc.get("itemInfoEntries") if isinstance(doc, dict) else None
    if not isinstance(entries, dict):
        return out + [COREML_MALFORMED.finding(blob.name, "itemInfoEntries is not an object",
                                               "/itemInfoEntries")]
    for key, item in entries.items():
        path = item.get("path") if isinstance(item, dict) else None
        ptr = f"/itemInfoEntries/{key}/path"
        if not isinstance(path, str):
            out.append(COREML_MALFORMED.finding(blob.name, "package item has no path", ptr))
            continue
        why = reference_escapes(path)
        if why is not None:
            out.append(COREML_PATH_ESCAPE.finding(
                blob.name, f"package item path {path[:200]!r} ({why})", f"{ptr}: {path[:200]}"))
    return out


def analyze_coreml(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Findings for a Core ML blob (see the module docstring)."""
    head = blob.read_at(0, 128)
    if looks_like_manifest(blob.name, blob.read_at(0, 4096)):
        return _manifest(ctx, blob)
    if _is_weights(head):
        return _weights(blob)
    return _model(ctx, blob)


COREML = Format("coreml")  # .mlmodel protobuf, .mlpackage Manifest.json, MIL weight.bin
SPECS = (FormatSpec(
    COREML, analyze_coreml, name_hints=(".mlmodel",), binary=False,
    # A package's Manifest.json by its name and content (before every content test).
    probes=(Probe(1, lambda h: looks_like_manifest(h.name, h.head), by_name=True),
            Probe(115, lambda h: looks_like_coreml(h.head, h.blob))),
),)
