"""The serving spine: verify -> scan -> preflight -> launch vLLM -> gateway.

Every check runs before the engine starts, as one sequence with ``appliance check``
(:mod:`appliance.preflight.sequence`; each model verified, staged read-only and scanned by
:mod:`appliance.preflight.model_files`), and any refusal stops ``serve`` with a clear
``ApplianceError``. Several models (``[[models]]``) take the same path one after the other,
each gets its own supervised engine (:mod:`appliance.engine.runs`: start, crash-loop policy,
the wait for a stop signal), and one gateway routes by ``model``. Every model's state is
its ``ModelRun`` in ``Appliance.runs``; cluster role, secret and firewall:
:mod:`appliance.engine.cluster`. This module only orchestrates.
"""

from __future__ import annotations

import signal
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.config.models import ServedModel, served_models
from appliance.config.policy import Policy
from appliance.engine import sdnotify
from appliance.engine.cluster import firewall_down, firewall_up, join
from appliance.engine.launcher import ClusterRole, EngineSpec, check_tool_config
from appliance.engine.parallel import check_parallel
from appliance.engine.runs import ModelRun, Timings, start_engine, stop_engines, wait_for_stop
from appliance.engine.sdnotify import say
from appliance.engine.stopping import SIGNALS, Stopped, signal_name
from appliance.errors import ApplianceError
from appliance.preflight.engine_quirks import EngineQuirks, engine_quirk_settings, no_quirks
from appliance.preflight.model_files import check_model, discard_stages
from appliance.preflight.sequence import Serving, run_sequence

if TYPE_CHECKING:
    from appliance.gateway.telemetry.advisory_metrics import AdvisoryListInfo

__all__ = ["Appliance", "ModelRun", "Timings", "say"]


