"""Deployment policy: a TOML file parsed into strict pydantic models (unknown keys refused).

Shape (see ``policies/default.toml``)::

    schema_version = 1
    [model]     served_name, public_key (path, relative to the policy file)
    [[models]]  several models: served_name, model (store NAME), [models.engine] overrides
                of [engine]; not beside [model]            see appliance/config/models.py
    [scan]      deep
    [engine]    device (cpu|gpu), tool_call_parser, chat_template, max_model_len, dtype,
                startup_timeout_s, extra CPU settings under [engine.cpu]; quantization,
                kv_cache_dtype, enable_prefix_caching, [engine.gpu], [engine.parallel]
                (appliance.config.engine)
    [preflight] advisories (path), packages (checked against advisory floors),
                advisory_feed (installed signed feed), advisories_max_age_days
    [gateway]   host, port, limits, audit_log, allow_plaintext, workers
    [gateway.tls] certificate, private_key, client_ca, client_auth, crl, client_ids
                (appliance.config.tls)
    [store]     root (the trusted model store)            see appliance/config/trust.py
    [trust]     revoked fingerprints, [[trust.keys]]      see appliance/config/trust.py
    [supervisor]                see :mod:`appliance.config.reliability`
    [admission], [admission.redis]   see :mod:`appliance.config.admission`
    [auth]      OIDC bearer tokens, [auth.groups]         see appliance/config/auth.py
    [audit]     audit chain key, checkpoints, journald/syslog copies, prompts
                                                          see appliance/config/audit.py
    [telemetry] OpenTelemetry traces over OTLP            see appliance/config/telemetry.py
    [cluster]   nodes, port, secret_file, firewall, open_ports   see appliance/config/cluster.py

One module per table (:mod:`appliance.config.model`, ``.models``, ``.scan``, ``.engine``,
``.preflight``, ``.gateway``, ``.tls``, ``.trust``, ``.reliability``, ``.admission``,
``.auth``, ``.audit``, ``.telemetry``, ``.cluster``), each on :class:`.base.StrictModel`;
this module assembles them into :class:`Policy` and re-exports every table class.
Cross-table rules: ``[gateway] workers > 1`` needs ``[admission] backend = "redis"`` and no
``[gateway] audit_log`` (one chain, one writer); ``[[models]]`` (:mod:`.models`).

Relative paths are resolved against the policy file's folder. The policy's SHA-256 is kept
so reports and logs can name exactly which policy decided.
"""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import ValidationError, model_validator

from appliance.config.admission import AdmissionPolicy, workers_problem
from appliance.config.audit import AuditPolicy
from appliance.config.auth import AuthPolicy
from appliance.config.base import StrictModel
from appliance.config.cluster import ClusterPolicy
from appliance.config.engine import CpuEngine, EnginePolicy, GpuEngine, ParallelPolicy
from appliance.config.gateway import GatewayPolicy
from appliance.config.model import ModelPolicy
from appliance.config.models import ModelEntry, check_models, check_models_table, merge_engines
from appliance.config.preflight import PreflightPolicy
from appliance.config.reliability import SupervisorPolicy
from appliance.config.scan import ScanPolicy
from appliance.config.telemetry import TelemetryPolicy
from appliance.config.tls import TlsPolicy
from appliance.config.trust import StorePolicy, TrustPolicy
from appliance.errors import PolicyError

__all__ = ["AdmissionPolicy", "AuditPolicy", "AuthPolicy", "ClusterPolicy", "CpuEngine",
           "EnginePolicy", "GatewayPolicy", "GpuEngine", "ModelPolicy", "ParallelPolicy",
           "Policy", "PreflightPolicy", "ScanPolicy", "StorePolicy", "SupervisorPolicy",
           "TelemetryPolicy", "TlsPolicy", "TrustPolicy", "load_policy"]


