"""Whole-folder semantics (scanner.scan.folder, scanner.formats.text): auto_map anywhere, code
files,
custom_generate, requirements, chat templates, index path references, Hub kernels."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from _shared import CORPUS as _CORPUS

from scanner.api import TargetResult, scan_target
from scanner.core.context import ScanContext
from scanner.core.model import BytesBlob, Finding, Verdict
from scanner.core.spec import Format
from scanner.formats.text import analyze_json
from scanner.scan.folder import FolderChecks

BENIGN = _CORPUS / "files" / "benign"


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, copy_function=shutil.copyfile)
    for root, dirs, _ in os.walk(dst):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
    os.chmod(dst, 0o755)
    return dst


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A writable copy of the benign tiny Llama folder (clean on its own)."""
    return _copy(BENIGN / "hf_llama_tiny", tmp_path / "model")


@pytest.fixture
def sharded(tmp_path: Path) -> Path:
    return _copy(BENIGN / "hf_llama_tiny_sharded", tmp_path / "sharded")


def _write_json(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1))


def _find(result: TargetResult, rule_id: str, path: str | None = None) -> list[Finding]:
    return [f for f in result.findings
            if f.rule_id == rule_id and (path is None or f.path == path)]


def _json_findings(obj: object, name: str = "x.json") -> list[Finding]:
    return analyze_json(ScanContext(), BytesBlob(name, json.dumps(obj).encode()))


def test_benign_folder_is_clean(model: Path) -> None:
    result = scan_target(model)
    assert result.findings == [] and result.verdict is Verdict.CLEAN


@pytest.mark.parametrize("doc,pointer", [
    ({"auto_map": {"AutoModel": "modeling_x.Model"}}, "/auto_map"),
    ({"auto_map": {"AutoTokenizer": ["tokenization_x.Tok", None]}}, "/auto_map"),
    ({"auto_map": ["modeling_x.Model"]}, "/auto_map"),
    ({"auto_map": "modeling_x.Model"}, "/auto_map"),
    ({"vision_config": {"auto_map": {"AutoConfig": "c.C"}}}, "/vision_config/auto_map"),
    ({"sub": [{"deeper": {"auto_map": {}}}]}, "/sub/0/deeper/auto_map"),
    ({"a/b": {"auto_map": {"x": "m.C"}}}, "/a~1b/auto_map"),
])
def test_auto_map_in_any_form_at_any_depth(doc: object, pointer: str) -> None:
    findings = _json_findings(doc)
    assert [f.rule_id for f in findings] == ["config.auto_map"]
    assert findings[0].verdict is Verdict.POLICY  # issue 10: the code it names decides
    assert findings[0].evidence.startswith(pointer + ":")


def test_auto_map_cross_repo_form() -> None:
    doc = {"auto_map": {"AutoConfig": "org/repo--configuration_x.XConfig",
                        "AutoModel": ["modeling_x.X", "org/other--modeling_y.Y"]}}
    findings = _json_findings(doc)
    cross = [f for f in findings if f.rule_id == "config.auto_map_cross_repo"]
    assert {f.evidence for f in cross} == {
        "/auto_map/AutoConfig: org/repo--configuration_x.XConfig",
        "/auto_map/AutoModel/1: org/other--modeling_y.Y",
    }
    assert len([f for f in findings if f.rule_id == "config.auto_map"]) == 1


