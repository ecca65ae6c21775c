"""``[admission]`` and ``[admission.redis]``: keys file, global bound, default per-key limits
and quotas, the shared admission backend and bounded waiting.

Every key the gateway reads is declared once here, in a class the policy table and the
gateway's runtime settings both inherit: :class:`KeyAdmission` (``keys_file``,
``max_pending``, ``default_limits``; inherited by ``GatewaySettings``),
:class:`AdmissionBackend` (``backend``, ``redis``, ``max_running``, ``quota_state_file`` and
:class:`QueueWait`'s ``max_queue_wait_s`` / ``adaptive``; generic in its Redis table: the
policy's :class:`RedisPolicy` names a password file, the gateway's ``RedisSettings`` holds the
password) and :class:`RedisConnection`. ``AdmissionBackend`` holds the one check that
``backend = "redis"`` has ``[admission.redis]``. The values resolved at serve time (files
read, ``${CREDENTIALS_DIRECTORY}`` expanded, ``max_running`` split per gateway process) are
resolved by :func:`appliance.runtime.gateway_settings` with :func:`credential_path` and
:func:`default_state_file` from here.

Shape (every key optional; see ``policies/default.toml``)::

    [admission]
    keys_file = "/etc/appliance/keys.json"   # named keys (``appliance keys``); may start
                                             # with ${CREDENTIALS_DIRECTORY} (systemd)
    max_pending = 256            # in-flight + queued chat requests -> 503 overloaded
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
    [admission.default_limits]   # for keys from --api-key-file / $APPLIANCE_API_KEYS
    rpm = 600; tpm = 200000; concurrent = 16; max_tokens = 1024   # each optional
    tokens_per_day = 2000000; tokens_per_month = 40000000         # quotas (UTC windows)

Paths are relative to the policy's folder or ``${CREDENTIALS_DIRECTORY}/NAME`` (systemd
``LoadCredential=``, expanded at serve time). Errors: a bad key or an unsafe ``url`` is a
``PolicyError`` at load naming ``admission.<key>``; :func:`credential_path` raises
``PolicyError`` naming a credential it cannot expand. ``[gateway] workers =
N`` (N gateway processes on one port, :mod:`appliance.gateway.http.workers`) needs ``backend =
"redis"``: refused at policy load otherwise (:mod:`appliance.config.policy`). Times are
seconds.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Generic, Literal, Self, TypeVar
from urllib.parse import urlsplit

from pydantic import Field, StrictBool, model_validator

from appliance.config.base import CREDENTIALS_VAR, StrictModel, expand_credential
from appliance.config.keys import KeyLimits
from appliance.config.reliability import DEFAULT_MAX_PENDING, MaxPending
from appliance.config.tls import is_loopback
from appliance.errors import PolicyError

Backend = Literal["local", "redis"]
# Requests let into the engine at once (start gate); None = no start gate.
MaxRunning = Annotated[int, Field(ge=1, le=1_000_000)]

class QueueWait(StrictModel):
    """The bounded-wait keys the gateway reads (bounds and defaults live only here):
    ``max_queue_wait_s`` (cannot start within it -> 503 ``overloaded``) and ``adaptive``
    (refuse at once what the measured service rate cannot start in time)."""

    max_queue_wait_s: float = Field(default=30.0, gt=0, le=86_400)
    adaptive: StrictBool = True


class RedisConnection(StrictModel):
    """Where the shared admission state lives (every key but the password's source).

    ``url``: ``redis://host:port/db`` or ``rediss://`` (TLS), no credentials in it. Plain
    ``redis://`` off loopback is refused unless ``allow_plaintext`` (a TLS tunnel).
    ``ca_file`` verifies the server (TLS); ``cert_file``/``key_file`` are the client's
    certificate when the server asks for one. ``prefix`` starts every Redis key (several
    appliances may share a server). ``timeout_s``: one Redis round trip; past it the
    request is refused 503 ``admission_unavailable``. ``lease_s``: an admitted request's
    hold on a concurrency slot lasts this long unless its gateway process renews it (a
    process that dies frees its slots after at most ``lease_s``).
    """

    url: str = Field(min_length=8, max_length=512)
    username: str | None = Field(default=None, min_length=1, max_length=256)
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    allow_plaintext: StrictBool = False
    prefix: str = Field(default="appliance", pattern=r"^[A-Za-z0-9._:-]{1,64}$")
    timeout_s: float = Field(default=2.0, gt=0, le=30)
    lease_s: float = Field(default=30.0, ge=2, le=3600)

    @model_validator(mode="after")
    def _check(self) -> RedisConnection:
        parts = urlsplit(self.url)
        if parts.scheme not in ("redis", "rediss") or not parts.hostname:
            raise ValueError("admission.redis.url must look like redis://HOST:PORT/DB or "
                             "rediss://HOST:PORT/DB")
        if parts.username or parts.password or parts.query or parts.fragment:
            raise ValueError("admission.redis.url must hold no credentials or options: put "
                             "the password in admission.redis.password_file")
        if parts.scheme == "redis" and not is_loopback(parts.hostname) \
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


RedisT = TypeVar("RedisT", bound=RedisConnection)


class RedisPolicy(RedisConnection):
    """``[admission.redis]`` (see the module docstring): the connection keys plus
    ``password_file`` (the password is never in the policy)."""

    password_file: Path | None = None


class KeyAdmission(StrictModel):
    """The ``[admission]`` keys of the caller's admission (declared once here; inherited by
    :class:`AdmissionPolicy` and the gateway's ``GatewaySettings``): ``keys_file`` (named
    keys, :mod:`appliance.config.keys`; the runtime value has ``${CREDENTIALS_DIRECTORY}``
    expanded), ``max_pending`` (in flight + queued chat requests; beyond: 503
    ``overloaded``) and ``default_limits`` (the limits of the plain API keys)."""

    keys_file: Path | None = None
    max_pending: MaxPending = DEFAULT_MAX_PENDING
    default_limits: KeyLimits = KeyLimits()


class AdmissionBackend(QueueWait, Generic[RedisT]):
    """The backend keys (declared once here): the policy's :class:`AdmissionPolicy` holds
    ``redis`` as :class:`RedisPolicy` (a password file), the gateway's
    ``AdmissionSettings`` (:mod:`appliance.gateway.admission.settings`) as its
    ``RedisSettings`` (the password read). ``backend``: ``"local"`` or ``"redis"`` (needs
    ``redis``: the one check of that rule); ``max_running``: requests let into the engine at
    once (the runtime value is per gateway process); ``quota_state_file``: the local
    backend's token use (the runtime value is resolved, ``None`` = in memory)."""

    backend: Backend = "local"
    redis: RedisT | None = None
    max_running: MaxRunning | None = None
    quota_state_file: Path | None = None

    @model_validator(mode="after")
    def _backend(self) -> Self:
        if self.backend == "redis" and self.redis is None:
            raise ValueError("backend = 'redis' needs [admission.redis] with url")
        return self


