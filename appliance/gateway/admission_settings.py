"""Admission settings of the gateway: backend (local or Redis), bounded waiting, quotas.

Part of :class:`~appliance.gateway.settings.GatewaySettings` (``settings.admission``); built
by ``appliance serve`` from the policy's ``[admission]`` table
(:mod:`appliance.policy_reliability`). Times are seconds.

* ``backend``: ``"local"`` (state on the gateway's event loop, one process) or ``"redis"``
  (per-key limits, the global pending bound and quotas held in Redis, exact across gateway
  processes and hosts: :mod:`appliance.gateway.admission_redis`).
* ``max_running``: requests the gateway lets into the engine at once (per gateway process:
  the policy's value divided by ``[gateway] workers``); ``None`` = no start gate.
* ``max_queue_wait_s``: a request that cannot start within this long is answered 503
  ``overloaded`` (:mod:`appliance.gateway.admission_gate`).
* ``adaptive``: refuse at once a request that, at the measured service rate, would not
  start within ``max_queue_wait_s`` anyway (the pending bound follows the rate).
* ``quota_state_file``: where the local backend keeps daily / monthly token use
  (:mod:`appliance.gateway.quotas`); ``None`` = in memory only (tests).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class RedisSettings(BaseModel):
    """Where the shared admission state lives.

    ``url``: ``redis://host:port/db`` or ``rediss://`` (TLS), no credentials in it (the
    password comes from ``password``, read from a file by the policy layer). Plain
    ``redis://`` off loopback is refused unless ``allow_plaintext`` (a TLS tunnel).
    ``ca_file`` verifies the server (TLS); ``cert_file``/``key_file`` are the client's
    certificate when the server asks for one. ``prefix`` starts every Redis key (several
    appliances may share a server). ``timeout_s``: one Redis round trip; past it the
    request is refused 503 ``admission_unavailable``. ``lease_s``: an admitted request's
    hold on a concurrency slot lasts this long unless its gateway process renews it (a
    process that dies frees its slots after at most ``lease_s``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str
    username: str | None = Field(default=None, min_length=1, max_length=256)
    password: SecretStr | None = None
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    allow_plaintext: bool = False
    prefix: str = Field(default="appliance", pattern=r"^[A-Za-z0-9._:-]{1,64}$")
    timeout_s: float = Field(default=2.0, gt=0, le=30)
    lease_s: float = Field(default=30.0, ge=2, le=3600)

    @model_validator(mode="after")
    def _check(self) -> RedisSettings:
        parts = urlsplit(self.url)
        if parts.scheme not in ("redis", "rediss") or not parts.hostname:
            raise ValueError("admission.redis.url must look like redis://HOST:PORT/DB or "
                             "rediss://HOST:PORT/DB")
        if parts.username or parts.password or parts.query or parts.fragment:
            raise ValueError("admission.redis.url must hold no credentials or options: put "
                             "the password in admission.redis.password_file")
        if parts.scheme == "redis" and not _loopback(parts.hostname) \
                and not self.allow_plaintext:
            raise ValueError("admission.redis.url is plaintext redis:// to a non-loopback "
                             "host: use rediss:// (TLS) or set allow_plaintext = true")
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("admission.redis: set both cert_file and key_file, or neither")
        if parts.scheme == "redis" and (self.ca_file or self.cert_file):
            raise ValueError("admission.redis: TLS files need a rediss:// url")
        return self

    @property
    def tls(self) -> bool:
        return urlsplit(self.url).scheme == "rediss"


class AdmissionSettings(BaseModel):
    """See the module docstring."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Literal["local", "redis"] = "local"
    redis: RedisSettings | None = None
    max_running: int | None = Field(default=None, ge=1, le=1_000_000)
    max_queue_wait_s: float = Field(default=30.0, gt=0, le=86_400)
    adaptive: bool = True
    quota_state_file: Path | None = None

    @model_validator(mode="after")
    def _check(self) -> AdmissionSettings:
        if self.backend == "redis" and self.redis is None:
            raise ValueError("admission.backend = 'redis' needs [admission.redis] url")
        return self
