"""Keras 3 models saved as a folder, not a ``.keras`` zip (second red-team report, item 5).

``keras.saving.load_model(dir)`` (keras/src/saving/saving_api.py: ``is_keras_dir`` is a
directory holding ``config.json``; ``hf://`` repositories after ``snapshot_download``) calls
saving_lib ``_load_model_from_dir``, which deserializes ``config.json`` before any weights
are read: an ``Activation`` whose activation is ``keras.config.enable_unsafe_deserialization``
(CVE-2025-1550) followed by a ``Lambda`` layer holding ``__lambda__`` marshal'd code runs that
code. The folder's ``config.json`` must get the verdict the same config gets inside a
``.keras`` zip. Configs are written as Keras 3 writes them; nothing is loaded or run (the
``code`` strings are base64 text that is never decoded)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from scanner.api import scan_paths
from scanner.core.model import Finding, Verdict

METADATA = {"keras_version": "3.8.0", "date_saved": "2025-01-01@00:00:00"}
UNSAFE_ACTIVATION = {"module": "keras.layers", "class_name": "Activation", "config": {
    "name": "a", "activation": {"module": "keras.config", "class_name": "function",
                                "config": "enable_unsafe_deserialization",
                                "registered_name": "function"}}}
LAMBDA = {"module": "keras.layers", "class_name": "Lambda", "config": {
    "name": "l", "function": {"class_name": "__lambda__", "config": {
        "code": "4wEAAAAAAAAAAAAAAAEAAAADAAAAQwAAAHMIAAAAdAB8AIMBUwApAU4p",
        "defaults": None, "closure": None}}}}
DENSE = {"module": "keras.layers", "class_name": "Dense", "registered_name": None,
         "config": {"name": "dense", "units": 4, "activation": "relu", "use_bias": True,
                    "kernel_initializer": {"module": "keras.initializers",
                                           "class_name": "GlorotUniform",
                                           "config": {"seed": None},
                                           "registered_name": None}}}
INPUT = {"module": "keras.layers", "class_name": "InputLayer", "registered_name": None,
         "config": {"batch_shape": [None, 3], "dtype": "float32", "name": "input_layer"}}
TRANSFORMERS = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                "hidden_size": 64, "torch_dtype": "bfloat16",
                "id2label": {"0": "caf\u00e9", "1": "\u4e2d"}}


def _sequential(*layers: dict[str, object]) -> dict[str, object]:
    return {"module": "keras", "class_name": "Sequential", "registered_name": None,
            "config": {"name": "s", "layers": list(layers)}}


def _folder(path: Path, config: dict[str, object] | bytes,
            metadata: dict[str, object] | None = METADATA,
            name: str = "config.json") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    data = config if isinstance(config, bytes) else json.dumps(config).encode()
    (path / name).write_bytes(data)
    if metadata is not None:
        (path / "metadata.json").write_text(json.dumps(metadata))
    return path


def _scan(path: Path) -> tuple[Verdict | None, list[Finding]]:
    target = scan_paths([path]).targets[0]
    return target.verdict, list(target.findings)


def _keras(findings: list[Finding]) -> set[str]:
    return {f.rule_id for f in findings if f.rule_id.startswith("keras.")}


def test_keras_saving_lib_load_model_from_dir_lambda(tmp_path: Path) -> None:
    verdict, findings = _scan(_folder(tmp_path / "m", _sequential(INPUT, LAMBDA)))
    assert verdict is Verdict.MALICIOUS, findings
    assert _keras(findings) == {"keras.lambda_layer"}
    assert all(f.path == "config.json" and "keras.saving.load_model (model folder)"
               in f.message for f in findings if f.rule_id.startswith("keras.")), findings


def test_keras_saving_lib_load_model_from_dir_enable_unsafe_deserialization(
        tmp_path: Path) -> None:
    """CVE-2025-1550: a Keras function that turns safe mode off, named as an activation."""
    verdict, findings = _scan(_folder(tmp_path / "m", _sequential(INPUT, UNSAFE_ACTIVATION)))
    assert verdict is Verdict.MALICIOUS, findings
    assert _keras(findings) == {"keras.unsafe_object"}


@pytest.mark.parametrize("metadata", [METADATA, None], ids=["with-metadata", "config-only"])
def test_keras_dir_redteam_case_gets_the_keras_zip_verdict(
        tmp_path: Path, metadata: dict[str, object] | None) -> None:
    """The red-team folder (config.json + metadata.json; _load_model_from_dir never reads
    metadata.json, so a config.json alone counts too) has the rules the same config.json
    gets inside a ``.keras`` zip."""
    config = _sequential(UNSAFE_ACTIVATION, LAMBDA)
    verdict, findings = _scan(_folder(tmp_path / "m", config, metadata))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("metadata.json", json.dumps(METADATA))
        zf.writestr("config.json", json.dumps(config))
    (tmp_path / "z").mkdir()
    (tmp_path / "z" / "m.keras").write_bytes(buf.getvalue())
    zip_verdict, zip_findings = _scan(tmp_path / "z" / "m.keras")
    assert verdict is zip_verdict is Verdict.MALICIOUS
    assert _keras(findings) == _keras(zip_findings) == {"keras.lambda_layer",
                                                         "keras.unsafe_object"}


def test_keras_dir_config_in_a_nested_folder(tmp_path: Path) -> None:
    """A scan of a parent folder: keras.saving.load_model("models/classifier") still reads
    the nested config.json."""
    _folder(tmp_path / "models" / "classifier", _sequential(INPUT, LAMBDA))
    _folder(tmp_path / "models" / "llm", TRANSFORMERS, None)
    verdict, findings = _scan(tmp_path)
    assert verdict is Verdict.MALICIOUS
    assert {f.path for f in findings if f.rule_id == "keras.lambda_layer"} == {
        "models/classifier/config.json"}


def test_keras_dir_escaped_class_name_key(tmp_path: Path) -> None:
    """JSON escapes in every key (``\\u0063lass\\u005fname``) still spell ``class_name``
    to json.loads: the byte test must not skip such a document."""
    data = json.dumps(_sequential(INPUT, LAMBDA)).replace(
        '"class_name"', '"\\u0063lass\\u005fname"').encode()
    assert b"class_name" not in data
    verdict, findings = _scan(_folder(tmp_path / "m", data))
    assert verdict is Verdict.MALICIOUS and "keras.lambda_layer" in _keras(findings)


def test_keras_hub_preset_task_json(tmp_path: Path) -> None:
    """keras_hub ``from_preset`` deserializes task.json as it does config.json."""
    task = {"module": "keras_hub.src.models.text_classifier", "class_name": "TextClassifier",
            "config": {"backbone": _sequential(INPUT, LAMBDA)}}
    verdict, findings = _scan(_folder(tmp_path / "m", task, None, "task.json"))
    assert verdict is Verdict.MALICIOUS and _keras(findings) == {"keras.lambda_layer"}
    assert all("keras_hub from_preset" in f.message for f in findings
               if f.rule_id.startswith("keras."))


def test_keras_dir_custom_layer_is_policy(tmp_path: Path) -> None:
    custom = {"module": "my_layers", "class_name": "MyDense", "config": {"units": 2}}
    verdict, findings = _scan(_folder(tmp_path / "m", _sequential(INPUT, custom)))
    assert verdict is Verdict.POLICY and _keras(findings) == {"keras.custom_object"}


def test_keras_dir_plain_sequential_dense_is_clean(tmp_path: Path) -> None:
    verdict, findings = _scan(_folder(tmp_path / "m", _sequential(INPUT, DENSE)))
    assert verdict is Verdict.CLEAN, findings


@pytest.mark.parametrize("metadata", [
    {"library": "transformers", "format": "pt"}, None], ids=["other-metadata", "no-metadata"])
def test_transformers_config_json_stays_clean(
        tmp_path: Path, metadata: dict[str, object] | None) -> None:
    """A Hugging Face config.json (non-ASCII ``\\u`` escapes as json.dumps writes them)
    beside a metadata.json that is not Keras's: clean, no Keras finding."""
    folder = _folder(tmp_path / "m", TRANSFORMERS, metadata)
    (folder / "generation_config.json").write_text(json.dumps({"max_length": 32}))
    assert b"\\u00e9" in (folder / "config.json").read_bytes()
    verdict, findings = _scan(folder)
    assert verdict is Verdict.CLEAN, findings


