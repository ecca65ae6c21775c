"""``[gateway]``: the listener (``host``, ``port``, ``workers``), request bounds, the audit
log and transport (``allow_plaintext``, ``[gateway.tls]`` in :mod:`appliance.config.tls`).

:class:`GatewayLimits` holds every ``[gateway]`` key the gateway itself reads, declared once:
:class:`GatewayPolicy` (the table) and :class:`appliance.gateway.settings.GatewaySettings`
both inherit these fields with their bounds and defaults, and the bridge
(:func:`appliance.runtime.gateway_settings`) hands over every field declared here by name (a
new key here reaches the gateway with no other edit).
Sizes are bytes, times seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, StrictBool, field_validator

from appliance.config.base import CREDENTIALS_VAR, StrictModel
from appliance.config.networks import check_networks
from appliance.config.tls import TlsPolicy


class GatewayLimits(StrictModel):
    """The ``[gateway]`` keys the gateway reads (bounds and defaults live only here)."""

    max_body_bytes: int = Field(default=8 << 20, ge=1024, le=1 << 30)
    max_messages: int = Field(default=1024, ge=1, le=100_000)
    max_tokens_cap: int = Field(default=4096, ge=1, le=1_048_576)
    max_n: int = Field(default=4, ge=1, le=16)  # bound on a request's `n` (choices)
    request_timeout_s: float = Field(default=600.0, gt=0, le=86_400)
    audit_log: Path | None = None
    allow_plaintext: StrictBool = False  # non-loopback host without TLS (TLS proxy on host)
    tls: TlsPolicy | None = None
    # source-address allow-list for every route but the health probes, the proxies whose
    # forwarded-for header is believed, and which header they set
    # (appliance.config.networks, appliance.gateway.auth.source_address)
    allowed_sources: tuple[str, ...] | None = None
    trusted_proxies: tuple[str, ...] | None = None
    forwarded_header: Literal["x-forwarded-for", "forwarded"] = "x-forwarded-for"

    @field_validator("allowed_sources", "trusted_proxies")
    @classmethod
    def _networks(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return check_networks(value)
    # Engine cache per tenant (appliance.gateway.auth.tenant): "key" (each caller alone),
    # "group" (an OIDC group shares), "none" (everyone shares); the salt's HMAC secret file
    # (absolute or "${CREDENTIALS_DIRECTORY}/NAME"; absent: random at each start).
    cache_isolation: Literal["key", "group", "none"] = "key"
    cache_salt_secret: Path | None = None
    # key ids that see every key's series on GET /metrics (others see only their own)
    metrics_keys: tuple[str, ...] = Field(default=(), max_length=64)
    # engine answers refused by the gateway's validation (invalid_structured_output,
    # invalid_tool_call) asked again at most this often, non-streaming only, within the
    # request's time budget (appliance.gateway.chat.regenerate; docs/gateway.md)
    regenerate_invalid: int = Field(default=0, ge=0, le=3)

    @field_validator("cache_salt_secret")
    @classmethod
    def _secret_path(cls, value: Path | None) -> Path | None:
        if value is not None and not (value.is_absolute()
                                      or str(value).startswith(CREDENTIALS_VAR + "/")):
            raise ValueError("cache_salt_secret must be an absolute path or "
                             f"{CREDENTIALS_VAR}/NAME")
        return value


class _Listener(StrictModel):
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    # gateway processes on that port (appliance.gateway.http.workers; > 1 needs the Redis
    # admission backend, appliance.config.admission)
    workers: int = Field(default=1, ge=1, le=64)


# ``[gateway]``: ``host``, ``port`` (where ``serve`` listens; ``--host``/``--port``
# override) and ``workers`` (how many gateway processes ``serve`` runs there), then the
# GatewayLimits keys. (No docstring: it would enter the JSON schema.)
class GatewayPolicy(GatewayLimits, _Listener):
    pass

