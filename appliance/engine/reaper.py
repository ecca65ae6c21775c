"""Child process groups that end with the appliance: started, stopped, and reaped if the
appliance dies without stopping them.

:func:`spawn_group` starts a child in a session (and so a process group) of its own (vLLM:
its API server, EngineCore and Worker processes; a raw vLLM for the bench; an ``appliance
serve`` a bench starts) and guards it; :func:`stop_group` stops the whole group (SIGTERM,
then SIGKILL after a bound) and waits until no member is left, so nothing of it outlives
the appliance's own stop path (:mod:`appliance.engine.stopping`).

The safety net for an appliance that dies without cleaning up (SIGKILL, the OOM killer, a
crash in C) is a *watched pipe*: one small reaper process per appliance
(:mod:`appliance.engine.reaper_child`, started with the first guarded group, in a session
of its own) reads the guarded group ids from a pipe whose only write end the appliance
holds; when the appliance is gone, however, the pipe ends and the reaper SIGTERMs each
group still alive, SIGKILLs it after ``GRACE_S`` (5 s), and exits.
Chosen over ``prctl(PR_SET_PDEATHSIG)`` in the child because the parent-death signal
(1) fires when the *thread* that forked the child ends, and the supervisor restarts engines
from its own thread; (2) reaches only the group leader (vLLM's API server): its EngineCore
and resource tracker do notice a SIGKILLed API server by themselves (measured on vLLM 0.32
CPU during start-up: gone about 3 s later), but the group as a whole should not depend on
every process of every vLLM release doing so; (3) needs ``preexec_fn``, which is unsafe with
threads. Gateway worker processes (:mod:`appliance.gateway.http.workers`) are not in a group of
their own: they exit by themselves when their stdin pipe from the appliance ends or their
parent changes.

Limits: a group started in the microseconds between ``fork`` and the pipe write of its id is
not yet guarded; a process stuck in the kernel ignores SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from appliance.engine.reaper_child import group_members
from appliance.engine.stopping import SIGNALS

GRACE_S = 5.0
CHILD = Path(__file__).with_name("reaper_child.py")

__all__ = ["GRACE_S", "REAPER", "Reaper", "group_members", "spawn_group", "stop_group"]


class Reaper:
    """The parent side of the reaper: :meth:`guard` / :meth:`release` process group ids."""

    def __init__(self, grace_s: float = GRACE_S) -> None:
        self.grace_s = grace_s
        self.groups: set[int] = set()
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The reaper process's pid (None before the first guarded group)."""
        return self._proc.pid if self._proc is not None else None

    def _start(self) -> subprocess.Popen[bytes] | None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            return proc
        try:
            proc = subprocess.Popen(  # noqa: S603 - our own file, fixed argv
                [sys.executable, "-I", "-S", str(CHILD), f"{self.grace_s:g}"],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            _warn(f"cannot start the reaper ({exc.strerror}): a SIGKILLed appliance would "
                  "leave its engine running")
            return None
        self._proc = proc
        for group in self.groups:  # a new reaper after the last one died: tell it all
            self._send(proc, f"+{group}")
        return proc

    def _send(self, proc: subprocess.Popen[bytes], line: str) -> bool:
        stdin: IO[bytes] | None = proc.stdin
        if stdin is None:  # pragma: no cover - always a pipe
            return False
        try:
            stdin.write(line.encode() + b"\n")
            stdin.flush()
            return True
        except (OSError, ValueError):
            return False

    def guard(self, pgid: int) -> None:
        """Stop process group ``pgid`` when the appliance is gone (until :meth:`release`)."""
        with self._lock:
            self.groups.add(pgid)
            proc = self._start()
            if proc is not None and not self._send(proc, f"+{pgid}"):
                self._proc = None  # died meanwhile: a new one gets every group
                self._start()

    def release(self, pgid: int) -> None:
        """The appliance stopped group ``pgid`` itself."""
        with self._lock:
            self.groups.discard(pgid)
            if self._proc is not None and self._proc.poll() is None:
                self._send(self._proc, f"-{pgid}")

    def kill_all(self) -> None:
        """SIGKILL every guarded group now (a second stop signal; signal-handler safe: no
        lock, no output)."""
        for group in list(self.groups):
            if group_members(group, session=group):
                try:
                    os.killpg(group, signal.SIGKILL)
                except OSError:
                    pass

    def close(self, timeout: float = 30.0) -> int | None:
        """End the pipe (as the appliance's exit does) and wait for the reaper (tests)."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return None
        if proc.stdin is not None:
            proc.stdin.close()
        return proc.wait(timeout)


def _warn(message: str) -> None:
    print(f"appliance: {message}", file=sys.stderr, flush=True)


REAPER = Reaper()
SIGNALS.on_repeat.append(REAPER.kill_all)


def spawn_group(args: Sequence[str], **popen: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(args, start_new_session=True, **popen)``, guarded by
    :data:`REAPER`. A stop signal meanwhile is raised after it (call it inside a
    ``SIGNALS.critical()`` section that also records the result)."""
    with SIGNALS.critical():
        proc: subprocess.Popen[bytes] = subprocess.Popen(  # noqa: S603 - callers' fixed argv
            list(args), start_new_session=True, **popen)
        REAPER.guard(proc.pid)
    return proc


def stop_group(proc: subprocess.Popen[Any], grace_s: float = 20.0,
               settle_s: float = 10.0) -> bool:
    """Stop the process group led by ``proc`` (started by :func:`spawn_group`): SIGTERM to
    the group; after ``grace_s`` seconds, or at once when the leader is gone but other
    members are not done ``grace_s`` after the SIGTERM, SIGKILL to the group; then wait up
    to ``settle_s`` for the leader to be reaped and the group to empty. Returns True when
    nothing of the group is left (then it is released from the reaper)."""
    pgid = proc.pid
    _killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    while group_members(pgid, session=pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if proc.poll() is None or group_members(pgid, session=pgid):
        _killpg(pgid, signal.SIGKILL)
        settle = time.monotonic() + settle_s
        try:
            proc.wait(timeout=settle_s)
        except subprocess.TimeoutExpired:
            return False
        while group_members(pgid, session=pgid):
            if time.monotonic() >= settle:
                return False
            time.sleep(0.05)
    REAPER.release(pgid)
    return True


def _killpg(pgid: int, signum: int) -> None:
    """Signal group ``pgid`` while a member of it is alive in its own session."""
    if group_members(pgid, session=pgid):
        try:
            os.killpg(pgid, signum)
        except (ProcessLookupError, PermissionError):
            pass
