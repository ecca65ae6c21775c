"""Policy table for reliability: ``[supervisor]`` (engine restarts, logs, drain), and the
bounds the ``[admission]`` table (:mod:`appliance.config.admission`) and the gateway's
settings share (``MaxPending``, ``DrainTimeout``).

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
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import Field, model_validator

from appliance.config.base import StrictModel

# Shared with appliance.gateway.settings.GatewaySettings (declared once, here):
# the global bound on chat requests in flight plus queued (503 overloaded beyond it) and the
# SIGTERM drain (seconds in-flight requests get).
MaxPending = Annotated[int, Field(ge=1, le=1_000_000)]
DEFAULT_MAX_PENDING = 256
DrainTimeout = Annotated[float, Field(ge=0, le=3600)]
DEFAULT_DRAIN_TIMEOUT_S = 30.0


class Drain(StrictModel):
    """``drain_timeout_s`` (seconds in-flight requests get after SIGTERM), declared once:
    inherited by :class:`SupervisorPolicy` and the gateway's ``GatewaySettings``."""

    drain_timeout_s: DrainTimeout = DEFAULT_DRAIN_TIMEOUT_S


class SupervisorPolicy(Drain):
    restart_backoff_initial_s: float = Field(default=1.0, ge=0, le=600)
    restart_backoff_max_s: float = Field(default=30.0, ge=0, le=3600)
    max_deaths: int = Field(default=5, ge=1, le=1000)
    death_window_s: float = Field(default=600.0, gt=0, le=86_400)
    log_dir: Path | None = None
    log_max_bytes: int = Field(default=10 << 20, ge=4096, le=1 << 34)
    log_backups: int = Field(default=5, ge=1, le=100)
    # drain_timeout_s: Drain
    probe_interval_s: float = Field(default=0.5, ge=0.05, le=60)
    probe_timeout_s: float = Field(default=2.0, ge=0.05, le=120)
    hung_probes: int = Field(default=5, ge=1, le=1000)
    kill_settle_s: float = Field(default=10.0, ge=0.1, le=600)
    # [[models]]: one model's crash loop ends `serve` (true) or only that model (false: it
    # is refused 503 engine_unavailable, /health/ready says degraded, the others serve).
    exit_on_model_failure: bool = False

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
