"""[admission] backend / bounded-wait / quota keys and [gateway] workers
(appliance.config.admission): parsed, resolved, turned into the gateway's settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.config.policy import Policy, load_policy
from appliance.errors import PolicyError
from appliance.gateway.admission.settings import AdmissionSettings
from appliance.runtime import gateway


def admission_settings(policy: Policy) -> AdmissionSettings:
    """What ``serve`` hands the gateway (``GatewaySettings.admission``)."""
    return gateway.admission_settings(
        policy.admission, base=policy.source and policy.source.parent,
        workers=policy.gateway.workers, max_num_seqs=policy.engine.max_num_seqs)


def _policy(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(text)
    return path


def test_redis_backend_resolves_files_reads_password_and_splits_slots(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "creds").mkdir()
    (tmp_path / "creds" / "redis-password").write_text("s3cret-pass\n")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path / "creds"))
    policy = load_policy(_policy(tmp_path, (
        '[engine]\nmax_num_seqs = 32\n[gateway]\nworkers = 4\n'
        '[admission]\nbackend = "redis"\nmax_queue_wait_s = 12.5\nadaptive = false\n'
        '[admission.redis]\nurl = "rediss://10.0.0.5:6380/0"\n'
        'password_file = "${CREDENTIALS_DIRECTORY}/redis-password"\nca_file = "ca.pem"\n'
        '[admission.default_limits]\ntokens_per_day = 1000\ntokens_per_month = 20000\n')))
    settings = admission_settings(policy)
    assert settings.backend == "redis" and settings.max_running == 8  # 32 over 4 workers
    assert settings.max_queue_wait_s == 12.5 and settings.adaptive is False
    assert settings.redis is not None and settings.redis.tls
    assert settings.redis.password is not None
    assert settings.redis.password.get_secret_value() == "s3cret-pass"
    assert settings.redis.ca_file == tmp_path.resolve() / "ca.pem"
    assert "s3cret" not in repr(settings)
    assert policy.admission.default_limits.tokens_per_day == 1000


def test_local_backend_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))
    settings = admission_settings(load_policy(_policy(tmp_path, "")))
    assert settings.backend == "local" and settings.max_running == 64
    assert settings.max_queue_wait_s == 30.0 and settings.adaptive is True
    assert settings.quota_state_file == tmp_path / "state" / "quotas.json"


@pytest.mark.parametrize(("text", "needle"), [
    ('[gateway]\nworkers = 2\n', "workers > 1 needs admission.backend = 'redis'"),
    ('[admission]\nbackend = "redis"\n', "needs [admission.redis]"),
    ('[admission]\nbackend = "memcached"\n', "admission.backend"),
    ('[gateway]\nworkers = 2\naudit_log = "audit.jsonl"\n[admission]\nbackend = "redis"\n'
     '[admission.redis]\nurl = "redis://127.0.0.1:6379/0"\n',
     "the audit hash chain has one writer"),
    ('[admission.redis]\nurl = "redis://x"\nport = 1\n', "admission.redis.port"),
])
def test_bad_tables_are_refused_at_load(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy(_policy(tmp_path, text))
    assert needle in f"{caught.value.message} {caught.value.where}"


@pytest.mark.parametrize(("url", "needle"), [
    ("redis://10.0.0.5:6379/0", "plaintext redis:// to a non-loopback host"),
    ("redis://:pw@127.0.0.1:6379/0", "no credentials"),
    ("http://127.0.0.1:6379", "must look like redis://"),
])
def test_unsafe_redis_urls_are_refused_at_load(tmp_path: Path, url: str, needle: str) -> None:
    path = _policy(tmp_path, f'[admission]\nbackend = "redis"\n[admission.redis]\nurl = "{url}"\n')
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    assert needle in caught.value.message
    assert caught.value.where == f"{path}: admission.redis"


def test_shared_keys_are_declared_once_and_reach_the_gateway(tmp_path: Path) -> None:
    """The policy tables and the gateway's settings inherit the same declarations, and
    the bridge fills every AdmissionSettings / RedisSettings field from the policy."""
    from appliance.config.admission import (
        AdmissionBackend,
        AdmissionPolicy,
        RedisConnection,
        RedisPolicy,
    )
    from appliance.gateway.admission.settings import RedisSettings

    assert issubclass(AdmissionPolicy, AdmissionBackend)
    assert issubclass(AdmissionSettings, AdmissionBackend)
    assert not set(AdmissionSettings.model_fields) - set(AdmissionPolicy.model_fields)
    assert issubclass(RedisPolicy, RedisConnection)
    assert issubclass(RedisSettings, RedisConnection)
    assert set(RedisSettings.model_fields) - set(RedisConnection.model_fields) == {"password"}
    (tmp_path / "pw").write_text("pw\n")
    policy = load_policy(_policy(tmp_path, (
        '[admission]\nbackend = "redis"\nmax_queue_wait_s = 7.0\nadaptive = false\n'
        '[admission.redis]\nurl = "redis://127.0.0.1:6379/0"\npassword_file = "pw"\n'
        'prefix = "p1"\ntimeout_s = 1.5\nlease_s = 9.0\nusername = "u"\n')))
    settings = gateway.admission_settings(policy.admission, base=tmp_path, workers=1,
                                          max_num_seqs=4)
    assert (settings.max_queue_wait_s, settings.adaptive, settings.max_running) == (7.0, False, 4)
    assert settings.redis is not None and settings.redis.password is not None
    assert settings.redis.password.get_secret_value() == "pw"
    assert (settings.redis.prefix, settings.redis.timeout_s, settings.redis.lease_s,
            settings.redis.username) == ("p1", 1.5, 9.0, "u")
