"""A supervised cluster engine: the model handshake before every start, the link watched.

:class:`ClusterSupervisor` is the :class:`appliance.engine.supervisor.Supervisor` of one node:

* before each start (the first and every restart) the node meets the others over the
  cluster link (:mod:`appliance.engine.cluster._link`): all nodes prove the cluster secret and
  that they verified the same signed model, or every node refuses;
* the head (rank 0) starts vLLM's API rank and is ready when ``/health`` answers; it then
  tells the workers. A worker (rank > 0) starts vLLM's headless path (no API, no socket)
  and is ready when the head says so;
* a death is the base class's (exit, ``/health`` failing, hung) **or the link lost**: a
  worker's engine dying closes its link, the head sees the link drop (or heartbeats stop,
  ``heartbeat_timeout_s``), marks itself not ready (new requests 503), kills its engine
  (in-flight requests end with an error) and every node meets again and restarts; the
  base class's backoff and ``max_deaths`` apply (then ``appliance serve`` exits 1 and the
  service manager restarts it).
"""

from __future__ import annotations

import signal
import threading
import time

from appliance.config.cluster import ClusterPolicy
from appliance.config.reliability import SupervisorPolicy
from appliance.engine.cluster._link import ClusterError, Link, head_handshake, worker_handshake
from appliance.engine.launcher import EngineSpec
from appliance.engine.state import EngineStatus
from appliance.engine.supervisor import SupervisedEngine, Supervisor


class ClusterSupervisor(Supervisor):
    """See the module docstring. ``digest``: the signed model's root digest here."""

    def __init__(self, spec: EngineSpec, policy: SupervisorPolicy, startup_timeout_s: float,
                 cluster: ClusterPolicy, secret: bytes, digest: str,
                 status: EngineStatus | None = None) -> None:
        if spec.cluster is None:
            raise ValueError("a ClusterSupervisor needs a spec with a cluster role")
        super().__init__(spec, policy, startup_timeout_s, status)
        self.cluster = cluster
        self.role = spec.cluster
        self.secret = secret
        self.digest = digest
        self.link: Link | None = None

    def _meet(self) -> Link:
        role, c = self.role, self.cluster
        self._announce(f"cluster: node rank {role.node_rank} of {len(role.nodes)} meeting "
                       f"the {'workers' if role.node_rank == 0 else 'head'} (model "
                       f"{self.digest[:16]})")
        if role.node_rank == 0:
            return head_handshake(role.nodes, role.port + 1, self.secret, self.digest,
                                  c.handshake_timeout_s, c.heartbeat_timeout_s,
                                  self._stopping.is_set)
        return worker_handshake(role.nodes, role.node_rank, role.port + 1, self.secret,
                                self.digest, c.handshake_timeout_s, c.heartbeat_timeout_s,
                                self._stopping.is_set)

    def _close_link(self) -> None:
        if self.link is not None:
            self.link.close()
            self.link = None

    def _launch(self) -> float:
        self._close_link()
        link = self.link = self._meet()
        self._announce("cluster: handshake ok, every node verified the same model")
        if self.spec.headless:
            return self._launch_worker(link)
        started = threading.Event()
        guard = threading.Thread(target=self._guard_start, args=(link, started), daemon=True)
        guard.start()
        try:
            ready_s = super()._launch()
        finally:
            started.set()
        if link.dead:  # lost while starting: wait_ready raced the guard's kill
            raise ClusterError(f"cluster link lost while starting: {link.reason}",
                               code="cluster_handshake_failed")
        link.announce_ready()
        return ready_s

    def _guard_start(self, link: Link, started: threading.Event) -> None:
        """While the head's engine starts, a lost link kills it (its ``wait_ready`` then
        fails at once instead of waiting for a rank that is gone)."""
        while not started.wait(0.2):
            if link.dead:
                engine = self.engine
                if engine is not None:
                    engine.signal(signal.SIGKILL)
                return

    def _launch_worker(self, link: Link) -> float:
        self._starts += 1
        self.log.write(f"=== appliance: headless engine start #{self._starts} at "
                       f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} ===\n".encode())
        engine = SupervisedEngine(self.spec, self.log)
        self.engine = engine
        engine.start()
        deadline = engine.started_at + self.startup_timeout_s
        while time.monotonic() < deadline and not self._stopping.is_set():
            if link.ready.wait(0.2):
                engine.ready = True  # serving: a stop gives it the full SIGTERM grace
                return time.monotonic() - engine.started_at
            code = engine.proc.poll() if engine.proc is not None else -1
            if code is not None:
                raise ClusterError(
                    f"the headless engine exited with status {code} before the cluster was "
                    f"ready; last log lines:\n{engine.log_tail()}", code="engine_exited",
                    where=str(self.log.path), fix="read the engine log")
            if link.dead:
                raise ClusterError(f"cluster link lost while starting: {link.reason}",
                                   code="cluster_handshake_failed")
        raise ClusterError(f"the cluster was not ready after {self.startup_timeout_s:.0f} s",
                           code="engine_start_timeout", where=str(self.log.path),
                           fix="raise engine.startup_timeout_s or read the head's log")

    def _probe(self) -> int | None:
        if self.spec.headless:  # no API: the process and the link are the health
            return 200
        return super()._probe()

    def _extra_death(self) -> str | None:
        link = self.link
        if link is not None and link.dead:
            return f"cluster: {link.reason}"
        return None

    def _on_death(self) -> None:
        self._close_link()

    def stop(self) -> None:
        self._stopping.set()
        self._close_link()
        super().stop()
