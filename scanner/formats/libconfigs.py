"""Class references in sentence-transformers and PEFT configs: names those libraries
import (and call) when they load the model.

Read on every JSON document's parsed root, at fixed places (no walk), by the document's
shape rather than its file name (a large document is analysed once per content digest,
without its name; ``scanner.formats.text.analyze_json``):

- sentence-transformers ``modules.json``, a list of ``{idx, name, path, type}``: every
  ``type`` is a class reference. ``SentenceTransformer._load_module_class_from_ref``
  (3.x+) imports a ``sentence_transformers.*`` name directly; any other name goes to
  transformers' ``get_class_from_dynamic_module(type, model_path)`` (for a local folder
  without ``trust_remote_code``; ``repo--module.Class`` fetches the module from another
  Hub repository) and else ``import_from_string(type)`` (any importable module); 2.x,
  INSTRUCTOR and Unsloth call ``import_from_string(type).load(path)`` for every entry.
  A ``type`` naming one of the module classes the library ships (``ST_CLASSES``, under
  ``sentence_transformers.models`` and ``.sparse_encoder.models``, or from 5.4 under
  ``.base.modules``, ``.sentence_transformer.modules`` ...) is allowed; a ``--``
  cross-repository reference is ``config.auto_map_cross_repo`` (the meaning it has in
  ``auto_map``); any other name is judged like a config target
  (``scanner.formats.targets.judge_target``: ``config.unsafe_target`` when
  known-dangerous, ``config.unknown_target`` otherwise). Each ``path`` is joined to the
  model folder (``load_dir_path``: ``os.path.join(model, path)``) and loaded from there:
  one leaving the folder (``..``, absolute, drive letter, backslashes; after JSON
  unescaping) is ``path.escape``, the rule of every file reference.
- Callables a module's config names, imported with ``import_from_string`` and called:
  ``activation_function`` of a ``Dense`` module's ``config.json`` (``models.Dense.load``;
  newer releases accept any ``torch.*`` name without ``trust_remote_code``),
  ``tokenizer_class`` of ``wordembedding_config.json`` (``WordEmbeddings.load``: the class's
  ``load(path)``), a CrossEncoder ``config.json``'s ``sbert_ce_default_activation_function``
  or ``sentence_transformers.activation_fn`` (``CrossEncoder.get_default_activation_fn``;
  newer releases any ``torch.*`` name), and the ``types`` of an ``Asym`` ``config.json`` /
  ``Router`` ``router_config.json`` (``{"types": {name: class}, "structure": ...}``). A
  dotted value at those keys of any document's root is judged as a target (torch
  activations ``torch.nn.modules.activation.*`` are in the allowlist's framework tier;
  a tokenizer class like the module classes above); an undotted value (GPT-2's
  ``"activation_function": "gelu_new"``, a tokenizer_config's ``"LlamaTokenizer"``)
  names nothing these loaders import.
- PEFT ``adapter_config.json`` ``auto_mapping: {base_model_class, parent_library}``
  (``peft/auto.py`` ``_BaseAutoPeftModel.from_pretrained`` with no ``task_type``):
  ``importlib.import_module(parent_library)``, then ``getattr(module, base_model_class)
  .from_pretrained(...)``. ``parent_library.base_model_class`` is judged as a target,
  with class-shaped names under ``transformers`` (what ``PeftModel.save_pretrained``
  writes: the base model's ``__module__`` and ``__name__``) allowed.
  ``base_model_name_or_path`` is a model id, not code: not judged here.

Sources: UKPLab/sentence-transformers ``SentenceTransformer.py``
(``_load_module_class_from_ref``, ``_load_sbert_model``), ``util.py``
(``import_from_string``, ``load_dir_path``), ``models/Dense.py``,
``models/WordEmbeddings.py``, ``models/Asym.py``, ``models/Router.py``,
``cross_encoder/CrossEncoder.py``; huggingface/peft ``auto.py``, ``peft_model.py``
(``save_pretrained`` writing ``auto_mapping``); transformers ``dynamic_module_utils.py``.
"""

from __future__ import annotations

import re

from scanner.core.allowlist import DANGEROUS, Classification, classify_dotted, classify_target
from scanner.core.model import Finding
from scanner.core.pathnames import PATH_ESCAPE, reference_escapes
from scanner.formats.targets import AUTO_MAP_CROSS_REPO, judge_target

# Module and tokenizer classes sentence-transformers ships (``models/`` and
# ``sparse_encoder/models/`` up to 5.x; ``base/modules/``, ``sentence_transformer/modules/``,
# ``sparse_encoder/modules/``, ``cross_encoder/modules/``, ``multi_vector_encoder/modules/``
# from 5.4), each in a module file named after it (``Dense.py``, later ``dense.py``), so a
# reference is ``sentence_transformers.models.Dense``, ``sentence_transformers.models.Dense.
# Dense`` or ``sentence_transformers.base.modules.dense.Dense``.
ST_CLASSES = frozenset({
    "Transformer", "Pooling", "Normalize", "Dense", "Asym", "BoW", "CNN", "LSTM",
    "LayerNorm", "Dropout", "WeightedLayerPooling", "WordEmbeddings", "WordWeights",
    "CLIPModel", "StaticEmbedding", "Router", "Module", "InputModule", "MLMTransformer",
    "SpladePooling", "SparseStaticEmbedding", "SparseAutoEncoder", "CausalScoreHead",
    "HierarchicalPooling", "MultiVectorMask", "MultiVectorTransformer",
    "WhitespaceTokenizer", "PhraseTokenizer", "WordTokenizer"})


