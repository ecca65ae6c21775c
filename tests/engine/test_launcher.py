import json
import os
from pathlib import Path

import pytest

from appliance.config.policy import EnginePolicy, load_policy
from appliance.engine.launcher import VETTED_TOOL_PARSERS, EngineSpec, build_argv, build_env
from appliance.errors import PolicyError

REPO = Path(__file__).resolve().parents[2]


def _spec(tmp_path: Path, **engine: object) -> EngineSpec:
    base = load_policy(REPO / "policies" / "cpu-demo.toml").engine
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "chat_template.jinja").write_text("{{ messages }}")
    return EngineSpec(model_dir=tmp_path / "model", served_name="appliance-model",
                      engine=base.model_copy(update=engine), runtime_dir=tmp_path / "run")


def _vllm_parse(argv: list[str]):  # type: ignore[no-untyped-def]
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    try:
        from vllm.entrypoints.launchers.cli_args import (
            make_arg_parser,
            validate_parsed_serve_args,
        )
    except ImportError:  # vLLM 0.34 moved the serve arguments to entrypoints.common
        from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    args = parser.parse_args(argv)
    validate_parsed_serve_args(args)
    return args


def test_argv_parses_with_vllms_own_parser(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    argv = build_argv(spec)
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    args = _vllm_parse(argv[3:])
    assert args.model == str(spec.model_dir)
    assert args.load_format == "safetensors"
    assert args.trust_remote_code is False
    assert args.enable_auto_tool_choice is True
    assert args.tool_call_parser == "hermes"
    assert str(args.tool_strict_level).endswith("parameter")
    backend = args.structured_outputs_config
    backend = backend.backend if hasattr(backend, "backend") else json.loads(backend)["backend"]
    assert backend == "xgrammar"
    assert args.uds == str(spec.socket_path)
    assert args.chat_template == str(spec.model_dir / "chat_template.jinja")
    assert args.served_model_name == ["appliance-model"]
    assert args.disable_fastapi_docs is True
    assert not args.api_key  # the internal key travels in the environment only
    assert args.enable_prompt_embeds is False


def test_argv_never_contains_dangerous_flags(tmp_path: Path) -> None:
    argv = " ".join(build_argv(_spec(tmp_path, enforce_eager=True)))
    for flag in ("--trust-remote-code", "--tool-parser-plugin", "--middleware", "--host",
                 "--api-key", "--enable-prompt-embeds", "auto\"", "--allowed-local-media-path"):
        assert flag not in argv


@pytest.mark.parametrize("parser", ["pythonic", "my_plugin", "hermes;rm"])
def test_unvetted_parser_is_refused(tmp_path: Path, parser: str) -> None:
    """tool-parser-allowlist (GHSA-79j6-g2m3-jgfw, GHSA-w6q7-j642-7c25)."""
    with pytest.raises(PolicyError) as info:
        build_argv(_spec(tmp_path, tool_call_parser=parser))
    assert info.value.code == "parser_not_vetted"


def test_vetted_parsers_are_known_to_vllm(tmp_path: Path) -> None:
    for parser in sorted(VETTED_TOOL_PARSERS):
        args = _vllm_parse(build_argv(_spec(tmp_path, tool_call_parser=parser))[3:])
        assert args.tool_call_parser == parser


def test_env_is_scrubbed_offline_and_cpu(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    base = {"PATH": "/usr/bin", "HOME": "/root", "PYTHONOPTIMIZE": "1", "PYTHONPATH": "/evil",
            "VLLM_SERVER_DEV_MODE": "1", "HF_TOKEN": "secret", "VLLM_PLUGINS": "x"}
    env = build_env(spec, base)
    for var in ("PYTHONOPTIMIZE", "PYTHONPATH", "VLLM_SERVER_DEV_MODE", "HF_TOKEN"):
        assert var not in env
    assert env["VLLM_PLUGINS"] == ""
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["VLLM_NO_USAGE_STATS"] == "1"
    assert env["VLLM_API_KEY"] == spec.api_key and len(spec.api_key) >= 32
    assert env["VLLM_TARGET_DEVICE"] == "cpu"
    assert env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    assert "VLLM_TARGET_DEVICE" not in build_env(_spec(tmp_path, device="gpu"), base)


def test_gpu_policy_argv_parses(tmp_path: Path) -> None:
    engine = load_policy(REPO / "policies" / "default.toml").engine
    (tmp_path / "chat_template.jinja").write_text("{{ messages }}")
    spec = EngineSpec(model_dir=tmp_path, served_name="m", engine=engine, runtime_dir=tmp_path)
    assert isinstance(engine, EnginePolicy)
    args = _vllm_parse(build_argv(spec)[3:])
    assert args.max_model_len == engine.max_model_len


@pytest.mark.parametrize("compact", [False, True])
def test_disable_any_whitespace_reaches_vllms_structured_outputs_config(
        tmp_path: Path, compact: bool) -> None:
    """Issue 26: the policy key becomes vLLM's own ``disable_any_whitespace`` (xgrammar
    JSON-schema grammars), and only when set."""
    spec = _spec(tmp_path, disable_any_whitespace=compact)
    config = _vllm_parse(build_argv(spec)[3:]).structured_outputs_config
    value = (config.disable_any_whitespace if hasattr(config, "disable_any_whitespace")
             else json.loads(config).get("disable_any_whitespace", False))
    assert value is compact