def test_keras_dir_single_file_target(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "m", _sequential(INPUT, LAMBDA))
    verdict, findings = _scan(folder / "config.json")
    assert verdict is Verdict.MALICIOUS and _keras(findings) == {"keras.lambda_layer"}


def test_transformers_config_json_pays_no_keras_walk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The common config.json (no ``class_name``, no ``\\u`` escape of an ASCII character)
    is never parsed for Keras: two byte searches only."""
    from scanner.formats import keras

    calls: list[str] = []

    def counting(ctx: object, path: str, data: bytes) -> list[Finding]:
        calls.append(path)
        return []

    monkeypatch.setattr(keras, "analyze_keras_config", counting)
    folder = _folder(tmp_path / "m", TRANSFORMERS, None)
    _folder(tmp_path / "k", _sequential(INPUT, DENSE), None)
    scan_paths([folder, tmp_path / "k"])
    assert calls == ["config.json"]  # the Keras folder's, not the transformers one


def test_keras_dir_config_keras_reads_but_strict_json_refuses(tmp_path: Path) -> None:
    """Duplicate keys: json.loads keeps the last (``Lambda``); the strict parser refuses the
    document, so the walk cannot vouch for it and the file is never clean."""
    data = (b'{"module": "keras.layers", "class_name": "Dense", "class_name": "Lambda", '
            b'"config": {}}')
    verdict, findings = _scan(_folder(tmp_path / "m", data))
    assert verdict is Verdict.MALFORMED, findings
    assert "keras.config_invalid" in _keras(findings)
