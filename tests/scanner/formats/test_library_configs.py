"""sentence-transformers and PEFT configs naming classes and callables the loaders import:
``modules.json`` types and paths, Dense / CrossEncoder activation functions,
WordEmbeddings tokenizer classes, PEFT ``auto_mapping`` (second red-team report, items
1-4; ``scanner.formats.libconfigs``). Each malicious case is the red-team's reproducer,
laid out as the library saves a model; each benign counterpart is what the library itself
writes (all-MiniLM-L6-v2, a Dense head, a CrossEncoder, a LoRA adapter) and stays clean.
Nothing here imports those libraries: the documents are written by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scanner.api import scan_target
from scanner.core.context import ScanContext
from scanner.core.model import BytesBlob, Verdict, worst
from scanner.formats.text import analyze_json

# all-MiniLM-L6-v2's modules.json, as sentence-transformers saves it
MINILM_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize",
     "type": "sentence_transformers.models.Normalize"},
]
POOLING = {"word_embedding_dimension": 384, "pooling_mode_cls_token": False,
           "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
           "pooling_mode_mean_sqrt_len_tokens": False}
LORA = {"alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": "gpt2",
        "bias": "none", "fan_in_fan_out": True, "inference_mode": True,
        "init_lora_weights": True, "layers_pattern": None, "layers_to_transform": None,
        "lora_alpha": 16, "lora_dropout": 0.05, "modules_to_save": None, "peft_type": "LORA",
        "r": 8, "rank_pattern": {}, "revision": None, "target_modules": ["c_attn"],
        "task_type": "CAUSAL_LM"}


def _write(root: Path, files: dict[str, Any]) -> Path:
    for name, doc in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))
    return root


def _folder(tmp_path: Path, files: dict[str, Any]) -> tuple[Verdict | None, set[str]]:
    result = scan_target(_write(tmp_path / "model", files))
    return result.verdict, {f.rule_id for f in result.findings}


def _json(doc: Any, name: str = "config.json") -> tuple[Verdict, set[str]]:
    found = analyze_json(ScanContext(), BytesBlob(name, json.dumps(doc).encode()))
    return worst(found), {f.rule_id for f in found}


def _modules(type_: str, path: str = "") -> list[dict[str, Any]]:
    return [{"idx": 0, "name": "0", "path": path, "type": type_}]


# -- 1. modules.json types --------------------------------------------------------------


def test_sentence_transformers_modules_json_type_any_module(tmp_path: Path) -> None:
    """``_load_module_class_from_ref`` falls back to ``import_from_string``: any module."""
    verdict, rules = _folder(tmp_path, {"modules.json": _modules("antigravity.Pooling")})
    assert verdict is Verdict.MALICIOUS and "config.unsafe_target" in rules, rules


def test_sentence_transformers_modules_json_type_cross_repo(tmp_path: Path) -> None:
    """``repo--module.Class``: transformers' dynamic modules fetch it from another repo."""
    verdict, rules = _folder(
        tmp_path, {"modules.json": _modules("attacker/payload--evil.Pooling")})
    assert verdict is Verdict.POLICY and rules == {"config.auto_map_cross_repo"}, rules


def test_sentence_transformers_modules_json_type_unknown_class_is_policy() -> None:
    """A project's own module class (``custom_pooling.MyPooling``, loaded from the model
    folder as a dynamic module): code that was not reviewed, no evidence against it."""
    assert _json(_modules("custom_pooling.MyPooling"), "modules.json") == (
        Verdict.POLICY, {"config.unknown_target"})


@pytest.mark.parametrize("type_", [
    "sentence_transformers.models.os.system", "sentence_transformers.models.os.Pooling",
    "sentence_transformers.util.subprocess.Popen",
    "builtins.eval", "sentence_transformers.models.__builtins__",
])
def test_sentence_transformers_modules_json_type_dangerous(type_: str) -> None:
    assert _json(_modules(type_), "modules.json") == (
        Verdict.MALICIOUS, {"config.unsafe_target"})


