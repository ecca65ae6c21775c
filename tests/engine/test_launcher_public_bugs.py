"""Launcher / loader public bugs (tests/fixtures/public-bugs.jsonl), named after their ids."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from appliance.config.policy import load_policy
from appliance.engine.launcher import STRUCTURED_OUTPUTS_BACKEND, EngineSpec, build_argv, build_env
from appliance.errors import PolicyError
from appliance.gateway import GatewaySettings, create_app
from scanner.api import scan_paths

REPO = Path(__file__).resolve().parents[2]
KEY = "k" * 32


def _spec(tmp_path: Path, **engine: object) -> EngineSpec:
    base = load_policy(REPO / "policies" / "cpu-demo.toml").engine
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "chat_template.jinja").write_text("{{ messages }}")
    return EngineSpec(model_dir=model, served_name="appliance-model",
                      engine=base.model_copy(update=engine), runtime_dir=tmp_path / "run")


def _gateway(tools_enabled: bool) -> TestClient:
    settings = GatewaySettings.model_validate({
        "upstream_url": "http://127.0.0.1:9", "served_model_name": "appliance-model",
        "api_keys": [KEY], "tools_enabled": tools_enabled})
    return TestClient(create_app(settings))


TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.mark.parametrize("parser", ["", "   "])
def test_tool_choice_without_parser_refused(tmp_path: Path, parser: str) -> None:
    with pytest.raises(PolicyError) as info:
        build_argv(_spec(tmp_path, tool_call_parser=parser))
    assert info.value.code == "incomplete_tool_config"


def test_tool_choice_without_parser_backend_is_not_configurable(tmp_path: Path) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text('[engine]\nstructured_outputs_backend = "outlines"\n')
    with pytest.raises(PolicyError) as info:
        load_policy(policy)
    assert "structured_outputs_backend" in (info.value.where or "")


def test_tool_choice_without_parser_vetted_config_argv(tmp_path: Path) -> None:
    argv = build_argv(_spec(tmp_path))
    assert "--enable-auto-tool-choice" in argv
    assert argv[argv.index("--tool-call-parser") + 1] == "hermes"
    backend = json.loads(argv[argv.index("--structured-outputs-config") + 1])["backend"]
    assert backend == STRUCTURED_OUTPUTS_BACKEND == "xgrammar"
    assert argv[argv.index("--tool-strict-level") + 1] == "parameter"


def test_tool_choice_without_parser_gateway_probe() -> None:
    """An engine without tool flags: tool requests get 400, never a plain-text 200."""
    with _gateway(tools_enabled=False) as client:
        r = client.post("/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"},
                        json={"model": "appliance-model", "tools": [TOOL],
                              "tool_choice": "required",
                              "messages": [{"role": "user", "content": "weather?"}]})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "tools_unavailable"


def test_python_optimized_mode_engine_child_runs_unoptimized(tmp_path: Path) -> None:
    """The engine environment drops PYTHONOPTIMIZE; a child started with it confirms
    sys.flags.optimize == 0 (GHSA-q8gq-377p-jq3r)."""
    spec = _spec(tmp_path)
    for value in ("1", "2"):
        env = build_env(spec, {"PATH": "/usr/bin:/bin", "PYTHONOPTIMIZE": value})
        out = subprocess.run([sys.executable, "-c", "import sys; print(sys.flags.optimize)"],
                             env=env, capture_output=True, text=True, check=True).stdout
        assert out.strip() == "0"
    assert "-O" not in build_argv(spec)[:3]


def test_python_optimized_mode_no_assert_in_product_code() -> None:
    """No security decision may rest on `assert` (stripped by -O)."""
    offenders = []
    for package in ("appliance", "scanner"):
        for path in (REPO / package).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            offenders += [f"{path.relative_to(REPO)}:{node.lineno}"
                          for node in ast.walk(tree) if isinstance(node, ast.Assert)]
    assert offenders == []


def _custom_generate_model(root: Path, canary: Path) -> Path:
    d = root / "custom_generate_model"
    (d / "custom_generate").mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"],
                                               "model_type": "llama"}))
    (d / "custom_generate" / "generate.py").write_text(
        f"import pathlib\npathlib.Path({str(canary)!r}).write_text('imported')\n")
    (d / "custom_generate" / "requirements.txt").write_text("numpy\n")
    return d


def test_custom_generate_local_dir_refused_by_scan(tmp_path: Path) -> None:
    canary = tmp_path / "CANARY"
    report = scan_paths([_custom_generate_model(tmp_path, canary)])
    result = report.targets[0]
    assert result.verdict is not None and result.verdict.label == "malicious"
    rules = {f.rule_id for f in result.findings}
    assert "code.custom_generate" in rules
    assert any("custom_generate/generate.py" in f.path for f in result.findings)
    assert not canary.exists()


def test_custom_generate_local_dir_request_field_refused() -> None:
    with _gateway(tools_enabled=True) as client:
        r = client.post("/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"},
                        json={"model": "appliance-model", "custom_generate": "./custom_generate",
                              "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "forbidden_parameter"


def automap_canary_model(root: Path, canary: Path) -> Path:
    """auto_map pointing at local modules that write ``canary`` when imported."""
    d = root / "automap_canary"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({
        "architectures": ["CanaryForCausalLM"], "model_type": "canary",
        "auto_map": {"AutoConfig": "configuration_canary.CanaryConfig",
                     "AutoModelForCausalLM": "modeling_canary.CanaryForCausalLM"},
        "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 1,
        "vocab_size": 128}))
    drop = f"import pathlib\npathlib.Path({str(canary)!r}).write_text('imported ' + __name__)\n"
    (d / "configuration_canary.py").write_text(drop + "class CanaryConfig: pass\n")
    (d / "modeling_canary.py").write_text(drop + "class CanaryForCausalLM: pass\n")
    return d


def test_automap_import_without_trust_scan_refuses_first(tmp_path: Path) -> None:
    canary = tmp_path / "CANARY"
    result = scan_paths([automap_canary_model(tmp_path, canary)]).targets[0]
    assert result.verdict is not None and result.verdict.label == "malicious"
    rules = {f.rule_id for f in result.findings}
    assert {"config.auto_map", "code.python_file_present"} <= rules
    assert not canary.exists()


def test_automap_import_without_trust_engine_never_trusts_remote_code(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    argv = build_argv(spec)
    assert not any("trust-remote-code" in a and not a.startswith("--no-") for a in argv)
    env = build_env(spec, {"PATH": "/usr/bin", "HF_TRUST_REMOTE_CODE": "1",
                           "TRUST_REMOTE_CODE": "true", "HF_HUB_ENABLE_HF_TRANSFER": "1"})
    assert not [k for k in env if "TRUST" in k or k.startswith("HF_") and k not in (
        "HF_HUB_OFFLINE", "HF_HUB_DISABLE_TELEMETRY")]
