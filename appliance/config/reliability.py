"""Policy tables for reliability: ``[supervisor]`` (engine restarts, logs, drain) and
``[admission]`` (keys file, global bound, default per-key limits; the shared backend and
bounded-wait keys are declared in :mod:`appliance.config.admission`).

Shape (every key optional; see ``policies/default.toml``)::

    [supervisor]
    restart_backoff_initial_s = 1.0   # first restart delay; doubles per death ...
    restart_backoff_max_s = 30.0      # ... up to this bound
    max_deaths = 5                    # N engine deaths within death_window_s -> exit 1
    death_window_s = 600.0            # T (seconds)
    log_dir = "/var/log/appliance"    # engine.log (+ rotated engine.log.1 ...); default:
                                      # $LOGS_DIRECTORY (systemd) or ~/.local/state/appliance
    log_max_bytes = 10485760          # rotate engine.log past this size ...
    log_backups = 5                   # ... keeping this many old files
    drain_timeout_s = 30.0            # SIGTERM: finish in-flight requests for at most this
    probe_interval_s = 0.5            # GET /health on the engine socket this often ...
    probe_timeout_s = 2.0             # ... each probe waiting at most this long;
    hung_probes = 5                   # this many unanswered probes in a row = hung engine
                                      # (killed and restarted like a crash): detected at most
                                      # 10.5 s after its last answer (hung_after_s())
    kill_settle_s = 10.0              # a killed engine's process group must be gone within
                                      # this long, else serve exits 1 (a process stuck in
                                      # the kernel): the service manager takes over

    [admission]
    keys_file = "/etc/appliance/keys.json"   # named keys (``appliance keys``); may start
                                             # with ${CREDENTIALS_DIRECTORY} (systemd)
    max_pending = 256                 # in-flight + queued chat requests -> 503 overloaded
    [admission.default_limits]        # for keys from --api-key-file / $APPLIANCE_API_KEYS
    rpm = 600; tpm = 200000; concurrent = 16; max_tokens = 1024   # each optional
    tokens_per_day = 2000000; tokens_per_month = 40000000         # quotas (UTC windows)

    backend, max_running, max_queue_wait_s, adaptive, quota_state_file, [admission.redis]:
    see :mod:`appliance.config.admission`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import Field, model_validator

from appliance.config.admission import Backend, MaxRunning, QueueWait, RedisPolicy
from appliance.config.base import StrictModel
from appliance.config.keys import KeyLimits

# Shared with appliance.gateway.settings.GatewaySettings (declared once, here):
# the global bound on chat requests in flight plus queued (503 overloaded beyond it) and the
# SIGTERM drain (seconds in-flight requests get).
MaxPending = Annotated[int, Field(ge=1, le=1_000_000)]
DEFAULT_MAX_PENDING = 256
DrainTimeout = Annotated[float, Field(ge=0, le=3600)]
DEFAULT_DRAIN_TIMEOUT_S = 30.0


class SupervisorPolicy(StrictModel):
    restart_backoff_initial_s: float = Field(default=1.0, ge=0, le=600)
    restart_backoff_max_s: float = Field(default=30.0, ge=0, le=3600)
    max_deaths: int = Field(default=5, ge=1, le=1000)
    death_window_s: float = Field(default=600.0, gt=0, le=86_400)
    log_dir: Path | None = None
    log_max_bytes: int = Field(default=10 << 20, ge=4096, le=1 << 34)
    log_backups: int = Field(default=5, ge=1, le=100)
    drain_timeout_s: DrainTimeout = DEFAULT_DRAIN_TIMEOUT_S
    probe_interval_s: float = Field(default=0.5, ge=0.05, le=60)
    probe_timeout_s: float = Field(default=2.0, ge=0.05, le=120)
    hung_probes: int = Field(default=5, ge=1, le=1000)
    kill_settle_s: float = Field(default=10.0, ge=0.1, le=600)

    @model_validator(mode="after")
    def _backoff(self) -> SupervisorPolicy:
        if self.restart_backoff_max_s < self.restart_backoff_initial_s:
            raise ValueError("restart_backoff_max_s must be >= restart_backoff_initial_s")
        return self

    def hung_after_s(self) -> float:
        """Upper bound (seconds) from the engine's last answer to it being declared hung.

        Probes start ``probe_interval_s`` apart, or right after the previous one timed out
        when ``probe_timeout_s`` is longer: the first unanswered probe starts at most one
        interval after the last answer, and the ``hung_probes``-th times out at
        ``interval + (hung_probes - 1) * max(interval, timeout) + timeout``; with the
        timeout at most the interval that is ``hung_probes * interval + timeout``."""
        step = max(self.probe_interval_s, self.probe_timeout_s)
        return self.probe_interval_s + (self.hung_probes - 1) * step + self.probe_timeout_s

    def engine_log_dir(self) -> Path:
        """Where engine logs go: ``log_dir``, else ``$LOGS_DIRECTORY`` (systemd
        ``LogsDirectory=``), else ``~/.local/state/appliance/logs``."""
        if self.log_dir is not None:
            return self.log_dir
        systemd = os.environ.get("LOGS_DIRECTORY", "").split(":")[0]
        if systemd:
            return Path(systemd)
        state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        return Path(state) / "appliance" / "logs"


CREDENTIALS_VAR = "${CREDENTIALS_DIRECTORY}"


class AdmissionPolicy(QueueWait):
    keys_file: Path | None = None
    max_pending: MaxPending = DEFAULT_MAX_PENDING
    default_limits: KeyLimits = KeyLimits()
    # Shared backend, bounded waiting (max_queue_wait_s, adaptive: QueueWait), quotas:
    # appliance.config.admission.
    backend: Backend = "local"
    redis: RedisPolicy | None = None
    max_running: MaxRunning | None = None
    quota_state_file: Path | None = None

    @model_validator(mode="after")
    def _backend(self) -> AdmissionPolicy:
        if self.backend == "redis" and self.redis is None:
            raise ValueError("backend = 'redis' needs [admission.redis] with url")
        return self

    def resolved_keys_file(self) -> Path | None:
        """``keys_file`` with a leading ``${CREDENTIALS_DIRECTORY}`` expanded (systemd
        ``LoadCredential=``). Raises ``ValueError`` if the variable is unset."""
        if self.keys_file is None:
            return None
        text = str(self.keys_file)
        if text.startswith(CREDENTIALS_VAR):
            base = os.environ.get("CREDENTIALS_DIRECTORY")
            if not base:
                raise ValueError(f"admission.keys_file uses {CREDENTIALS_VAR} but it is unset "
                                 "(not started by systemd with LoadCredential=)")
            return Path(base + text[len(CREDENTIALS_VAR):])
        return self.keys_file