def test_config_auto_map_anywhere(tmp_path: Path) -> None:
    """Public bug config-auto-map-anywhere (GHSA-8fr4-5q9j-m8gm, CVE-2025-66448;
    lm-sys/FastChat#3720): auto_map in nested sub-configs, in the cross-repo form, and in
    tokenizer/preprocessor configs, plus a shipped code file."""
    d = tmp_path / "automap_model"
    _write_json(d / "config.json", {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "num_hidden_layers": 1, "num_attention_heads": 1, "vocab_size": 128,
        "vision_config": {"auto_map": {
            "AutoConfig": "some-org/backend-repo--configuration_backend.BackendConfig"}},
    })
    _write_json(d / "tokenizer_config.json", {
        "tokenizer_class": "CustomTokenizer",
        "auto_map": {"AutoTokenizer": ["tokenization_custom.CustomTokenizer", None]},
    })
    _write_json(d / "preprocessor_config.json",
                {"auto_map": {"AutoProcessor": "processing_custom.CustomProcessor"}})
    (d / "tokenization_custom.py").write_text(
        "# placeholder module; a real attack puts code at import time here\n"
        "class CustomTokenizer: pass\n")
    result = scan_target(d)
    # issue 10: auto_map (and its cross-repo form) is policy; the shipped module does
    # nothing at import and its class nothing dangerous, so nothing is malicious
    assert result.verdict is Verdict.POLICY, result.findings
    auto_map = {(f.path, f.evidence.split(":")[0]) for f in _find(result, "config.auto_map")}
    assert auto_map == {("config.json", "/vision_config/auto_map"),
                        ("tokenizer_config.json", "/auto_map"),
                        ("preprocessor_config.json", "/auto_map")}
    cross = _find(result, "config.auto_map_cross_repo")
    assert [(f.path, f.evidence.split(":")[0]) for f in cross] == [
        ("config.json", "/vision_config/auto_map/AutoConfig")]
    assert len(_find(result, "code.python_file_present", "tokenization_custom.py")) == 1


def test_python_file_alone_is_policy(model: Path) -> None:
    (model / "helpers.py").write_text("def f():\n    return 1\n")
    result = scan_target(model)
    assert [f.rule_id for f in result.findings] == ["code.python_file_present"]
    assert result.verdict is Verdict.POLICY


def test_custom_generate_folder_is_malicious(model: Path) -> None:
    (model / "custom_generate").mkdir()
    (model / "custom_generate" / "generate.py").write_text("def generate(model):\n    pass\n")
    result = scan_target(model)
    assert _find(result, "code.custom_generate", "custom_generate")
    assert result.verdict is Verdict.MALICIOUS


def test_requirements_txt_is_policy(model: Path) -> None:
    (model / "requirements.txt").write_text("numpy==2.0\n")
    result = scan_target(model)
    assert [f.rule_id for f in result.findings] == ["code.requirements_file"]
    assert result.verdict is Verdict.POLICY


@pytest.mark.parametrize("value,rule_id", [
    ("kernels-community/flash-attn", "config.hub_kernel"),
    ("kernels-community/vllm-flash-attn3:flash_attention", "config.hub_kernel"),
    ("paged|kernels-community/flash-attn", "config.hub_kernel"),
    ("totally_custom", "config.attn_implementation_unknown"),
])
def test_attention_implementation_from_the_hub(value: str, rule_id: str) -> None:
    for doc, pointer in (({"_attn_implementation": value}, "/_attn_implementation"),
                         ({"text_config": {"_attn_implementation_internal": value}},
                          "/text_config/_attn_implementation_internal")):
        findings = _json_findings(doc, "config.json")
        assert [f.rule_id for f in findings] == [rule_id]
        assert findings[0].evidence == f"{pointer}: {value}"


@pytest.mark.parametrize("value", ["sdpa", "eager", "flash_attention_2", "paged|sdpa", None])
def test_builtin_attention_implementations_are_clean(value: str | None) -> None:
    assert _json_findings({"_attn_implementation": value}, "config.json") == []


def test_custom_pipelines_is_malicious() -> None:
    doc = {"custom_pipelines": {"text-x": {"impl": "pipeline_x.XPipeline", "pt": ["AutoModel"]}}}
    findings = _json_findings(doc, "config.json")
    assert [f.rule_id for f in findings] == ["config.custom_pipelines"]


@pytest.mark.parametrize("value,pointer", [
    ("{{ lipsum.__globals__ }}", "/chat_template"),
    ([{"name": "default", "template": "hi"}, {"name": "tool_use", "template": "{{ x.__class__ }}"}],
     "/chat_template/1/template"),
    ({"default": "hi", "rag": "{{ cycler.__init__ }}"}, "/chat_template/rag"),
])
def test_chat_template_forms_in_tokenizer_config(model: Path, value: object, pointer: str) -> None:
    doc = json.loads((model / "tokenizer_config.json").read_text())
    doc["chat_template"] = value
    _write_json(model / "tokenizer_config.json", doc)
    result = scan_target(model)
    found = _find(result, "template.sandbox_escape")
    assert len(found) == 1  # reported once, by the JSON analysis of the file
    assert found[0].path == "tokenizer_config.json"
    assert found[0].evidence.startswith(pointer + ":")


