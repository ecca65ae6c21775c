"""Supervised engine: the gateway outlives the engine, which is restarted in place.

:class:`Supervisor` owns the engine child (:class:`SupervisedEngine`, an
:class:`appliance.engine.launcher.Engine` whose output goes to a rotated log in the appliance's
log folder instead of a temp folder) and a monitor thread:

* every ``POLL_S`` (0.1 s) it checks the process; every ``probe_interval_s`` (policy,
  default 0.5 s) it asks ``GET /health`` on the engine socket, waiting at most
  ``probe_timeout_s`` (default 2 s). A *death* is any of: an exit; ``/health`` answering
  non-200 twice in a row (vLLM answers 503 once EngineCore is dead, ``EngineDeadError``);
  ``hung_probes`` (default 5) probes in a row without an answer while the process is alive
  (a *hung* engine: stopped, deadlocked, or its event loop wedged). One slow probe is not a
  death (a busy engine is slow); an answer of any kind resets the count.
* on a death the shared :class:`~appliance.engine.state.EngineStatus` goes down at
  once (``/health/ready`` false, new requests ``503 engine_restarting`` with
  ``Retry-After``), the whole process group is killed (no orphaned EngineCore), and the
  engine is started again from the **same** verified read-only staged folder (no new
  verify, scan or copy) after a bounded exponential backoff:
  ``min(restart_backoff_initial_s * 2**(k-1), restart_backoff_max_s)`` for the k-th death
  inside the window. A start that fails counts as another death.
* ``max_deaths`` deaths within ``death_window_s`` end the loop: :attr:`fatal` is set with
  the engine's last log lines and ``appliance serve`` exits 1, so systemd takes over.

Policy keys: ``[supervisor]`` (:mod:`appliance.config.reliability`).
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from appliance.config.reliability import SupervisorPolicy
from appliance.engine.launcher import Engine, EngineSpec, engine_get
from appliance.engine.reaper import REAPER, group_members
from appliance.engine.state import EngineStatus
from appliance.errors import LaunchError

POLL_S = 0.1
UNHEALTHY_PROBES = 2


class RotatingLog:
    """Append-only log file that rotates past ``max_bytes`` (``engine.log`` ->
    ``engine.log.1`` ... ``engine.log.<backups>``). Thread-safe; mode 0600."""

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self._lock = threading.Lock()
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._file: IO[bytes] = self._open()

    def _open(self) -> IO[bytes]:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        return os.fdopen(fd, "ab")

    def _rotate(self) -> None:
        self._file.close()
        for i in range(self.backups - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{i + 1}"))
        os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        self._file = self._open()

    def write(self, data: bytes) -> None:
        with self._lock:
            if self._file.closed:  # a pump thread draining after stop()
                return
            if self._file.tell() + len(data) > self.max_bytes and self._file.tell() > 0:
                self._rotate()
            self._file.write(data)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


class SupervisedEngine(Engine):
    """An engine whose output goes to a shared :class:`RotatingLog` (and the tail)."""

    def __init__(self, spec: EngineSpec, log: RotatingLog) -> None:
        super().__init__(spec)
        self.log = log

    def _pump(self) -> None:
        proc = self.proc
        if proc is None or proc.stdout is None:
            return
        for raw in proc.stdout:
            self.log.write(raw)
            self._tail.append(raw.decode("utf-8", "replace").rstrip())

    def kill_group(self, settle_s: float = 10.0) -> bool:
        """SIGKILL the whole process group, even when the leader is already gone (or
        stopped), then wait up to ``settle_s`` (seconds, in all) until the leader is reaped
        and no member but zombies is left, so the next start does not meet the old
        EngineCore's memory or device still in use. Returns False when something survived
        (a process stuck in the kernel, e.g. in a device driver, ignores SIGKILL)."""
        if self.proc is None:
            return True
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        deadline = time.monotonic() + settle_s
        try:
            self.proc.wait(timeout=settle_s)
        except subprocess.TimeoutExpired:
            return False
        while group_members(self.proc.pid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        REAPER.release(self.proc.pid)
        if self._reader is not None:
            self._reader.join(timeout=5)
        return True


class Supervisor:
    """Start, watch and restart the engine. ``start()`` blocks until the first start is
    ready (raises ``LaunchError``); then a daemon thread supervises until ``stop()``."""

    def __init__(self, spec: EngineSpec, policy: SupervisorPolicy, startup_timeout_s: float,
                 status: EngineStatus | None = None, log_name: str = "engine.log") -> None:
        self.spec = spec
        self.policy = policy
        self.startup_timeout_s = startup_timeout_s
        self.status = status or EngineStatus()
        self.status.supervised = True
        log_dir = policy.engine_log_dir()
        try:
            # several models: one log each (engine-<served_name>.log, appliance.serve)
            self.log = RotatingLog(log_dir / log_name, policy.log_max_bytes,
                                   policy.log_backups)
        except OSError as exc:
            raise LaunchError(f"cannot open the engine log: {exc.strerror}",
                              code="log_dir_unusable", where=str(log_dir),
                              fix="set supervisor.log_dir in the policy to a writable folder"
                              ) from None
        self.engine: SupervisedEngine | None = None
        self.fatal = threading.Event()
        self.fatal_message = ""
        self.first_start_s = 0.0
        self.restart_times: list[float] = []  # seconds from death to ready, per restart
        self._deaths: collections.deque[float] = collections.deque()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._starts = 0

    @property
    def log_path(self) -> Path:
        return self.log.path

    # -- lifecycle -----------------------------------------------------------------------
    def _launch(self) -> float:
        self._starts += 1
        self.log.write(f"=== appliance: engine start #{self._starts} at "
                       f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} ===\n".encode())
        try:
            self.spec.socket_path.unlink(missing_ok=True)  # stale socket of a dead engine
        except OSError:
            pass
        engine = SupervisedEngine(self.spec, self.log)
        self.engine = engine
        engine.start()
        try:
            return engine.wait_ready(self.startup_timeout_s)
        except LaunchError as exc:
            exc.where = str(self.log.path)  # the engine's output is in the rotated log
            raise

    def start(self) -> float:
        """First start; returns its seconds to ready. Then supervision begins."""
        self.first_start_s = self._launch()
        self._thread = threading.Thread(target=self._run, name="engine-supervisor",
                                        daemon=True)
        self._thread.start()
        return self.first_start_s

    def stop(self) -> None:
        """Stop supervising and stop the engine (SIGTERM, then SIGKILL). A restart in
        progress is cut short: stopping its engine ends its ``wait_ready``."""
        self._stopping.set()
        if self.engine is not None:
            self.engine.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        if self.engine is not None:
            self.engine.stop()  # an engine a racing restart started meanwhile
        self.log.close()

    # -- monitoring ----------------------------------------------------------------------
    def _probe(self) -> int | None:
        """``/health`` status, or ``None`` when it did not answer within ``probe_timeout_s``
        (timeout, refused, no socket)."""
        try:
            status, _ = engine_get(self.spec.socket_path, "/health",
                                   timeout=self.policy.probe_timeout_s)
        except OSError:  # TimeoutError and connection errors are OSErrors
            return None
        return status

    def _watch(self, engine: SupervisedEngine) -> str | None:
        """Block while ``engine`` lives; return why it is considered dead (None: stop)."""
        unhealthy = silent = 0
        next_probe = time.monotonic() + self.policy.probe_interval_s
        while not self._stopping.is_set():
            proc = engine.proc
            code = proc.poll() if proc is not None else -1
            if code is not None:
                return f"engine exited with status {code}"
            extra = self._extra_death()
            if extra is not None:
                return extra
            now = time.monotonic()
            if now >= next_probe:
                next_probe = now + self.policy.probe_interval_s  # from this probe's start
                status = self._probe()
                unhealthy = unhealthy + 1 if status is not None and status != 200 else 0
                silent = silent + 1 if status is None else 0
                if unhealthy >= UNHEALTHY_PROBES:
                    return f"engine /health answered {status} (engine core dead)"
                if silent >= self.policy.hung_probes and engine.proc is not None \
                        and engine.proc.poll() is None:
                    return (f"engine hung: {silent} /health probes in a row unanswered "
                            f"within {self.policy.probe_timeout_s:g} s while its process "
                            f"{engine.proc.pid} is alive; killing it")
                continue  # a probe may have taken long: check the process first
            self._stopping.wait(min(POLL_S, max(next_probe - now, 0.0)))
        return None

    def _extra_death(self) -> str | None:
        """A death reason besides the engine's own (subclasses: a lost cluster link)."""
        return None

    def _on_death(self) -> None:
        """Called once per death, before the engine is killed (subclasses)."""

    def _backoff(self) -> float:
        k = len(self._deaths)
        return float(min(self.policy.restart_backoff_initial_s * 2 ** max(k - 1, 0),
                         self.policy.restart_backoff_max_s))

    def _run(self) -> None:
        engine = self.engine
        while engine is not None and not self._stopping.is_set():
            reason = self._watch(engine)
            if reason is None:
                return
            died_at = time.monotonic()
            self._on_death()
            self._deaths.append(died_at)
            while self._deaths and died_at - self._deaths[0] > self.policy.death_window_s:
                self._deaths.popleft()
            delay = self._backoff()
            self.status.mark_down(reason, delay + (self.first_start_s or 30.0))
            if not engine.kill_group(self.policy.kill_settle_s):
                # a new engine would meet the old one's memory or device: give up, so the
                # service manager (systemd, KillMode=control-group) cleans up and restarts
                reason = (f"{reason}; its process group survived SIGKILL for "
                          f"{self.policy.kill_settle_s:g} s (a process stuck in the kernel?)")
                self._announce(f"{reason}; giving up")
                self._fail(reason, engine)
                return
            fatal = len(self._deaths) >= self.policy.max_deaths
            self._announce(f"{reason}; death {len(self._deaths)} of {self.policy.max_deaths}"
                           f" within {self.policy.death_window_s:.0f} s; "
                           + ("giving up" if fatal else f"restarting in {delay:g} s"))
            if fatal:
                self._fail(reason, engine)
                return
            if self._stopping.wait(delay):
                return
            try:
                self._launch()
            except LaunchError as exc:
                # a failed start is one more death; loop on the failed engine
                self.log.write(f"=== appliance: restart failed: {exc.code} ===\n".encode())
                engine = self.engine
                continue
            self.restart_times.append(time.monotonic() - died_at)
            self.status.mark_up()
            self._announce(f"engine restarted and ready after "
                           f"{self.restart_times[-1]:.1f} s")
            engine = self.engine

    def _announce(self, message: str) -> None:
        """One line in the engine log and on stderr (the journal under systemd)."""
        self.log.write(f"=== appliance: {message} ===\n".encode())
        print(f"appliance: supervisor: {message}", file=sys.stderr, flush=True)

    def _fail(self, reason: str, engine: SupervisedEngine) -> None:
        window = self.policy.death_window_s
        self.fatal_message = (
            f"engine crash loop: {len(self._deaths)} deaths within {window:.0f} s (policy "
            f"supervisor.max_deaths = {self.policy.max_deaths}); last: {reason}; engine log "
            f"{self.log.path}; last log lines:\n{engine.log_tail()}")
        self.status.mark_failed(reason)
        self.fatal.set()
