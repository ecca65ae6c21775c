"""JSON settings that name Python code a serving stack runs when it loads the model.

Checked where each tool reads them, on every JSON document's parsed root (a constant-time
look at fixed places, never a walk: these names are ordinary tokenizer vocabulary words,
so watching them as keys would walk every tokenizer.json):

- ``handler`` / ``modelFile`` / ``model_file`` at the root or under ``model`` (TorchServe
  ``MAR-INF/MANIFEST.json``, Hugging Face Inference Endpoints), ``entry_point`` /
  ``entrypoint`` / ``sagemaker_program`` at the root or under ``hyperparameters`` (SageMaker
  inference and training scripts), ``loader_module`` under ``flavors.python_function``
  (MLflow) or at the root: a value
  naming a Python file (``*.py``) or a ``module:callable`` / dotted ``module.callable``
  reference is code the loader imports and runs. TorchServe's built-in handler names
  (``image_classifier`` ...) are not code from the model. In TorchServe's own
  ``MAR-INF/MANIFEST.json`` a handler or model file named as a plain file of the archive
  (``handler.py``, ``my_handler:handle``) is ``config.code_reference_shipped`` (policy):
  it is code of the archive, analysed like every ``.py`` in it (its own findings decide;
  issue 30, a TorchServe ``.mar`` with a custom handler);
- diffusers ``model_index.json`` (``_diffusers_version``): a component written ``[library,
  class]`` whose library is not one diffusers imports by name (``diffusers``,
  ``transformers`` ...) is loaded from a module shipped with the model (custom component,
  ``trust_remote_code``), and so is a ``_class_name`` given as ``[module, class]``.

Sources: TorchServe ``model-archiver`` manifest format; SageMaker Python SDK
(``entry_point``, ``sagemaker_program``); MLflow ``MLmodel`` ``python_function`` flavour;
diffusers ``DiffusionPipeline.from_pretrained`` (``custom_pipeline``, custom components).
"""

from __future__ import annotations

import re

from scanner.core.model import Finding, Severity, Verdict
from scanner.core.rules import rule

CODE_REFERENCE = rule(
    "config.code_reference", Verdict.MALICIOUS, Severity.CRITICAL,
    "A serving or inference config names Python code that runs when the model is loaded "
    "(handler, entry point, model file, loader module, custom pipeline component)",
    "Remove the code reference; serve the weights with the appliance's built-in engine.",
)

CODE_SHIPPED = rule(
    "config.code_reference_shipped", Verdict.POLICY, Severity.HIGH,
    "A TorchServe MAR-INF/MANIFEST.json names a handler or model file shipped inside the "
    "archive: code that runs when the model is loaded, analysed as Python source where "
    "it is present (its own findings decide; no evidence from the reference alone)",
    "Remove the handler; serve the weights with the appliance's built-in engine.",
)
# TorchServe's manifest (model-archiver): the handler / model file it names is a file of
# the archive itself (extracted and imported from the model directory)
TORCHSERVE_MANIFEST = "MANIFEST.json"
_SHIPPED = re.compile(r"[A-Za-z_][\w-]*\.py|[A-Za-z_]\w*(?::[A-Za-z_]\w*)?")

KEYS = frozenset({"handler", "entry_point", "entrypoint", "sagemaker_program", "model_file",
                  "modelFile", "loader_module"})
DIFFUSERS_KEY = "_diffusers_version"
# TorchServe's default handlers (ts/torch_handler): shipped with the server, not the model.
BUILTIN_HANDLERS = frozenset({"image_classifier", "image_segmenter", "object_detector",
                              "text_classifier", "text_classification"})
# Libraries diffusers imports components from by name (LOADABLE_CLASSES and peers).
DIFFUSERS_LIBRARIES = frozenset({"diffusers", "transformers", "onnxruntime.training",
                                 "optimum", "peft", "torch", "flax"})
_REFERENCE = re.compile(r"[A-Za-z_][\w.]*[:.][A-Za-z_]\w*")


def _names_code(value: str) -> bool:
    text = value.strip()
    if text in BUILTIN_HANDLERS:
        return False
    return text.endswith(".py") or ("/" not in text and _REFERENCE.fullmatch(text) is not None
                                    and not text.endswith((".json", ".bin", ".pt", ".pth",
                                                           ".onnx", ".safetensors", ".txt")))


# (pointer of the object, keys read there)
PLACES: tuple[tuple[tuple[str, ...], frozenset[str]], ...] = (
    ((), KEYS),
    (("model",), frozenset({"handler", "modelFile", "model_file"})),
    (("hyperparameters",), frozenset({"sagemaker_program", "entry_point"})),
    (("flavors", "python_function"), frozenset({"loader_module"})),
)


def key_findings(path: str, ptr: str, key: str, value: object) -> list[Finding]:
    """``config.code_reference`` for ``key: value`` at pointer ``ptr`` when the value
    names Python code (see the module docstring)."""
    if not isinstance(value, str) or not _names_code(value):
        return []
    if (path.rpartition("/")[2].rpartition("!")[2] == TORCHSERVE_MANIFEST
            and ptr in ("/model/handler", "/model/modelFile")
            and _SHIPPED.fullmatch(value.strip())):
        return [CODE_SHIPPED.finding(
            path, f"{key} at {ptr} names code shipped in the archive that the loader runs: "
            f"{value[:120]!r} (the file itself is analysed)", f"{ptr}: {value}"[:300])]
    return [CODE_REFERENCE.finding(
        path, f"{key} at {ptr} names code the loader runs: {value[:120]!r}",
        f"{ptr}: {value}"[:300])]


def document_findings(path: str, doc: object) -> list[Finding]:
    """Every code reference of ``doc`` at the places the tools read (``PLACES``), and a
    diffusers ``model_index.json`` at the root."""
    if not isinstance(doc, dict):
        return []
    out: list[Finding] = []
    for where, keys in PLACES:
        node: object = doc
        for part in where:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            ptr = "".join(f"/{part}" for part in where)
            for key in keys & node.keys():
                out += key_findings(path, f"{ptr}/{key}", key, node[key])
    if DIFFUSERS_KEY in doc:
        out += diffusers_findings(path, "", doc)
    return out


def diffusers_findings(path: str, ptr: str, doc: dict[str, object]) -> list[Finding]:
    """Custom components and pipeline classes of a diffusers ``model_index.json``."""
    out: list[Finding] = []
    for name, value in doc.items():
        if not (isinstance(value, list) and len(value) == 2
                and all(isinstance(v, str) or v is None for v in value)):
            continue
        library = value[0]
        if name == "_class_name" or (library is not None
                                     and library.split(".")[0] not in DIFFUSERS_LIBRARIES):
            out.append(CODE_REFERENCE.finding(
                path, f"component {name!r} at {ptr} is loaded from module {library!r} shipped "
                "with the model (custom diffusers code)", f"{ptr}/{name}: {value}"[:300]))
    return out