def test_malicious_jinja_file_reported_once(model: Path) -> None:
    (model / "chat_template.jinja").write_text("{{ lipsum.__globals__['os'] }}")
    result = scan_target(model)
    assert [f.rule_id for f in result.findings] == ["template.sandbox_escape"]


def test_json_named_file_that_is_not_json_is_malformed(model: Path) -> None:
    (model / "tokenizer.json").write_text("/etc/passwd\n")
    result = scan_target(model)
    assert _find(result, "json.invalid", "tokenizer.json")
    assert result.verdict is Verdict.MALFORMED


def test_safetensors_named_file_holding_text_is_malformed(model: Path) -> None:
    (model / "model.safetensors").write_text("../../_outside/model.safetensors\n")
    result = scan_target(model)
    assert _find(result, "format.extension_mismatch", "model.safetensors")
    assert result.verdict is Verdict.MALFORMED


@pytest.mark.parametrize("name,fmt,data,expected", [
    ("chat_template.jinja", Format("text"), b"{{ x.__class__ }}", ["template.sandbox_escape"]),
    ("chat_template.jinja", None, b"hello", []),
    ("chat_template.jinja", Format("jinja"), b"{{ x.__class__ }}", []),  # content path did it
    ("config.json", Format("text"), b'{"auto_map": {"A": "m.C"}}', ["config.auto_map"]),
    ("config.json", Format("json"), b'{"auto_map": {"A": "m.C"}}', []),  # content path did it
    ("config.json", Format("pickle"), b"\x80\x04N.", ["format.extension_mismatch"]),
    ("config.json", Format("empty"), b"", ["json.invalid"]),
    ("modeling.py", Format("text"), b"x = 1\n", ["code.python_file_present"]),
    ("modeling.py", Format("empty"), b"", ["code.python_file_present"]),
    ("modeling.py", Format("python"), b"x = 1\n", []),  # content path did it
    ("model.safetensors", Format("zip"), b"PK\x03\x04", ["format.extension_mismatch"]),
    ("model.safetensors", Format("empty"), b"", ["format.extension_mismatch"]),
    ("model.safetensors", Format("safetensors"), b"", []),
    ("weights.bin", Format("pickle"), b"\x80\x04N.", []),
    ("README.md", Format("text"), b"# hi", []),
])
def test_name_checks_run_only_when_content_analysis_did_not(
        name: str, fmt: Format | None, data: bytes, expected: list[str]) -> None:
    checks = FolderChecks(ScanContext(), folder=True)
    findings = checks.file(name, fmt, BytesBlob(name, data))
    assert [f.rule_id for f in findings] == expected


def _set_index(folder: Path, mapping: dict[str, object],
               name: str = "model.safetensors.index.json") -> None:
    _write_json(folder / name, {"metadata": {"total_size": 1}, "weight_map": mapping})


def test_benign_sharded_index_is_clean(sharded: Path) -> None:
    result = scan_target(sharded)
    assert result.findings == [] and result.verdict is Verdict.CLEAN


@pytest.mark.parametrize("ref,rule_id", [
    ("../model-00002-of-00002.safetensors", "path.escape"),
    ("../../_outside/model-00002-of-00002.safetensors", "path.escape"),
    ("/etc/passwd", "path.escape"),
    ("sub/../../x.safetensors", "path.escape"),
    ("..\\..\\x.safetensors", "path.escape"),
    ("C:/weights/x.safetensors", "path.escape"),
    ("model-00003-of-00002.safetensors", "path.missing"),
    ("", "path.missing"),
])
def test_index_references_must_stay_inside_and_exist(sharded: Path, ref: str,
                                                     rule_id: str) -> None:
    index = json.loads((sharded / "model.safetensors.index.json").read_text())["weight_map"]
    index["lm_head.weight"] = ref
    _set_index(sharded, index)
    result = scan_target(sharded)
    found = _find(result, rule_id, "model.safetensors.index.json")
    assert len(found) == 1 and ref in found[0].evidence


