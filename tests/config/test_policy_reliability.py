"""[supervisor] and [admission] policy tables (appliance.config.reliability)."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.config.policy import load_policy
from appliance.errors import PolicyError

REPO = Path(__file__).resolve().parents[2]


def test_tables_parse_and_paths_resolve_against_the_policy(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(
        '[supervisor]\nmax_deaths = 3\ndeath_window_s = 60\nlog_dir = "logs"\n'
        'drain_timeout_s = 5\n[admission]\nkeys_file = "keys.json"\nmax_pending = 10\n'
        '[admission.default_limits]\nrpm = 60\nconcurrent = 2\n'
        '[preflight]\nengine_quirks = "q.json"\n')
    policy = load_policy(tmp_path / "p.toml")
    assert policy.supervisor.max_deaths == 3
    assert policy.supervisor.engine_log_dir() == tmp_path.resolve() / "logs"
    assert policy.admission.resolved_keys_file() == tmp_path.resolve() / "keys.json"
    assert policy.admission.default_limits.concurrent == 2
    assert policy.preflight.engine_quirks == tmp_path.resolve() / "q.json"


def test_shipped_policies_name_the_shipped_quirks_file() -> None:
    for name in ("default.toml", "cpu-demo.toml"):
        assert load_policy(REPO / "policies" / name).preflight.engine_quirks == (
            REPO / "policies" / "engine-quirks.json")


def test_credentials_directory_is_expanded_at_serve_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "p.toml").write_text(
        '[admission]\nkeys_file = "${CREDENTIALS_DIRECTORY}/keys.json"\n')
    policy = load_policy(tmp_path / "p.toml")
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    with pytest.raises(ValueError, match="CREDENTIALS_DIRECTORY"):
        policy.admission.resolved_keys_file()
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", "/run/credentials/appliance.service")
    assert policy.admission.resolved_keys_file() == Path(
        "/run/credentials/appliance.service/keys.json")


def test_log_dir_defaults_to_systemd_logs_directory(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    policy = load_policy(REPO / "policies" / "cpu-demo.toml")
    monkeypatch.setenv("LOGS_DIRECTORY", "/var/log/appliance")
    assert policy.supervisor.engine_log_dir() == Path("/var/log/appliance")


@pytest.mark.parametrize("body, field", [
    ("[supervisor]\nmax_deaths = 0\n", "supervisor.max_deaths"),
    ("[supervisor]\nrestart_backoff_initial_s = 5\nrestart_backoff_max_s = 1\n", "supervisor"),
    ("[admission]\nmax_pending = 0\n", "admission.max_pending"),
    ("[admission.default_limits]\nrpm = 0\n", "admission.default_limits.rpm"),
    ("[admission]\nkeyfile = \"k\"\n", "admission.keyfile"),
    ("[supervisor]\nprobe_interval_s = 0\n", "supervisor.probe_interval_s"),
    ("[supervisor]\nprobe_timeout_s = 0.01\n", "supervisor.probe_timeout_s"),
    ("[supervisor]\nhung_probes = 0\n", "supervisor.hung_probes"),
])
def test_bad_values_are_refused_naming_the_field(tmp_path: Path, body: str, field: str) -> None:
    path = tmp_path / "p.toml"
    path.write_text(body)
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert field in (info.value.where or "")


def test_policy_outside_the_checkout_uses_the_shipped_quirk_list(tmp_path: Path) -> None:
    """A policy copied to /etc (nspawn boot test, issue 9) names no quirk file: the shipped,
    vetted list is used, not a missing file beside the policy."""
    from appliance.resources import policy_path

    (tmp_path / "policy.toml").write_text("[model]\nserved_name = \"m\"\n")
    quirks = load_policy(tmp_path / "policy.toml").preflight.engine_quirks
    assert quirks == policy_path("engine-quirks.json") and quirks.is_file()


def test_hung_engine_probe_keys_and_their_detection_bound(tmp_path: Path) -> None:
    default = load_policy(REPO / "policies" / "cpu-demo.toml").supervisor
    assert (default.probe_interval_s, default.probe_timeout_s, default.hung_probes) == (
        0.5, 2.0, 5)
    # first probe 0.5 s after the last answer, then 5 probes of up to 2 s back to back
    assert default.hung_after_s() == pytest.approx(10.5)
    (tmp_path / "p.toml").write_text(
        "[supervisor]\nprobe_interval_s = 1\nprobe_timeout_s = 0.5\nhung_probes = 3\n")
    policy = load_policy(tmp_path / "p.toml").supervisor
    assert policy.hung_after_s() == pytest.approx(3.5)  # 3 x interval + timeout
