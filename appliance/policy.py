"""Deployment policy: a TOML file parsed into strict pydantic models (unknown keys refused).

Shape (see ``policies/default.toml``)::

    schema_version = 1
    [model]     served_name, public_key (path, relative to the policy file)
    [scan]      deep
    [engine]    device (cpu|gpu), tool_call_parser, chat_template, max_model_len, dtype,
                startup_timeout_s, extra CPU settings under [engine.cpu]
    [preflight] advisories (path), packages (checked against advisory floors)
    [gateway]   host, port, limits, audit_log, allow_plaintext
    [gateway.tls] certificate, private_key, client_ca, client_auth, crl, client_ids
                (appliance.tls_policy)
    [engine.parallel], [engine.gpu], quantization, kv_cache_dtype, enable_prefix_caching,
    [cluster]   see :mod:`appliance.policy_scale`
    [store]     root (the trusted model store)            see appliance/policy_trust.py
    [trust]     revoked fingerprints, [[trust.keys]]      see appliance/policy_trust.py
    [supervisor], [admission]   see :mod:`appliance.policy_reliability`

Relative paths are resolved against the policy file's folder. The policy's SHA-256 is kept
so reports and logs can name exactly which policy decided.
"""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator

from appliance.errors import PolicyError
from appliance.policy_reliability import AdmissionPolicy, SupervisorPolicy
from appliance.policy_scale import (
    ClusterPolicy,
    GpuEngine,
    KvCacheDtype,
    ParallelPolicy,
    Quantization,
)
from appliance.policy_trust import StorePolicy, TrustPolicy
from appliance.resources import policy_path
from appliance.tls_policy import TlsPolicy


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelPolicy(_Strict):
    served_name: str = Field(default="appliance-model", pattern=r"^[A-Za-z0-9._-]{1,64}$")
    public_key: Path | None = None  # trusted signer key; `serve --public-key` overrides


class ScanPolicy(_Strict):
    deep: bool = False


class CpuEngine(_Strict):
    omp_threads_bind: str = Field(default="0-1", pattern=r"^[0-9,\-|]+$")
    kvcache_space_gib: int = Field(default=1, ge=1, le=1024)


class EnginePolicy(_Strict):
    device: Literal["cpu", "gpu"] = "gpu"
    tool_call_parser: str = "hermes"
    chat_template: str = "chat_template.jinja"  # file inside the signed model folder
    max_model_len: int = Field(default=8192, ge=256, le=1_048_576)
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    max_num_seqs: int = Field(default=64, ge=1, le=4096)
    startup_timeout_s: float = Field(default=900.0, gt=0, le=7200)
    enforce_eager: bool = False
    # Optional scheduler bounds (chaos campaign: small budgets force chunked prefill and
    # preemption): --max-num-batched-tokens, --num-gpu-blocks-override (KV cache blocks).
    max_num_batched_tokens: int | None = Field(default=None, ge=16, le=1_048_576)
    num_kv_blocks: int | None = Field(default=None, ge=1, le=10_000_000)
    quantization: Quantization | None = None  # appliance.policy_scale.VETTED_QUANTIZATION
    kv_cache_dtype: KvCacheDtype = "auto"
    enable_prefix_caching: StrictBool | None = None  # None: the engine's default
    cpu: CpuEngine = CpuEngine()
    gpu: GpuEngine = GpuEngine()
    parallel: ParallelPolicy = ParallelPolicy()

    @field_validator("chat_template")
    @classmethod
    def _relative_name(cls, value: str) -> str:
        parts = Path(value).parts
        if not parts or Path(value).is_absolute() or ".." in parts:
            raise ValueError("must be a relative path inside the model folder")
        return value


class PreflightPolicy(_Strict):
    advisories: Path = Path("advisories.json")
    packages: tuple[str, ...] = ("vllm", "torch", "transformers", "xgrammar")
    # The vetted engine-quirk list (appliance.gateway.quirks). Default: the one shipped with
    # the appliance (package data, appliance.resources), so a policy copied to /etc needs no
    # copy of it; a relative path is resolved against the policy's folder like the others.
    engine_quirks: Path = Field(default_factory=lambda: policy_path("engine-quirks.json"))


class GatewayPolicy(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    max_body_bytes: int = Field(default=8 << 20, ge=1024, le=1 << 30)
    max_messages: int = Field(default=1024, ge=1, le=100_000)
    max_tokens_cap: int = Field(default=4096, ge=1, le=1_048_576)
    max_n: int = Field(default=4, ge=1, le=16)  # bound on a request's `n` (choices)
    request_timeout_s: float = Field(default=600.0, gt=0, le=86_400)
    audit_log: Path | None = None
    allow_plaintext: StrictBool = False  # non-loopback host without TLS (TLS proxy on host)
    tls: TlsPolicy | None = None


class Policy(_Strict):
    schema_version: Literal[1] = 1
    model: ModelPolicy = ModelPolicy()
    scan: ScanPolicy = ScanPolicy()
    engine: EnginePolicy = EnginePolicy()
    preflight: PreflightPolicy = PreflightPolicy()
    gateway: GatewayPolicy = GatewayPolicy()
    store: StorePolicy = StorePolicy()
    trust: TrustPolicy = TrustPolicy()
    supervisor: SupervisorPolicy = SupervisorPolicy()
    admission: AdmissionPolicy = AdmissionPolicy()
    cluster: ClusterPolicy | None = None
    source: Path | None = None
    sha256: str = ""


def _resolve(base: Path, value: Path | None) -> Path | None:
    if value is None:
        return None
    return value if value.is_absolute() else (base / value).resolve()


def _resolve_keys(base: Path, value: Path | None) -> Path | None:
    if value is not None and str(value).startswith("${"):
        return value  # expanded at serve time (policy_reliability.CREDENTIALS_VAR)
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
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise PolicyError(f"invalid policy field {field!r}: {first['msg']}",
                          where=f"{path}: {field}",
                          fix="see policies/default.toml for the accepted keys") from None
    base = path.resolve().parent
    return policy.model_copy(update={
        "model": policy.model.model_copy(
            update={"public_key": _resolve(base, policy.model.public_key)}),
        "preflight": policy.preflight.model_copy(
            update={"advisories": _resolve(base, policy.preflight.advisories),
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
        "source": path.resolve(),
        "sha256": hashlib.sha256(raw).hexdigest(),
    })
