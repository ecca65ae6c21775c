"""Rules on the process environment (code ``python_optimize_not_allowed``,
``forbidden_environment``): optimised Python, and engine variables that open attack surface.

``check_optimize`` (``python -O`` / ``PYTHONOPTIMIZE``), ``check_forbidden_env`` (each
variable of :data:`FORBIDDEN_ENV` set), ``check_plugins`` (``VLLM_PLUGINS`` naming plugins);
:func:`check_environment` runs the three in that order.
"""

from __future__ import annotations

from collections.abc import Mapping

from appliance.preflight.problem import Problem

# Variables whose mere presence (non-empty, not "0"/"false") is refused.
FORBIDDEN_ENV: dict[str, tuple[str, str]] = {
    "VLLM_SERVER_DEV_MODE": (
        "vLLM serve/dev router: logs 'SECURITY WARNING: Development endpoints are enabled'",
        "registers /collective_rpc, /sleep, /update_weights and other dev routes"),
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": (
        "vLLM serve/lora router: 'should ONLY be used for local development'",
        "lets callers load adapters (code and weights) at run time"),
    "VLLM_ALLOW_INSECURE_SERIALIZATION": (
        "CVE-2025-30165", "enables pickle in the engine's IPC codec"),
}


def _truthy(value: str) -> bool:
    return value.strip().lower() not in ("", "0", "false", "no", "off")


def check_optimize(env: Mapping[str, str], optimize_flag: int) -> list[Problem]:
    """``python -O`` or ``PYTHONOPTIMIZE`` set: asserts that guard model loading are gone."""
    if optimize_flag or _truthy(env.get("PYTHONOPTIMIZE", "")):
        return [Problem(
            "python_optimize_not_allowed", "PYTHONOPTIMIZE / python -O",
            "optimised mode strips assert statements that guard model loading",
            "GHSA-q8gq-377p-jq3r (CVE-2026-41523)",
            "run without -O and unset PYTHONOPTIMIZE")]
    return []


def check_forbidden_env(env: Mapping[str, str]) -> list[Problem]:
    """One problem per :data:`FORBIDDEN_ENV` variable that is set (not empty/0/false)."""
    return [Problem("forbidden_environment", var, why, advisory, f"unset {var}")
            for var, (advisory, why) in FORBIDDEN_ENV.items() if _truthy(env.get(var, ""))]


def check_plugins(env: Mapping[str, str]) -> list[Problem]:
    """``VLLM_PLUGINS`` naming any plugin (the launcher sets it empty)."""
    if env.get("VLLM_PLUGINS", "").strip():
        return [Problem(
            "forbidden_environment", "VLLM_PLUGINS",
            "loads third-party plugin entry points (arbitrary code) into the engine",
            "vLLM plugin loader: named entry points are imported into every process",
            "unset VLLM_PLUGINS (the launcher sets it empty)")]
    return []


def check_environment(env: Mapping[str, str], optimize_flag: int) -> list[Problem]:
    """Refuse optimised Python and engine environment switches that open attack surface."""
    return (check_optimize(env, optimize_flag) + check_forbidden_env(env)
            + check_plugins(env))
