"""The raw-vLLM comparison engine runs the appliance's engine command line minus exactly the
named hardening flags (issue 20: the argv was a hand copy that had lost the scheduler bounds)."""

from __future__ import annotations

from pathlib import Path

from appliance.config.policy import EnginePolicy
from appliance.engine.launcher import HARDENING_FLAGS, EngineSpec, build_argv
from appliance.toolbench.raw_vllm import raw_argv


def _flags(argv: list[str]) -> list[str]:
    return [a for a in argv if a.startswith("--")]


def test_raw_argv_is_the_launcher_argv_without_the_hardening_set(tmp_path: Path) -> None:
    engine = EnginePolicy(device="cpu", enforce_eager=True, max_num_batched_tokens=64,
                          num_kv_blocks=32)
    spec = EngineSpec(model_dir=tmp_path / "m", served_name="m", engine=engine,
                      runtime_dir=tmp_path / "run")
    appliance, raw = build_argv(spec), raw_argv(spec, 8123)
    assert raw[:3] == appliance[:3]
    kept = [f for f in _flags(appliance) if f not in HARDENING_FLAGS]
    assert _flags(raw) == [x for f in kept
                           for x in (("--host", "--port") if f == "--uds" else (f,))]
    assert {"--max-num-batched-tokens", "--num-gpu-blocks-override", "--enforce-eager"} <= set(
        _flags(raw))
    assert not HARDENING_FLAGS & set(raw) and "--uds" not in raw
    assert raw[raw.index("--port") + 1] == "8123" and raw[raw.index("--host") + 1] == "127.0.0.1"
    assert raw[raw.index("--max-num-batched-tokens") + 1] == "64"


def test_hardening_flags_are_all_passed_by_the_launcher(tmp_path: Path) -> None:
    spec = EngineSpec(model_dir=tmp_path, served_name="m", engine=EnginePolicy(),
                      runtime_dir=tmp_path)
    assert HARDENING_FLAGS <= set(build_argv(spec))
