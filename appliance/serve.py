"""The serving spine: verify -> scan -> preflight -> launch vLLM -> gateway.

Every step runs before the engine starts and any refusal stops ``serve`` with a clear
``ApplianceError``. The engine loads only the verified, read-only staged copy of the model
(``signing.verify_and_stage``), and the scan is ``scanner.api.scan_paths`` — the same code
path as ``appliance scan``.

Several models (``[[models]]``, :mod:`appliance.config.models`) take the same path, one
model after the other: each is verified, scanned and checked, then each gets its own
engine (own socket, :class:`Supervisor` and log ``engine-<served_name>.log``), started one
after the other (CPU memory), and one gateway routes by ``model``
(:mod:`appliance.gateway.models.table`). One model is the one-entry case.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance import signing
from appliance.config.models import ServedModel, check_host, served_models
from appliance.config.policy import Policy
from appliance.engine import sdnotify
from appliance.engine.launcher import ClusterRole, Engine, EngineSpec, check_tool_config
from appliance.engine.parallel import check_parallel
from appliance.engine.request_bounds import RequestBounds
from appliance.engine.stopping import SIGNALS, Stopped, signal_name
from appliance.engine.supervisor import Supervisor
from appliance.errors import ApplianceError, PolicyError, ScanRefused, SigningError
from appliance.preflight import require_preflight
from appliance.preflight.engine_quirks import EngineQuirks, engine_quirk_settings, no_quirks
from appliance.preflight.in_force import describe as describe_advisories
from appliance.preflight.in_force import in_force_of

if TYPE_CHECKING:
    from appliance.gateway.telemetry.advisory_metrics import AdvisoryListInfo


def say(message: str) -> None:
    print(f"appliance: {message}", file=sys.stderr, flush=True)
    sdnotify.status(message)  # systemd (Type=notify): `systemctl status` shows the step


def scan_model(model_dir: Path, deep: bool) -> None:
    """Run the pre-deploy scan; raise ``ScanRefused`` unless the verdict is clean."""
    from scanner.api import Limits, scan_paths

    report = scan_paths([model_dir], limits=Limits(deep=deep))
    result = report.targets[0]
    verdict = result.verdict
    if verdict is None or verdict.label != "clean":
        lines = [f"  {f.rule_id} {f.path}: {f.message}" for f in result.findings[:20]]
        label = verdict.label if verdict is not None else "no verdict"
        raise ScanRefused(f"scan verdict is {label}:\n" + "\n".join(lines),
                          where=str(model_dir),
                          fix="run `appliance scan` on the model folder and remove what it flags")


def _check_api_keys(keys: list[str], keys_file: Path | None = None,
                    oidc: bool = False) -> None:
    """At least one key (plain or in the named keys file) unless ``oidc`` ([auth.oidc]
    tokens), each plain one acceptable to the gateway (16-512 printable ASCII chars); the
    keys file must load."""
    from appliance.config.keys import load_keys
    from appliance.gateway import hash_api_key

    if keys_file is not None:
        load_keys(keys_file)
    if not keys and keys_file is None and not oidc:
        raise ApplianceError("no API key configured", code="no_api_key",
                             fix="pass --api-key-file with at least one key")
    for number, key in enumerate(keys, 1):
        try:
            hash_api_key(key)
        except ValueError as exc:
            raise ApplianceError(f"API key #{number} rejected: {exc}", code="invalid_api_key",
                                 fix="use random keys, e.g. `openssl rand -hex 32`") from None


def check_listener(policy: Policy, host: str) -> None:
    """Before any slow step: refuse plaintext off loopback (``plaintext_not_allowed``),
    unusable TLS files (``TlsError``), see :mod:`appliance.config.tls`, and an unusable
    cache salt secret (``cache_salt_secret_invalid``, :mod:`appliance.gateway.auth.tenant`)."""
    from appliance.config.tls import require_tls_for_host
    from appliance.gateway.auth.tenant import load_secret
    from appliance.preflight.tls_files import inspect_tls

    gw = policy.gateway
    require_tls_for_host(host, gw.tls, gw.allow_plaintext)
    if gw.tls is not None:
        inspect_tls(gw.tls)
    if gw.cache_salt_secret is not None:
        load_secret(gw.cache_salt_secret)


@dataclass
class Timings:
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


@dataclass
class Appliance:
    """The served model(s). ``start()`` runs the spine; ``stop()`` tears it down.

    ``model_dir`` / ``store_ref`` name the one model of ``[model]``; with ``[[models]]`` in
    the policy they are unused. ``supervisor`` is the first model's supervisor (the only
    one with one model); ``runs`` holds every model's (set by ``check()`` / ``start()``).
    """

    policy: Policy
    model_dir: Path
    public_key: Any  # a PEM key Path, or a signing.TrustStore for store models
    api_keys: list[str]
    host: str = "127.0.0.1"
    port: int = 8000
    timings: Timings = field(default_factory=Timings)
    supervisor: Supervisor | None = None
    gateway: Any = None
    runtime_dir: Path | None = None
    watchdog: sdnotify.Watchdog | None = None
    store_ref: str | None = None  # `serve --model NAME[@DIGEST]`: model_dir is unused
    quirks: EngineQuirks = field(default_factory=no_quirks)  # gateway's (check() sets)
    advisory_list: AdvisoryListInfo | None = None  # the list in force, /metrics (check())
    workers: list[Any] = field(default_factory=list)  # extra gateway processes ([gateway])
    model_digest: str = ""  # the signed manifest's root digest (set by check())
    node_rank: int | None = None  # `serve --node-rank` ([cluster]); None: from the addresses
    role: ClusterRole | None = None  # this node's cluster role (set by start())
    firewall_installed: bool = False
    runs: list[ModelRun] = field(default_factory=list)  # every served model (check())
    _reported: set[int] = field(default_factory=set)  # supervisors whose loop was reported

    @property
    def engine(self) -> Engine | None:
        """The engine process serving now (replaced on each supervised restart)."""
        return self.supervisor.engine if self.supervisor is not None else None

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

    def check(self) -> Path:
        """Verify, stage, scan and preflight every model. Returns the first model's staged
        folder (the only one with one model; all of them are in ``runs``)."""
        models = self.served_models()
        if not self.is_worker:
            check_listener(self.policy, self.host)
            _check_api_keys(self.api_keys, self._keys_file(), self.policy.auth.oidc is not None)
        for model in models:
            check_tool_config(model.engine)
        check_host(models)
        self.runtime_dir = Path(tempfile.mkdtemp(prefix="appliance-"))
        self.runs = []
        for index, model in enumerate(models):
            self.runs.append(self._check_model(model, index))
        self.model_digest = self.runs[0].digest
        t0 = time.monotonic()
        in_force = in_force_of(self.policy)  # packaged advisories.json or a newer signed feed
        require_preflight(in_force, self.policy.preflight.packages)
        lines, stale = describe_advisories(in_force,
                                           self.policy.preflight.advisories_max_age_days)
        say(lines[0] + (f"; {stale.splitlines()[0]}" if stale else ""))
        from appliance.runtime import advisory_list_info

        self.advisory_list = advisory_list_info(self.policy, in_force)
        self.timings.preflight_s = time.monotonic() - t0
        self.quirks = engine_quirk_settings(self.policy.preflight.engine_quirks)
        say(f"preflight: ok ({len(self.quirks['engine_quirks'])} engine quirk(s) refused "
            f"for {self.quirks['engine_name']})")
        return self.runs[0].staged

    def _check_model(self, model: ServedModel, index: int) -> ModelRun:
        """Verify (store in place, or a staged copy), require the chat template, check the
        parallel layout, scan: one model of :meth:`check`."""
        if self.runtime_dir is None:  # pragma: no cover - set by check()
            raise ApplianceError("runtime directory missing")
        staged = self.runtime_dir / ("model" if index == 0 else f"model-{index}")
        label = f"{model.served_name}: " if self.policy.models else ""
        t0 = time.monotonic()
        if model.ref is not None:  # serve in place from the store (no copy)
            from appliance.store import served_folder

            served = served_folder(self.policy.store.root, model.ref, self.public_key,
                                   allow_owner=self.policy.store.allow_owner_serve)
            staged, manifest = served.path, served.manifest
            for warning in served.warnings:
                say(f"{label}store: warning: {warning}")
            say(f"{label}store: {served.name}@{served.digest[:16]} checked by "
                f"{served.method}")
        else:
            source = model.path if model.path is not None else self.model_dir
            manifest = signing.verify_and_stage(source, self.public_key, staged)
        signing.require_servable(manifest)
        template = model.engine.chat_template
        if template not in manifest:
            raise SigningError(f"chat template {template!r} is not in the signed manifest",
                               code="chat_template_unsigned", where=model.source,
                               fix="add the vetted chat template to the folder and re-sign")
        verify_s = time.monotonic() - t0
        self.timings.verify_s += verify_s
        cluster = self.policy.cluster
        check_parallel(model.engine, staged, len(cluster.nodes) if cluster else 1)
        say(f"{label}verify: ok ({len(manifest)} signed files, {verify_s:.2f} s)")
        t0 = time.monotonic()
        scan_model(staged, self.policy.scan.deep)
        scan_s = time.monotonic() - t0
        self.timings.scan_s += scan_s
        say(f"{label}scan: clean ({scan_s:.2f} s)")
        return ModelRun(model, staged, manifest.root_digest)

    def start(self) -> None:
        """Run the whole spine; on any failure everything started is stopped again."""
        if threading.current_thread() is threading.main_thread() \
                and signal.SIGHUP not in SIGNALS.installed:  # the demo: SIGHUP stops
            # `systemctl reload` (SIGHUP) during the minutes of start-up must not kill us.
            signal.signal(signal.SIGHUP, self._on_sighup)
        self.watchdog = sdnotify.Watchdog(self._gateway_alive).start()
        try:
            cluster = self.policy.cluster
            secret = b""
            if cluster is not None:
                from appliance.engine.cluster import node_role, read_secret

                self.role = node_role(cluster, self.node_rank)
                try:
                    secret = read_secret(cluster.secret_path())
                except ValueError as exc:
                    raise PolicyError(str(exc), where="cluster.secret_file",
                                      fix="start under systemd with LoadCredential= or use "
                                          "a path") from None
                say(f"cluster: node rank {self.role.node_rank} of {len(cluster.nodes)} on "
                    f"{self.role.address} ({self.role.interface})")
            self.check()
            if cluster is not None:
                self._firewall_up()
            for index, run in enumerate(self.runs):
                self._start_engine(run, index, secret)
            self.supervisor = self.runs[0].supervisor
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
            if self.supervisor is not None and self.workers and self.gateway.state.loop is not None:
                from appliance.gateway.http.workers import relay_engine

                relay_engine(self.supervisor.status, self.gateway.state.loop, self.workers)
            say(f"gateway: listening on {self.gateway.url}")
            sdnotify.ready(self.host, self.port)  # READY=1 once /health/ready answers 200
        except BaseException as exc:
            if isinstance(exc, Stopped | KeyboardInterrupt):
                name = signal_name(exc.signum) if isinstance(exc, Stopped) else "SIGINT"
                say(f"received {name} while starting: stopping everything started so far")
            self.stop()
            raise

    def _start_engine(self, run: ModelRun, index: int, secret: bytes) -> None:
        """Start one model's supervised engine (own socket folder and log) and wait until
        it is ready."""
        if self.runtime_dir is None:  # pragma: no cover - set by check()
            raise ApplianceError("runtime directory missing")
        name = run.served.served_name
        several = len(self.runs) > 1
        spec = EngineSpec(model_dir=run.staged, served_name=name, engine=run.served.engine,
                          runtime_dir=self.runtime_dir / ("run" if index == 0 else
                                                          f"run-{index}"),
                          cluster=self.role,
                          bounds=RequestBounds(max_n=self.policy.gateway.max_n))
        timeout = run.served.engine.startup_timeout_s
        cluster = self.policy.cluster
        supervisor: Supervisor
        if cluster is not None:
            from appliance.engine.cluster import ClusterSupervisor

            supervisor = ClusterSupervisor(spec, self.policy.supervisor, timeout, cluster,
                                           secret, run.digest)
        else:
            supervisor = Supervisor(spec, self.policy.supervisor, timeout,
                                    log_name=f"engine-{name}.log" if several else "engine.log")
        run.spec, run.supervisor = spec, supervisor
        label = f"{name}: " if several else ""
        say(f"{label}engine: starting vLLM (log {supervisor.log_path})")
        ready_s = supervisor.start()
        self.timings.engine_ready_s += ready_s
        say(f"{label}engine: ready after {ready_s:.1f} s")

    def _firewall_up(self) -> None:
        """Install the cluster's nftables table (``appliance.engine.cluster.firewall``) unless the
        policy says ``firewall = "none"`` or the unit installed it
        (``APPLIANCE_CLUSTER_FIREWALL=unit``, set by the systemd cluster units)."""
        from appliance.engine.cluster import ClusterError, firewall

        cluster, role = self.policy.cluster, self.role
        if cluster is None or role is None:
            return
        if cluster.firewall == "none":
            say("cluster: firewall = none: the operator must refuse the cluster ports to "
                "anything but the peers (docs/cluster.md)")
            return
        if os.environ.get("APPLIANCE_CLUSTER_FIREWALL") == "unit":
            say("cluster: firewall installed by the unit (ExecStartPre=+)")
            return
        ports = tuple(cluster.open_ports)
        if not self.is_worker:
            if self.port == 0:
                raise ClusterError("the cluster firewall needs a fixed gateway port",
                                   code="cluster_firewall_failed", where="gateway.port",
                                   fix="set gateway.port (or --port) to a port number")
            ports += (self.port,)
        firewall.install(cluster.nodes, ports)
        self.firewall_installed = True
        say(f"cluster: firewall up: TCP only from {', '.join(cluster.nodes)}"
            + (f" or to port(s) {', '.join(map(str, sorted(set(ports))))}" if ports else ""))

    def _keys_file(self) -> Path | None:
        try:
            return self.policy.admission.resolved_keys_file()
        except ValueError as exc:
            raise PolicyError(str(exc), where="admission.keys_file",
                              fix="start under systemd with LoadCredential= or use a path")\
                from None

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
        """Serve until a stop signal (SIGTERM/SIGINT; :mod:`appliance.engine.stopping`):
        drain, stop, and return ``128 + signum`` (143 for SIGTERM, 130 for SIGINT); or until
        an engine crash loop (exit 1; with several models see :meth:`_given_up`).
        SIGHUP reopens the keys file and the audit log (unless the stop handlers were
        installed with ``hup_stops``, as by the demo). Installs the stop handlers itself
        when nobody did (and removes them again on return)."""
        own = not SIGNALS.installed
        hup = None
        try:
            with SIGNALS.polled():  # from here on a stop signal is only recorded
                try:
                    if own:
                        SIGNALS.install()
                    if signal.SIGHUP not in SIGNALS.installed:
                        hup = signal.signal(signal.SIGHUP, self._on_sighup)
                    while not SIGNALS.event.wait(0.2):
                        if self._given_up():
                            return 1
                    signum = SIGNALS.signum or signal.SIGTERM
                    drain = self.policy.supervisor.drain_timeout_s
                    say(f"received {signal_name(signum)}, draining in-flight requests (at "
                        f"most {drain:.0f} s), then shutting down")
                    for supervisor in self._supervisors():
                        supervisor.status.mark_draining()
                    return 128 + signum
                finally:
                    self.stop()
                    if hup is not None:
                        signal.signal(signal.SIGHUP, hup)
        finally:
            if own:
                SIGNALS.uninstall()

    def _given_up(self) -> bool:
        """Report each engine newly in a crash loop; ``True`` when ``serve`` must end (exit
        1): every engine has failed, or any has and ``exit_on_model_failure`` is set (one
        model: always). Otherwise the failed model is refused 503 ``engine_unavailable``
        (its status is ``failed``) and the others keep serving."""
        supervisors = self._supervisors()
        failed = [s for s in supervisors if s.fatal.is_set()]
        newly = [s for s in failed if id(s) not in self._reported]
        for supervisor in newly:
            self._reported.add(id(supervisor))
            say(supervisor.fatal_message)
        if not failed:
            return False
        if len(failed) == len(supervisors) or self.policy.supervisor.exit_on_model_failure:
            return True
        if newly:  # the list of given-up models grew: say it once more, whole
            names = [run.served.served_name for run in self.runs
                     if run.supervisor is not None and run.supervisor.fatal.is_set()]
            say(f"model(s) {', '.join(names)} given up after a crash loop: refused 503 "
                f"engine_unavailable until `serve` restarts; {len(supervisors) - len(failed)} "
                "other model(s) keep serving (supervisor.exit_on_model_failure = true ends "
                "serve instead)")
        return False

    def _supervisors(self) -> list[Supervisor]:
        """Every model's supervisor (the first is ``supervisor``)."""
        found = [run.supervisor for run in self.runs if run.supervisor is not None]
        if self.supervisor is not None and self.supervisor not in found:
            found.insert(0, self.supervisor)
        return found

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
        if self.gateway is not None or self._supervisors():
            sdnotify.stopping()  # STOPPING=1: the drain begins
        if self.watchdog is not None:
            self.watchdog.stop()
            self.watchdog = None
        if self.workers:
            from appliance.gateway.http.workers import stop_workers

            stop_workers(self.workers, timeout=self.policy.supervisor.drain_timeout_s + 10.0)
            self.workers = []
        if self.gateway is not None:
            self.gateway.stop(timeout=self.policy.supervisor.drain_timeout_s + 10.0)
            self.gateway = None
        for supervisor in self._supervisors():
            supervisor.stop()
        self.supervisor = None
        for run in self.runs:
            run.supervisor = None
        if self.firewall_installed:
            from appliance.engine.cluster import ClusterError, firewall

            try:
                firewall.remove()
                self.firewall_installed = False
            except ClusterError as exc:
                say(f"cluster: could not remove the firewall table: {exc}")
        if self.runtime_dir is not None:
            for staged in self.runtime_dir.glob("model*"):  # model, model-1, ...
                signing.discard_stage(staged)
            shutil.rmtree(self.runtime_dir, ignore_errors=True)
            self.runtime_dir = None