@dataclass
class Appliance:
    """The served model(s). ``start()`` runs the spine; ``stop()`` tears it down.
    ``model_dir`` / ``store_ref``: the one model of ``[model]`` (unused with ``[[models]]``).
    ``runs``: every model's state in policy order, the first the default (``check()``)."""

    policy: Policy
    model_dir: Path
    public_key: Any  # a PEM key Path, or a signing.TrustStore for store models
    api_keys: list[str]
    host: str = "127.0.0.1"
    port: int = 8000
    timings: Timings = field(default_factory=Timings)
    gateway: Any = None
    runtime_dir: Path | None = None
    watchdog: sdnotify.Watchdog | None = None
    store_ref: str | None = None  # `serve --model NAME[@DIGEST]`: model_dir is unused
    quirks: EngineQuirks = field(default_factory=no_quirks)  # gateway engine_quirks settings
    advisory_list: AdvisoryListInfo | None = None  # the list in force, for /metrics (check())
    workers: list[Any] = field(default_factory=list)  # extra gateway processes ([gateway])
    node_rank: int | None = None  # `serve --node-rank` ([cluster]); None: from the addresses
    role: ClusterRole | None = None  # this node's cluster role (set by start())
    firewall_installed: bool = False
    runs: list[ModelRun] = field(default_factory=list)  # every served model (check())

    @property
    def is_worker(self) -> bool:
        """A cluster worker (node rank > 0): headless engine, no gateway, no API keys."""
        return self.role is not None and self.role.node_rank > 0

    def served_models(self) -> tuple[ServedModel, ...]:
        """The models to serve: the policy's ``[[models]]``, else the one of ``[model]``
        from ``store_ref`` / ``model_dir``."""
        if self.policy.models:
            from appliance.store import is_store_ref

            return served_models(self.policy, None, is_store_ref)
        return (ServedModel(self.policy.model.served_name, self.policy.engine,
                            ref=self.store_ref,
                            path=self.model_dir if self.store_ref is None else None),)

    def check(self) -> list[ModelRun]:
        """Verify, stage, scan and preflight every model (the sequence of ``appliance
        check``, :func:`~appliance.preflight.sequence.run_sequence`); returns ``runs``."""
        self.runs = []
        checked = run_sequence(self.policy, self.served_models(),
                               None if self.is_worker else self.host,
                               Serving(self._check_serving, self._check_model))
        self.runs = checked.runs
        pre = self.policy.preflight
        say(checked.advisories[0] + (f"; {checked.stale.splitlines()[0]}"
                                     if checked.stale else ""))
        from appliance.runtime import advisory_list_info

        self.advisory_list = advisory_list_info(self.policy, checked.in_force)
        self.timings.preflight_s = checked.seconds
        self.quirks = engine_quirk_settings(pre.engine_quirks)
        say(f"preflight: ok ({len(self.quirks['engine_quirks'])} engine quirk(s) refused "
            f"for {self.quirks['engine_name']})")
        return self.runs

    def _check_serving(self) -> None:
        """The sequence's serve-only checks before the models. Not on a cluster worker: the
        cache salt secret loads; the keys file loads; at least one API key (plain or in the
        keys file) unless ``[auth.oidc]``; each plain key acceptable to the gateway (16-512
        printable ASCII chars). Then every model's tool-call parser."""
        if not self.is_worker:
            from appliance.config.admission import credential_path
            from appliance.config.keys import load_keys
            from appliance.gateway import hash_api_key
            from appliance.gateway.auth.tenant import load_secret

            if self.policy.gateway.cache_salt_secret is not None:
                load_secret(self.policy.gateway.cache_salt_secret)
            # resolved as the gateway's settings resolve it (appliance.runtime)
            keys_file = credential_path(None, self.policy.admission.keys_file, "keys_file")
            if keys_file is not None:
                load_keys(keys_file)
            if not self.api_keys and keys_file is None and self.policy.auth.oidc is None:
                raise ApplianceError("no API key configured", code="no_api_key",
                                     fix="pass --api-key-file with at least one key")
            for number, key in enumerate(self.api_keys, 1):
                try:
                    hash_api_key(key)
                except ValueError as exc:
                    raise ApplianceError(f"API key #{number} rejected: {exc}",
                                         code="invalid_api_key", fix="use random keys, e.g. "
                                         "`openssl rand -hex 32`") from None
        for model in self.served_models():
            check_tool_config(model.engine)

    def _runtime(self) -> Path:
        """``runtime_dir`` (staged copies, engine sockets): made once, removed by stop()."""
        if self.runtime_dir is None:
            self.runtime_dir = Path(tempfile.mkdtemp(prefix="appliance-"))
        return self.runtime_dir

    def _check_model(self, model: ServedModel, index: int) -> ModelRun:
        """Verify into ``runtime_dir``/``model[-INDEX]``, check the layout, scan (after a
        stop checkpoint: a stop whose raise was swallowed is raised here)."""
        SIGNALS.raise_if_requested()
        cluster = self.policy.cluster
        found = check_model(
            self.policy, model, self._runtime() / ("model" if index == 0 else f"model-{index}"),
            self.public_key, say,
            lambda engine, folder: check_parallel(engine, folder,
                                                  len(cluster.nodes) if cluster else 1))
        self.timings.verify_s += found.verify_s
        self.timings.scan_s += found.scan_s
        return ModelRun(model, found.staged, found.digest)

    def start(self) -> None:
        """Run the whole spine; on any failure everything started is stopped again. A stop
        signal raises :class:`Stopped` where it lands and again at each phase boundary
        (``SIGNALS.raise_if_requested``) until caught here, so a stop requested before an
        engine starts never lets it start (:mod:`appliance.engine.stopping`)."""
        if threading.current_thread() is threading.main_thread() \
                and signal.SIGHUP not in SIGNALS.installed:  # the demo: SIGHUP stops
            # `systemctl reload` (SIGHUP) during the minutes of start-up must not kill us.
            signal.signal(signal.SIGHUP, self._on_sighup)
        self.watchdog = sdnotify.Watchdog(self._gateway_alive).start()
        try:
            checkpoint = SIGNALS.raise_if_requested  # a stop not yet caught is raised again
            checkpoint()
            cluster, secret = self.policy.cluster, b""
            if cluster is not None:
                self.role, secret = join(cluster, self.node_rank, say)
                checkpoint()
            self.check()  # verify, scan, preflight (a checkpoint before each model)
            checkpoint()
            if cluster is not None and self.role is not None:
                self.firewall_installed = firewall_up(cluster, self.role, self.port, say)
            for index, run in enumerate(self.runs):
                checkpoint()
                self.timings.engine_ready_s += start_engine(
                    run, index, len(self.runs) > 1, self._runtime(), self.policy.supervisor,
                    self.policy.gateway.max_n, cluster, self.role, secret, say)
            checkpoint()
            if self.is_worker:
                sdnotify.notify(READY=1, STATUS="cluster worker: headless engine serving")
                return
            with SIGNALS.critical():  # a stop signal waits until self.gateway is recorded
                self.gateway = self._start_gateway(*(run.spec for run in self.runs
                                                     if run.spec is not None))
            for run in self.runs:
                if run.supervisor is not None:
                    self.gateway.state.attach_engine(run.supervisor.status,
                                                     run.served.served_name)
            first = self.runs[0].supervisor
            if first is not None and self.workers and self.gateway.state.loop is not None:
                from appliance.gateway.http.workers import relay_engine

                relay_engine(first.status, self.gateway.state.loop, self.workers)
            say(f"gateway: listening on {self.gateway.url}")
            sdnotify.ready(self.host, self.port)  # READY=1 once /health/ready answers 200
        except BaseException as exc:
            SIGNALS.caught(exc)  # a Stopped: handled here, no checkpoint raises it again
            if isinstance(exc, Stopped | KeyboardInterrupt):
                name = signal_name(exc.signum) if isinstance(exc, Stopped) else "SIGINT"
                say(f"received {name} while starting: stopping everything started so far")
            self.stop()
            raise

    def _start_gateway(self, *specs: EngineSpec) -> Any:
        """The gateway in front of the engines of ``specs`` (the first: the default model,
        answering requests without ``model``)."""
        from appliance.gateway import start_in_thread
        from appliance.gateway.http.workers import reuseport_socket, spawn_workers
        from appliance.runtime import gateway_settings

        workers = self.policy.gateway.workers
        settings = gateway_settings(self.policy, specs=specs, api_keys=self.api_keys,
                                    quirks=self.quirks, advisory_list=self.advisory_list)
        if workers == 1:
            handle = start_in_thread(settings, self.host, self.port, freeze_gc=True)
            self.port = handle.port
            return handle
        # [gateway] workers = N: this process's gateway plus N - 1 children on one port.
        sock = reuseport_socket(self.host, self.port)
        handle = start_in_thread(settings, self.host, self.port, freeze_gc=True, sock=sock)
        self.port = handle.port
        try:
            self.workers = spawn_workers(settings, self.host, self.port, workers - 1,
                                         supervised=True)
        except BaseException:
            handle.stop(timeout=5.0)
            raise
        say(f"gateway: {workers} processes on port {self.port} (admission in Redis)")
        return handle

    def wait(self) -> int:
        """Serve until a stop signal (drain, stop, ``128 + signum``) or a crash loop (exit
        1): :func:`appliance.engine.runs.wait_for_stop`; SIGHUP: :meth:`_on_sighup`. A stop
        requested before and not caught yet is raised (:class:`Stopped`) instead of being
        drained, unless the caller polls it (the demo's ``SIGNALS.polled()``)."""
        SIGNALS.raise_if_requested()
        return wait_for_stop(self.runs, self.policy.supervisor, self._on_sighup, self.stop,
                             say)

    def _on_sighup(self, _signum: int, _frame: object) -> None:
        """SIGHUP: re-read the keys file, reopen the audit log, and reload the gateway's TLS
        certificate and key (new connections); open connections are kept."""
        for child in self.workers:
            if child.poll() is None:
                child.send_signal(signal.SIGHUP)
        if self.gateway is not None:
            self.gateway.state.reload_threadsafe()
            ok = self.gateway.reload_tls()
            say("gateway: TLS certificate reloaded" if ok else
                "gateway: TLS reload refused or TLS off; serving the previous certificate")

    def _gateway_alive(self) -> bool:
        """Watchdog check: true while starting, then while the gateway answers /health/live."""
        return self.gateway is None or sdnotify.probe(
            sdnotify.health_url(self.host, self.port, "live"))

    def stop(self) -> None:
        """Stop everything started (gateway workers, gateway, every engine's whole process
        group, firewall, runtime folder); a stop signal meanwhile is raised after it."""
        with SIGNALS.critical():
            self._stop()

    def _stop(self) -> None:
        if self.gateway is not None or any(run.supervisor is not None for run in self.runs):
            sdnotify.stopping()  # STOPPING=1: the drain begins
        if self.watchdog is not None:
            self.watchdog.stop()
            self.watchdog = None
        drain = self.policy.supervisor.drain_timeout_s + 10.0
        if self.workers:
            from appliance.gateway.http.workers import stop_workers

            stop_workers(self.workers, timeout=drain)
            self.workers = []
        if self.gateway is not None:
            self.gateway.stop(timeout=drain)
            self.gateway = None
        stop_engines(self.runs)
        if self.firewall_installed:
            self.firewall_installed = not firewall_down(say)
        if self.runtime_dir is not None:
            discard_stages(self.runtime_dir)  # and the engines' socket folders in it
            self.runtime_dir = None