@pytest.mark.parametrize("type_", [
    "sentence_transformers.models.Transformer", "sentence_transformers.models.Dense.Dense",
    "sentence_transformers.models.StaticEmbedding",
    "sentence_transformers.sparse_encoder.models.SpladePooling",
    # 5.4 and later: base/modules/, sentence_transformer/modules/, snake_case module files
    "sentence_transformers.base.modules.transformer.Transformer",
    "sentence_transformers.sentence_transformer.modules.pooling.Pooling",
    "sentence_transformers.base.modules.router.Asym",
    "sentence_transformers.sparse_encoder.modules.splade_pooling.SpladePooling",
])
def test_sentence_transformers_shipped_module_classes_stay_clean(type_: str) -> None:
    assert _json(_modules(type_), "modules.json") == (Verdict.CLEAN, set())


def test_sentence_transformers_all_minilm_folder_stays_clean(tmp_path: Path) -> None:
    verdict, rules = _folder(tmp_path, {
        "modules.json": MINILM_MODULES, "1_Pooling/config.json": POOLING,
        "sentence_bert_config.json": {"max_seq_length": 256, "do_lower_case": False},
        "config_sentence_transformers.json": {"__version__": {"sentence_transformers": "2.0.0",
                                                              "transformers": "4.6.1",
                                                              "pytorch": "1.8.1"}},
    })
    assert (verdict, rules) == (Verdict.CLEAN, set())


# -- 3. modules.json paths --------------------------------------------------------------


@pytest.mark.parametrize("path", [
    "../../../tmp/evil_model", "/tmp/evil_model", "..\\..\\evil", "C:\\models\\evil",
    "1_Pooling/../../evil",
])
def test_sentence_transformers_modules_json_path_escape(tmp_path: Path, path: str) -> None:
    """``load_dir_path``: ``os.path.join(model, path)`` loads a module from elsewhere."""
    verdict, rules = _folder(tmp_path, {
        "modules.json": _modules("sentence_transformers.models.Transformer", path)})
    assert verdict is Verdict.MALICIOUS and rules == {"path.escape"}, rules


def test_sentence_transformers_modules_json_path_escape_unescaped() -> None:
    """The JSON reader undoes ``\\u`` escapes before the path is judged."""
    raw = b'[{"idx":0,"name":"0","path":"\\u002e\\u002e/x","type":"sentence_transformers.' \
          b'models.Pooling"}]'
    found = analyze_json(ScanContext(), BytesBlob("modules.json", raw))
    assert {f.rule_id for f in found} == {"path.escape"}


def test_sentence_transformers_modules_json_inner_path_stays_clean() -> None:
    assert _json(_modules("sentence_transformers.models.Pooling", "1_Pooling/../1_Pooling"),
                 "modules.json") == (Verdict.CLEAN, set())


# -- 2. callables a module's config names ------------------------------------------------


def test_sentence_transformers_dense_activation_function(tmp_path: Path) -> None:
    """``models.Dense.load``: ``import_from_string(config["activation_function"])()``."""
    verdict, rules = _folder(tmp_path, {
        "modules.json": _modules("sentence_transformers.models.Dense", "2_Dense"),
        "2_Dense/config.json": {"in_features": 8, "out_features": 8, "bias": True,
                                "activation_function": "http.server.test"}})
    assert verdict is Verdict.MALICIOUS and rules == {"config.unsafe_target"}, rules


@pytest.mark.parametrize("activation", [
    "torch.nn.modules.activation.Tanh", "torch.nn.modules.linear.Identity",
    "torch.nn.functional.gelu",
])
def test_sentence_transformers_dense_torch_activation_stays_clean(activation: str) -> None:
    assert _json({"in_features": 384, "out_features": 256, "bias": True,
                  "activation_function": activation}) == (Verdict.CLEAN, set())


def test_transformers_undotted_activation_function_stays_clean() -> None:
    """GPT-2's config.json names its activation by a name transformers maps itself."""
    assert _json({"model_type": "gpt2", "activation_function": "gelu_new"}) == (
        Verdict.CLEAN, set())


def test_sentence_transformers_word_embeddings_tokenizer_class(tmp_path: Path) -> None:
    """``WordEmbeddings.load``: ``import_from_string(tokenizer_class).load(path)``."""
    verdict, rules = _folder(tmp_path, {
        "modules.json": _modules("sentence_transformers.models.WordEmbeddings",
                                 "0_WordEmbeddings"),
        "0_WordEmbeddings/wordembedding_config.json": {
            "tokenizer_class": "antigravity.X", "update_embeddings": False,
            "max_seq_length": 128}})
    assert verdict is Verdict.MALICIOUS and rules == {"config.unsafe_target"}, rules


