"""The shared-admission and bounded-wait keys of ``[admission]``, and how ``serve`` turns
them into the gateway's :class:`~appliance.gateway.admission_settings.AdmissionSettings`.

Shape (every key optional; the rest of ``[admission]`` is in
:mod:`appliance.policy_reliability`)::

    [admission]
    backend = "local"            # or "redis": limits, pending bound and quotas in Redis,
                                 # exact across gateway processes ([gateway] workers) and hosts
    max_running = 64             # requests let into the engine at once (default: the
                                 # engine's max_num_seqs), split over [gateway] workers
    max_queue_wait_s = 30.0      # cannot start within this long -> 503 overloaded
    adaptive = true              # shed at once what the measured rate cannot start in time
    quota_state_file = "/var/lib/appliance/quotas.json"   # local backend's daily/monthly
                                 # token use; default $STATE_DIRECTORY/quotas.json (systemd
                                 # StateDirectory=) or ~/.local/state/appliance/quotas.json
    [admission.redis]
    url = "rediss://10.0.0.5:6380/0"     # redis:// only on loopback unless allow_plaintext
    username = "appliance"               # optional (Redis ACL user)
    password_file = "${CREDENTIALS_DIRECTORY}/redis-password"   # never the password itself
    ca_file = "redis-ca.pem"             # TLS: the server's CA (default: system CAs)
    cert_file = "redis-client.pem"       # TLS client certificate, with key_file
    key_file = "redis-client.key"
    prefix = "appliance"                 # Redis key prefix (several appliances, one Redis)
    timeout_s = 2.0                      # one round trip; beyond -> 503 admission_unavailable
    lease_s = 30.0                       # a dead gateway process's slots free after this

Paths are relative to the policy's folder or ``${CREDENTIALS_DIRECTORY}/NAME`` (systemd
``LoadCredential=``). Errors are ``PolicyError`` naming ``admission.<key>``. ``[gateway]
workers = N`` (N gateway processes on one port, :mod:`appliance.gateway.workers`) needs
``backend = "redis"``: refused at policy load otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from appliance.errors import PolicyError

if TYPE_CHECKING:
    from appliance.gateway.admission_settings import AdmissionSettings
    from appliance.policy import Policy

CREDENTIALS_PREFIX = "${CREDENTIALS_DIRECTORY}/"


class RedisPolicy(BaseModel):
    """``[admission.redis]`` (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(min_length=8, max_length=512)
    username: str | None = Field(default=None, min_length=1, max_length=256)
    password_file: Path | None = None
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    allow_plaintext: StrictBool = False
    prefix: str = Field(default="appliance", pattern=r"^[A-Za-z0-9._:-]{1,64}$")
    timeout_s: float = Field(default=2.0, gt=0, le=30)
    lease_s: float = Field(default=30.0, ge=2, le=3600)


Backend = Literal["local", "redis"]


def _path(base: Path | None, value: Path | None, name: str) -> Path | None:
    if value is None:
        return None
    text = str(value)
    if text.startswith(CREDENTIALS_PREFIX):
        folder = os.environ.get("CREDENTIALS_DIRECTORY", "")
        if not folder:
            raise PolicyError(f"admission.{name} names a systemd credential but "
                              "$CREDENTIALS_DIRECTORY is not set",
                              where=f"admission.{name}",
                              fix="run under systemd with LoadCredential= (or give a path)")
        return Path(folder) / text[len(CREDENTIALS_PREFIX):]
    if value.is_absolute() or base is None:
        return value
    return (base / value).resolve()


def default_state_file() -> Path:
    """``$STATE_DIRECTORY/quotas.json`` (systemd), else ``~/.local/state/appliance/...``."""
    systemd = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
    if systemd:
        return Path(systemd) / "quotas.json"
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "appliance" / "quotas.json"


def admission_settings(policy: Policy) -> AdmissionSettings:
    """The gateway's admission settings for ``policy`` (one gateway process of
    ``[gateway] workers``: ``max_running`` is split evenly, at least 1 each). Reads the
    Redis password file. Raises ``PolicyError`` naming the key."""
    from pydantic import SecretStr, ValidationError

    from appliance.gateway.admission_settings import AdmissionSettings, RedisSettings

    adm = policy.admission
    base = policy.source.parent if policy.source is not None else None
    workers = policy.gateway.workers
    running = adm.max_running if adm.max_running is not None else policy.engine.max_num_seqs
    redis = None
    if adm.redis is not None:
        pol = adm.redis
        password = None
        secret = _path(base, pol.password_file, "redis.password_file")
        if secret is not None:
            try:
                password = secret.read_text("utf-8").strip()
            except OSError as exc:
                raise PolicyError(f"cannot read the Redis password file: {exc.strerror}",
                                  where=f"admission.redis.password_file: {secret}",
                                  fix="point password_file at a readable file") from None
        try:
            redis = RedisSettings(
                url=pol.url, username=pol.username,
                password=SecretStr(password) if password is not None else None,
                ca_file=_path(base, pol.ca_file, "redis.ca_file"),
                cert_file=_path(base, pol.cert_file, "redis.cert_file"),
                key_file=_path(base, pol.key_file, "redis.key_file"),
                allow_plaintext=pol.allow_plaintext, prefix=pol.prefix,
                timeout_s=pol.timeout_s, lease_s=pol.lease_s)
        except ValidationError as exc:
            raise PolicyError(f"invalid [admission.redis]: {exc.errors()[0]['msg']}",
                              where="admission.redis",
                              fix="see appliance/policy_admission.py for the accepted keys"
                              ) from None
    state_file = None
    if adm.backend == "local":
        state_file = _path(base, adm.quota_state_file, "quota_state_file") \
            or default_state_file()
    return AdmissionSettings(backend=adm.backend, redis=redis,
                             max_running=max(1, running // workers),
                             max_queue_wait_s=adm.max_queue_wait_s, adaptive=adm.adaptive,
                             quota_state_file=state_file)
