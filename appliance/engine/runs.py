"""The served models' engines in ``serve``: one :class:`ModelRun` per model, started one
after the other, supervised, given up after a crash loop, waited on until a stop signal.

- :class:`ModelRun`: a checked model (``served``, its verified folder ``staged``, the signed
  manifest's root ``digest``) and, once started, its ``spec`` and ``supervisor``;
- :func:`start_engine`: one model's supervised engine (own socket folder and log; a
  :class:`~appliance.engine.cluster.ClusterSupervisor` with ``[cluster]``), waited until ready;
  :func:`stop_engines` stops them all;
- :func:`given_up`: the crash-loop policy across the models (``[supervisor]
  exit_on_model_failure``);
- :func:`wait_for_stop`: ``serve``'s main loop until SIGTERM/SIGINT (:mod:`.stopping`) or a
  crash loop ends it; returns the exit status.

Times are wall seconds. Progress lines go to ``report``
(:func:`appliance.engine.sdnotify.say`).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.config.cluster import ClusterPolicy
from appliance.config.models import ServedModel
from appliance.config.reliability import SupervisorPolicy
from appliance.engine.launcher import ClusterRole, Engine, EngineSpec
from appliance.engine.request_bounds import RequestBounds
from appliance.engine.stopping import SIGNALS, signal_name
from appliance.engine.supervisor import Supervisor

__all__ = ["ModelRun", "Timings", "given_up", "start_engine", "stop_engines", "supervisors",
           "wait_for_stop"]

Report = Callable[[str], None]


@dataclass
class Timings:
    """Seconds each step of the spine took, summed over the models."""

    verify_s: float = 0.0
    scan_s: float = 0.0
    preflight_s: float = 0.0
    engine_ready_s: float = 0.0


@dataclass
class ModelRun:
    """One served model in the spine: what the policy says (``served``), its verified
    folder (``staged``), the signed manifest's root ``digest``, then its engine."""

    served: ServedModel
    staged: Path
    digest: str
    supervisor: Supervisor | None = None
    spec: EngineSpec | None = None

    @property
    def engine(self) -> Engine | None:
        """The engine process serving now (replaced on each supervised restart)."""
        return self.supervisor.engine if self.supervisor is not None else None


def supervisors(runs: list[ModelRun]) -> list[Supervisor]:
    """Every started model's supervisor, in model order."""
    return [run.supervisor for run in runs if run.supervisor is not None]


def stop_engines(runs: list[ModelRun]) -> None:
    """Stop every started engine (its whole process group) and forget its supervisor."""
    for run in runs:
        if run.supervisor is not None:
            run.supervisor.stop()
            run.supervisor = None


def start_engine(run: ModelRun, index: int, several: bool, runtime_dir: Path,
                 supervision: SupervisorPolicy, max_n: int, cluster: ClusterPolicy | None,
                 role: ClusterRole | None, secret: bytes, report: Report) -> float:
    """Start ``run``'s supervised engine (socket folder ``run``/``run-INDEX`` under
    ``runtime_dir``; log ``engine.log``, or ``engine-NAME.log`` when ``several``) and wait
    until it is ready; returns the seconds that took. Sets ``run.spec``/``run.supervisor``
    before the start, so a failed start is still stopped."""
    name = run.served.served_name
    spec = EngineSpec(model_dir=run.staged, served_name=name, engine=run.served.engine,
                      runtime_dir=runtime_dir / ("run" if index == 0 else f"run-{index}"),
                      cluster=role, bounds=RequestBounds(max_n=max_n))
    timeout = run.served.engine.startup_timeout_s
    supervisor: Supervisor
    if cluster is not None:
        from appliance.engine.cluster import ClusterSupervisor

        supervisor = ClusterSupervisor(spec, supervision, timeout, cluster, secret, run.digest)
    else:
        supervisor = Supervisor(spec, supervision, timeout,
                                log_name=f"engine-{name}.log" if several else "engine.log")
    run.spec, run.supervisor = spec, supervisor
    label = f"{name}: " if several else ""
    report(f"{label}engine: starting vLLM (log {supervisor.log_path})")
    ready_s = supervisor.start()
    report(f"{label}engine: ready after {ready_s:.1f} s")
    return ready_s


def given_up(runs: list[ModelRun], reported: set[int], exit_on_model_failure: bool,
             report: Report) -> bool:
    """Report each engine newly in a crash loop (``reported``: the ids of supervisors
    already reported, updated); ``True`` when ``serve`` must end (exit 1): every engine has
    failed, or any has and ``exit_on_model_failure`` is set (one model: always). Otherwise
    the failed model is refused 503 ``engine_unavailable`` (its status is ``failed``) and
    the others keep serving."""
    running = supervisors(runs)
    failed = [s for s in running if s.fatal.is_set()]
    newly = [s for s in failed if id(s) not in reported]
    for supervisor in newly:
        reported.add(id(supervisor))
        report(supervisor.fatal_message)
    if not failed:
        return False
    if len(failed) == len(running) or exit_on_model_failure:
        return True
    if newly:  # the list of given-up models grew: say it once more, whole
        names = [run.served.served_name for run in runs
                 if run.supervisor is not None and run.supervisor.fatal.is_set()]
        report(f"model(s) {', '.join(names)} given up after a crash loop: refused 503 "
               f"engine_unavailable until `serve` restarts; {len(running) - len(failed)} "
               "other model(s) keep serving (supervisor.exit_on_model_failure = true ends "
               "serve instead)")
    return False


def wait_for_stop(runs: list[ModelRun], supervision: SupervisorPolicy,
                  on_sighup: Callable[[int, Any], None], stop: Callable[[], None],
                  report: Report) -> int:
    """Serve until a stop signal (SIGTERM/SIGINT; :mod:`.stopping`): mark every engine
    draining, ``stop()``, and return ``128 + signum`` (143 for SIGTERM, 130 for SIGINT); or
    until :func:`given_up` says so (``stop()``, exit 1). SIGHUP calls ``on_sighup`` (unless
    the stop handlers were installed with ``hup_stops``, as by the demo). Installs the stop
    handlers itself when nobody did (and removes them again on return)."""
    own = not SIGNALS.installed
    hup = None
    reported: set[int] = set()
    try:
        with SIGNALS.polled():  # from here on a stop signal is only recorded
            try:
                if own:
                    SIGNALS.install()
                if signal.SIGHUP not in SIGNALS.installed:
                    hup = signal.signal(signal.SIGHUP, on_sighup)
                while not SIGNALS.event.wait(0.2):
                    if given_up(runs, reported, supervision.exit_on_model_failure, report):
                        return 1
                signum = SIGNALS.signum or signal.SIGTERM
                report(f"received {signal_name(signum)}, draining in-flight requests (at "
                       f"most {supervision.drain_timeout_s:.0f} s), then shutting down")
                for supervisor in supervisors(runs):
                    supervisor.status.mark_draining()
                return 128 + signum
            finally:
                stop()
                if hup is not None:
                    signal.signal(signal.SIGHUP, hup)
    finally:
        if own:
            SIGNALS.uninstall()