def test_sentence_transformers_word_embeddings_shipped_tokenizer_stays_clean() -> None:
    assert _json({"tokenizer_class": "sentence_transformers.models.tokenizer."
                  "WhitespaceTokenizer.WhitespaceTokenizer", "update_embeddings": False,
                  "max_seq_length": 1000000}, "wordembedding_config.json") == (
        Verdict.CLEAN, set())


def test_transformers_tokenizer_class_name_stays_clean() -> None:
    assert _json({"tokenizer_class": "LlamaTokenizer", "model_max_length": 4096},
                 "tokenizer_config.json") == (Verdict.CLEAN, set())


@pytest.mark.parametrize("doc", [
    {"architectures": ["BertForSequenceClassification"], "model_type": "bert",
     "num_labels": 1, "sbert_ce_default_activation_function": "code.interact"},
    {"architectures": ["BertForSequenceClassification"], "model_type": "bert",
     "sentence_transformers": {"activation_fn": "torch.hub.load"}},
], ids=["sbert_ce_default_activation_function", "activation_fn"])
def test_sentence_transformers_cross_encoder_activation(doc: dict[str, Any]) -> None:
    """``CrossEncoder``: the default activation is imported from the config and called."""
    verdict, rules = _json(doc)
    assert verdict is Verdict.MALICIOUS and rules == {"config.unsafe_target"}, rules


def test_sentence_transformers_cross_encoder_sigmoid_stays_clean() -> None:
    assert _json({"architectures": ["BertForSequenceClassification"], "num_labels": 1,
                  "sentence_transformers": {
                      "activation_fn": "torch.nn.modules.activation.Sigmoid",
                      "version": "4.0.1"}}) == (Verdict.CLEAN, set())


def test_sentence_transformers_asym_types() -> None:
    """``models.Asym.load`` / ``Router.load``: ``import_from_string`` of every type."""
    verdict, rules = _json({"types": {"query_0_Dense": "os.system",
                                      "doc_0_Dense": "sentence_transformers.models.Dense"},
                            "structure": {"query": ["query_0_Dense"],
                                          "doc": ["doc_0_Dense"]}})
    assert verdict is Verdict.MALICIOUS and rules == {"config.unsafe_target"}, rules


# -- 4. PEFT auto_mapping ----------------------------------------------------------------


def test_peft_auto_mapping_parent_library(tmp_path: Path) -> None:
    """peft ``auto.py``: ``import_module(parent_library)``, then ``getattr`` of
    ``base_model_class`` and its ``from_pretrained``."""
    verdict, rules = _folder(tmp_path, {"adapter_config.json": {
        "peft_type": "LORA", "task_type": None, "base_model_name_or_path": "gpt2", "r": 8,
        "lora_alpha": 16, "target_modules": ["c_attn"],
        "auto_mapping": {"base_model_class": "Pooling", "parent_library": "antigravity"}}})
    assert verdict is Verdict.MALICIOUS and rules == {"config.unsafe_target"}, rules


def test_peft_auto_mapping_unknown_library_is_policy() -> None:
    doc = {**LORA, "task_type": None,
           "auto_mapping": {"base_model_class": "MyModel", "parent_library": "my_models.x"}}
    assert _json(doc, "adapter_config.json") == (Verdict.POLICY, {"config.unknown_target"})


def test_peft_auto_mapping_transformers_class_stays_clean() -> None:
    doc = {**LORA, "task_type": None, "auto_mapping": {
        "base_model_class": "BertModel",
        "parent_library": "transformers.models.bert.modeling_bert"}}
    assert _json(doc, "adapter_config.json") == (Verdict.CLEAN, set())


def test_peft_lora_adapter_config_stays_clean(tmp_path: Path) -> None:
    verdict, rules = _folder(tmp_path, {"adapter_config.json": LORA})
    assert (verdict, rules) == (Verdict.CLEAN, set())


def test_sentence_transformers_modules_json_padded_past_the_memo_size() -> None:
    """A document over ``text.MEMO_MIN_BYTES`` is analysed without its file name (memoised
    by digest): the references are found by shape, so padding does not hide them."""
    from scanner.formats.text import MEMO_MIN_BYTES

    doc = _modules("antigravity.Pooling") + [{"pad": "x" * MEMO_MIN_BYTES}]
    assert _json(doc, "modules.json") == (Verdict.MALICIOUS, {"config.unsafe_target"})