class Policy(StrictModel):
    schema_version: Literal[1] = 1
    model: ModelPolicy = ModelPolicy()
    models: tuple[ModelEntry, ...] = ()  # [[models]]: several models (config.models)
    scan: ScanPolicy = ScanPolicy()
    engine: EnginePolicy = EnginePolicy()
    preflight: PreflightPolicy = PreflightPolicy()
    gateway: GatewayPolicy = GatewayPolicy()
    store: StorePolicy = StorePolicy()
    trust: TrustPolicy = TrustPolicy()
    supervisor: SupervisorPolicy = SupervisorPolicy()
    cluster: ClusterPolicy | None = None
    admission: AdmissionPolicy = AdmissionPolicy()
    auth: AuthPolicy = AuthPolicy()
    audit: AuditPolicy = AuditPolicy()
    telemetry: TelemetryPolicy = TelemetryPolicy()
    source: Path | None = None
    sha256: str = ""

    @model_validator(mode="before")
    @classmethod
    def _merge_model_engines(cls, data: object) -> object:
        return merge_engines(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _workers_share_admission(self) -> Policy:
        problem = workers_problem(self.gateway.workers, self.admission.backend)
        if problem is not None:
            raise ValueError(problem)
        if self.gateway.workers > 1 and self.gateway.audit_log is not None:
            raise ValueError("gateway.workers > 1 cannot share one gateway.audit_log: the "
                             "audit hash chain has one writer; use workers = 1 with an audit "
                             "log (or no audit log with several workers)")
        return self


def _resolve(base: Path, value: Path | None) -> Path | None:
    if value is None:
        return None
    return value if value.is_absolute() else (base / value).resolve()


def _resolve_keys(base: Path, value: Path | None) -> Path | None:
    if value is not None and str(value).startswith("${"):
        return value  # expanded at serve time (config.base.expand_credential)
    return _resolve(base, value)


def load_policy(path: Path) -> Policy:
    """Read and validate a policy TOML file.

    Raises ``PolicyError`` (code ``policy_invalid``) naming the file and the offending field.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PolicyError(f"cannot read policy: {exc.strerror}", where=str(path),
                          fix="pass --policy with a readable TOML file") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise PolicyError(f"policy is not valid TOML: {exc}", where=str(path),
                          fix="fix the TOML syntax") from None
    for key in ("source", "sha256"):
        if key in data:
            raise PolicyError(f"unknown policy key {key!r}", where=f"{path}: {key}",
                              fix="remove the key")
    check_models_table(data, str(path))
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise PolicyError(f"invalid policy field {field!r}: {first['msg']}",
                          where=f"{path}: {field}",
                          fix="see policies/default.toml for the accepted keys") from None
    try:
        check_models(policy)
    except PolicyError as exc:
        exc.where = f"{path}: {exc.where}"
        raise
    base = path.resolve().parent
    return policy.model_copy(update={
        "model": policy.model.model_copy(
            update={"public_key": _resolve(base, policy.model.public_key)}),
        "preflight": policy.preflight.model_copy(
            update={"advisories": _resolve(base, policy.preflight.advisories),
                    "advisory_feed": _resolve(base, policy.preflight.advisory_feed),
                    "engine_quirks": _resolve(base, policy.preflight.engine_quirks)}),
        "gateway": policy.gateway.model_copy(
            update={"audit_log": _resolve(base, policy.gateway.audit_log),
                    "tls": policy.gateway.tls and policy.gateway.tls.resolved(base)}),
        "store": policy.store.resolved(base), "trust": policy.trust.resolved(base),
        "cluster": policy.cluster and policy.cluster.resolved(base),
        "supervisor": policy.supervisor.model_copy(
            update={"log_dir": _resolve(base, policy.supervisor.log_dir)}),
        "admission": policy.admission.model_copy(
            update={"keys_file": _resolve_keys(base, policy.admission.keys_file)}),
        "auth": policy.auth.resolved(base), "audit": policy.audit.resolved(base),
        "source": path.resolve(),
        "sha256": hashlib.sha256(raw).hexdigest(),
    })