class AdmissionPolicy(AdmissionBackend[RedisPolicy], KeyAdmission):
    """``[admission]`` (see the module docstring)."""

    def resolved_keys_file(self) -> Path | None:
        """``keys_file`` with a leading ``${CREDENTIALS_DIRECTORY}`` expanded (systemd
        ``LoadCredential=``). Raises ``ValueError`` if the variable is unset."""
        if self.keys_file is None:
            return None
        return expand_credential(self.keys_file, "admission.keys_file")


def workers_problem(workers: int, backend: Backend) -> str | None:
    """The one statement of the rule "``[gateway] workers > 1`` needs the Redis backend"
    (each process would enforce every key's limits on its own): the refusal, or ``None``.
    Checked at policy load (:mod:`appliance.config.policy`) and by the gateway's
    ``spawn_workers`` for callers that bypass the policy."""
    if workers > 1 and backend != "redis":
        return ("gateway.workers > 1 needs admission.backend = 'redis' (each process would "
                "enforce every key's limits on its own)")
    return None


def credential_path(base: Path | None, value: Path | None, name: str) -> Path | None:
    """``value`` with ``${CREDENTIALS_DIRECTORY}/`` expanded, else resolved against
    ``base`` (the policy's folder) when relative. Raises ``PolicyError`` naming
    ``admission.<name>`` when the variable is unset."""
    if value is None:
        return None
    if str(value).startswith(CREDENTIALS_VAR):
        try:
            return expand_credential(value, f"admission.{name}")
        except ValueError as exc:
            raise PolicyError(str(exc), where=f"admission.{name}",
                              fix="run under systemd with LoadCredential= (or give a path)"
                              ) from None
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
