"""Serving and inference configs that name code to run when the model loads are
``config.code_reference`` (malicious): TorchServe's MANIFEST.json handler / model file,
SageMaker entry points, MLflow loader modules, diffusers custom components. Built-in
handler names, plain file names and ordinary configs stay clean. Documents written here
from each tool's published format."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scanner.core.context import ScanContext
from scanner.core.model import BytesBlob, Verdict, worst
from scanner.formats.text import analyze_json


def _scan(doc: Any, name: str = "config.json") -> tuple[Verdict, set[str]]:
    found = analyze_json(ScanContext(), BytesBlob(name, json.dumps(doc).encode()))
    return worst(found), {f.rule_id for f in found}


def _torchserve(handler: str, model_file: str | None = None) -> dict[str, Any]:
    model: dict[str, Any] = {"modelName": "m", "serializedFile": "model.pt",
                             "handler": handler, "modelVersion": "1.0"}
    if model_file:
        model["modelFile"] = model_file
    return {"createdOn": "01/01/2026 00:00:00", "runtime": "python",
            "model": model, "archiverVersion": "0.12.0"}


@pytest.mark.parametrize("doc", [
    _torchserve("handler.py"), _torchserve("my_handler:handle"),
    _torchserve("image_classifier", model_file="model.py"),
    {"hyperparameters": {"sagemaker_program": "inference.py",
                         "sagemaker_submit_directory": "s3://b/code.tar.gz"}},
    {"entry_point": "serve.py", "framework_version": "2.1"},
    {"flavors": {"python_function": {"loader_module": "my_pkg.loader", "env": "conda.yaml"}}},
    {"_class_name": "StableDiffusionPipeline", "_diffusers_version": "0.30.0",
     "unet": ["my_unet", "EvilUNet"], "vae": ["diffusers", "AutoencoderKL"]},
    {"_class_name": ["pipeline", "MyPipeline"], "_diffusers_version": "0.30.0"},
], ids=["ts_handler_py", "ts_handler_fn", "ts_model_file", "sagemaker_program",
        "entry_point", "mlflow_loader", "diffusers_component", "diffusers_pipeline"])
def test_configs_naming_code_are_malicious(doc: dict[str, Any]) -> None:
    verdict, rules = _scan(doc)
    assert verdict is Verdict.MALICIOUS and "config.code_reference" in rules, rules


@pytest.mark.parametrize("doc", [
    _torchserve("image_classifier"), _torchserve("text_classifier"),
    {"_class_name": "StableDiffusionPipeline", "_diffusers_version": "0.30.0",
     "unet": ["diffusers", "UNet2DConditionModel"], "tokenizer": ["transformers",
                                                                   "CLIPTokenizer"],
     "safety_checker": [None, None]},
    {"handler": {"level": "INFO"}, "handlers": ["console"], "model_file": "model.safetensors"},
    {"architectures": ["LlamaForCausalLM"], "model_type": "llama"},
], ids=["ts_builtin", "ts_builtin_text", "diffusers_builtin", "logging_like", "hf_config"])
def test_ordinary_configs_stay_clean(doc: dict[str, Any]) -> None:
    assert _scan(doc) == (Verdict.CLEAN, set())


def test_vocabulary_words_are_not_code_references() -> None:
    """Tokenizer vocabularies hold these names as ordinary tokens: never flagged, and
    never a reason to walk the document (the check reads fixed places only)."""
    vocab = {"handler": 11, "entry_point": 12, "model_file": 13, "loader_module": 14,
             "handler.py": 15, "x:y": 16}
    tokenizer = {"version": "1.0", "model": {"type": "BPE", "vocab": vocab, "merges": []}}
    assert _scan(tokenizer, "tokenizer.json") == (Verdict.CLEAN, set())
    assert _scan({"notes": {"handler": "handler.py"}}) == (Verdict.CLEAN, set())
