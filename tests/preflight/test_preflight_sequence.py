"""The one preflight sequence (``appliance.preflight.sequence.run_sequence``) that both
``appliance check`` and ``serve`` (``Appliance.check``) run: its order, its two modes, and
both commands refusing the same policy with the same code."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.cli import main
from appliance.config.models import ServedModel
from appliance.config.policy import Policy, load_policy
from appliance.errors import ApplianceError, PolicyError, PreflightError
from appliance.preflight.sequence import Serving, run_sequence

REPO = Path(__file__).resolve().parents[2]
MISSING = "no-such-package-s32"


def _policy(packages: tuple[str, ...] = (), host: str = "127.0.0.1") -> Policy:
    policy = load_policy(REPO / "policies" / "cpu-demo.toml")
    return policy.model_copy(update={
        "preflight": policy.preflight.model_copy(update={"packages": packages}),
        "gateway": policy.gateway.model_copy(update={"host": host})})


def _models(policy: Policy, *names: str) -> tuple[ServedModel, ...]:
    return tuple(ServedModel(name, policy.engine, path=Path(name)) for name in names)


def _recording(calls: list[str]) -> Serving[str]:
    def model(served: ServedModel, index: int) -> str:
        calls.append(f"model {index} {served.served_name}")
        return f"run-{served.served_name}"
    return Serving(lambda: calls.append("before_models"), model)


def test_serve_mode_runs_the_steps_in_order_and_returns_the_runs() -> None:
    calls: list[str] = []
    policy = _policy()
    checked = run_sequence(policy, _models(policy, "a")[:1], "127.0.0.1", _recording(calls))
    assert calls == ["before_models", "model 0 a"]
    assert checked.runs == ["run-a"] and checked.problems == []
    assert checked.advisories[0].startswith("advisories: serial ")
    assert checked.packages == [] and checked.listener == []  # serve prints neither
    assert checked.in_force.advisories.serial > 0  # the list serve hands to /metrics


def test_serve_mode_refuses_the_listener_before_any_other_step() -> None:
    calls: list[str] = []
    policy = _policy((MISSING,), host="0.0.0.0")
    with pytest.raises(PolicyError) as info:
        run_sequence(policy, _models(policy, "a"), "0.0.0.0", _recording(calls))
    assert info.value.code == "plaintext_not_allowed" and calls == []
    # a cluster worker (host None) has no listener: the sequence goes on to the rules,
    # after every model was checked
    with pytest.raises(PreflightError) as rules:
        run_sequence(policy, _models(policy, "a"), None, _recording(calls))
    assert rules.value.code == "package_missing"
    assert calls == ["before_models", "model 0 a"]


def test_serve_mode_checks_the_host_before_the_first_model(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: {0})
    calls: list[str] = []
    policy = _policy()
    over = tuple(ServedModel(name, policy.engine.model_copy(update={
        "cpu": policy.engine.cpu.model_copy(update={"omp_threads_bind": "5"})}),
        path=Path(name)) for name in ("a", "b"))
    with pytest.raises(PolicyError) as info:
        run_sequence(policy, over, "127.0.0.1", _recording(calls))
    assert info.value.code == "models_over_host" and calls == ["before_models"]


def test_check_mode_collects_rule_then_listener_problems_and_raises_none() -> None:
    policy = _policy((MISSING,), host="0.0.0.0")
    checked = run_sequence(policy, (), "0.0.0.0")
    assert [p.code for p in checked.problems] == ["package_missing", "plaintext_not_allowed"]
    assert checked.runs == []
    assert checked.packages == [f"{MISSING}: not installed; floor no floor"]
    assert checked.listener == ["gateway: plaintext HTTP on 0.0.0.0"]


def test_check_and_serve_refuse_the_same_policy_with_the_same_code(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from appliance.preflight.model_files import CheckedModel
    from appliance.serve import Appliance

    path = tmp_path / "policy.toml"
    path.write_text(f'[preflight]\nadvisories = "{REPO / "policies" / "advisories.json"}"\n'
                    f'packages = ["{MISSING}"]\n[engine]\ndevice = "cpu"\n')
    assert main(["check", "--policy", str(path)]) == 1
    assert "error[package_missing]" in capsys.readouterr().err
    checked_models: list[str] = []

    def check_model(_policy: object, model: ServedModel, stage: Path,
                    *_args: object) -> CheckedModel:
        checked_models.append(model.served_name)
        return CheckedModel(stage, "d" * 64, 0.0, 0.0)

    monkeypatch.setattr("appliance.serve.check_model", check_model)
    policy = load_policy(path)
    app = Appliance(policy=policy, model_dir=tmp_path / "m", public_key=tmp_path / "k",
                    api_keys=["k" * 32])
    try:
        with pytest.raises(ApplianceError) as info:
            app.check()
    finally:
        app.stop()
    assert info.value.code == "package_missing"
    assert checked_models == [policy.model.served_name]  # serve verified the model first
    assert app.runs == [] and app.runtime_dir is None