def test_index_reference_to_a_directory_or_link_is_missing(sharded: Path) -> None:
    index = json.loads((sharded / "model.safetensors.index.json").read_text())["weight_map"]
    (sharded / "adir").mkdir()
    (sharded / "alias.safetensors").symlink_to("model-00002-of-00002.safetensors")
    index["lm_head.weight"] = "adir"
    index["model.norm.weight"] = "alias.safetensors"
    _set_index(sharded, index)
    result = scan_target(sharded)
    missing = _find(result, "path.missing")
    assert {f.evidence.split(": ")[1].split(" ")[0] for f in missing} == {"adir",
                                                                         "alias.safetensors"}


def test_index_in_subfolder_resolves_relative_to_it(tmp_path: Path) -> None:
    d = tmp_path / "pipe"
    shutil.copytree(BENIGN / "hf_llama_tiny_sharded", d / "text_encoder",
                    copy_function=shutil.copyfile)
    result = scan_target(d)
    assert _find(result, "path.missing") == [] and _find(result, "path.escape") == []


@pytest.mark.parametrize("ref", ["../outside.safetensors", "sub/../../outside.safetensors"])
def test_index_escape_is_judged_against_the_index_folder_not_the_scan_target(
        tmp_path: Path, ref: str) -> None:
    """Found in a fresh-user trial: scanning a parent folder (the CI recipe's ``models/``)
    let ``../outside.safetensors`` pass as clean when the sibling file existed there, and
    as only ``path.missing`` when it did not. The loader opens the model folder, so ``..``
    leaves the model whatever holds the file."""
    models = tmp_path / "models"
    shutil.copytree(BENIGN / "hf_llama_tiny_sharded", models / "evil",
                    copy_function=shutil.copyfile)
    shutil.copyfile(models / "evil" / "model-00002-of-00002.safetensors",
                    models / "outside.safetensors")
    index = json.loads((models / "evil" / "model.safetensors.index.json").read_text())
    index["weight_map"]["lm_head.weight"] = ref
    _write_json(models / "evil" / "model.safetensors.index.json", index)
    for target in (models, models / "evil"):
        result = scan_target(target)
        assert result.verdict is Verdict.MALICIOUS, target
        assert [f.evidence for f in _find(result, "path.escape")] == [
            f"/weight_map/lm_head.weight: {ref}"], target
        assert _find(result, "path.missing") == [], target
    (models / "outside.safetensors").unlink()
    assert _find(scan_target(models), "path.escape")


@pytest.mark.parametrize("doc", [{"weight_map": ["a"]}, {"weight_map": {"w": 3}}, {}])
def test_index_without_a_weight_map_of_names_is_malformed(sharded: Path, doc: object) -> None:
    _write_json(sharded / "model.safetensors.index.json", doc)
    result = scan_target(sharded)
    assert _find(result, "config.invalid_index")


def test_single_index_file_target_checks_escapes_only(sharded: Path) -> None:
    index = json.loads((sharded / "model.safetensors.index.json").read_text())["weight_map"]
    index["lm_head.weight"] = "../evil.safetensors"
    index["model.norm.weight"] = "not-shipped.safetensors"
    _set_index(sharded, index)
    result = scan_target(sharded / "model.safetensors.index.json")
    assert [f.rule_id for f in result.findings] == ["path.escape"]


def test_strict_json_duplicate_keys_are_malformed() -> None:
    blob = BytesBlob("config.json", b'{"auto_map": {}, "auto_map": {}}')
    findings = analyze_json(ScanContext(), blob)
    assert [f.rule_id for f in findings] == ["json.invalid"]
    assert findings[0].evidence.startswith("duplicate_key")


def test_json_over_the_size_limit_is_a_limit_finding(model: Path) -> None:
    from scanner.core.context import Limits

    (model / "big.json").write_text("[" + "0," * 2000 + "0]")
    result = scan_target(model, Limits(max_json_bytes=1000))
    assert _find(result, "scanner.limit_exceeded", "big.json")
    assert result.verdict is Verdict.MALFORMED


@pytest.mark.parametrize("name", ["model.pkl", "weights.pt", "est.joblib"])
def test_modelaudit_plain_text_named_pkl_is_never_clean(tmp_path: Path, name: str) -> None:
    """Issue 10 miss: text content under a pickle-family name passed as clean."""
    path = tmp_path / name
    path.write_text("just some text, not a pickle\n")
    result = scan_target(path)
    assert result.verdict is not Verdict.CLEAN
    assert "format.extension_mismatch" in {f.rule_id for f in result.findings}