def _snake(name: str) -> str:
    """``CLIPModel`` -> ``clip_model``: the 5.4 module file of a class."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


# Parts a shipped class's path may pass through: packages, and module files of the classes.
_ST_PARTS = frozenset({
    "models", "modules", "base", "sentence_transformer", "sparse_encoder", "cross_encoder",
    "multi_vector_encoder", "tokenizer", "whitespace", "phrase", "bow",
    *ST_CLASSES, *(_snake(name) for name in ST_CLASSES)})
_ST_ROOT = "sentence_transformers"
_CROSS_REPO = "--"
# Root keys whose dotted value a sentence-transformers module imports and calls.
CALLABLE_KEYS = ("activation_function", "sbert_ce_default_activation_function",
                 "tokenizer_class")


def classify_st(path: str) -> Classification | None:
    """``None`` for a module or tokenizer class sentence-transformers ships (module
    docstring), else ``allowlist.classify_target(path)``."""
    parts = path.split(".")
    if (len(parts) >= 3 and parts[0] == _ST_ROOT and parts[-1] in ST_CLASSES
            and all(p in _ST_PARTS for p in parts[1:-1])):
        return None
    return classify_target(path)


def classify_peft(path: str) -> Classification | None:
    """``None`` for a class-shaped name under ``transformers`` that no reading makes
    dangerous (a base model class as PEFT saves it), else ``classify_target(path)``."""
    parts = path.split(".")
    if (len(parts) >= 2 and parts[0] == "transformers" and parts[-1][:1].isupper()
            and all(p.isidentifier() and p.isascii() for p in parts)
            and classify_dotted(path).tier != DANGEROUS):
        return None
    return classify_target(path)


def _class_ref(path: str, ptr: str, value: str, what: str) -> list[Finding]:
    """A class reference that sentence-transformers imports (``value`` at ``ptr``)."""
    if _CROSS_REPO in value:
        return [AUTO_MAP_CROSS_REPO.finding(
            path, f"{what} at {ptr} imports code from another repository",
            f"{ptr}: {value}"[:300])]
    return judge_target(path, ptr, value, f" ({what})", classify=classify_st)


def _modules(path: str, doc: list[object]) -> list[Finding]:
    """A ``modules.json``: the ``type`` and ``path`` of every ``{.., path, type}`` entry."""
    out: list[Finding] = []
    for index, item in enumerate(doc):
        if not (isinstance(item, dict) and "type" in item and "path" in item):
            continue
        kind, where = item["type"], item["path"]
        if isinstance(kind, str):
            out += _class_ref(path, f"/{index}/type", kind, "sentence-transformers module")
        if isinstance(where, str):
            why = reference_escapes(where)
            if why is not None:
                out.append(PATH_ESCAPE.finding(
                    path, f"modules.json entry {index} loads a module from outside the model "
                    f"folder ({why})", f"/{index}/path: {where}"[:300]))
    return out


def _callables(path: str, doc: dict[str, object]) -> list[Finding]:
    """Dotted callables and classes at the root keys sentence-transformers imports."""
    found: list[tuple[str, object]] = [(f"/{key}", doc.get(key)) for key in CALLABLE_KEYS]
    nested = doc.get(_ST_ROOT)
    if isinstance(nested, dict):
        found.append((f"/{_ST_ROOT}/activation_fn", nested.get("activation_fn")))
    types = doc.get("types")
    if isinstance(types, dict) and "structure" in doc:  # Asym / Router
        found += [("/types/" + str(k).replace("~", "~0").replace("/", "~1"), v)
                  for k, v in types.items()]
    out: list[Finding] = []
    for ptr, value in found:
        if isinstance(value, str) and "." in value:
            out += _class_ref(path, ptr, value, "imported by sentence-transformers")
    return out


def _auto_mapping(path: str, doc: dict[str, object]) -> list[Finding]:
    """A PEFT ``auto_mapping``: ``parent_library.base_model_class`` as a target."""
    mapping = doc.get("auto_mapping")
    if not isinstance(mapping, dict):
        return []
    library, name = mapping.get("parent_library"), mapping.get("base_model_class")
    if not isinstance(library, str) or not isinstance(name, str):
        return []
    return judge_target(path, "/auto_mapping", f"{library}.{name}",
                        " (PEFT auto_mapping: import_module(parent_library), then "
                        "base_model_class.from_pretrained)", classify=classify_peft)


def document_findings(path: str, doc: object) -> list[Finding]:
    """Every sentence-transformers / PEFT class reference of the parsed JSON ``doc`` at
    the places the loaders read (module docstring); ``path`` names the findings.
    Findings of ``config.unsafe_target`` (malicious), ``config.unknown_target`` and
    ``config.auto_map_cross_repo`` (policy), ``path.escape`` (malicious)."""
    if isinstance(doc, list):
        return _modules(path, doc)
    if isinstance(doc, dict):
        return _callables(path, doc) + _auto_mapping(path, doc)
    return []
