"""Process trees from ``/proc`` for the stop tests (Linux): what a process started, and
whether any of it is still alive. Processes are named by (pid, start time) so that a pid
reused meanwhile is never mistaken for one of ours; only processes a test started (its
child and what that child started) are ever listed or signalled."""

from __future__ import annotations

import os
import time

Proc = tuple[int, int]  # (pid, start time in clock ticks since boot)


def _stat(pid: int) -> list[bytes] | None:
    """``/proc/<pid>/stat`` fields after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _table() -> dict[int, list[bytes]]:
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None:
                table[int(entry)] = fields
    return table


def tree(root: int) -> set[Proc]:
    """``root``, its live descendants, and every live member of the process groups any of
    them leads (an engine's group: vLLM's API server, EngineCore, Worker)."""
    table = _table()
    children: dict[int, list[int]] = {}
    for pid, fields in table.items():
        children.setdefault(int(fields[1]), []).append(pid)
    found: set[int] = set()
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in found or pid not in table:
            continue
        found.add(pid)
        todo.extend(children.get(pid, []))
    leaders = {pid for pid in found if int(table[pid][2]) == pid}
    found |= {pid for pid, fields in table.items() if int(fields[2]) in leaders}
    return {(pid, int(table[pid][19])) for pid in found if table[pid][0] not in (b"Z", b"X")}


def alive(procs: set[Proc]) -> set[Proc]:
    """Those of ``procs`` still running (same pid and start time; zombies count as gone)."""
    left = set()
    for pid, started in procs:
        fields = _stat(pid)
        if fields is not None and int(fields[19]) == started and fields[0] not in (b"Z", b"X"):
            left.add((pid, started))
    return left


def wait_gone(procs: set[Proc], timeout_s: float) -> set[Proc]:
    """Wait up to ``timeout_s`` seconds for all of ``procs`` to end; returns those left."""
    deadline = time.monotonic() + timeout_s
    left = alive(procs)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = alive(left)
    return left


def describe(procs: set[Proc]) -> list[str]:
    """``pid: command line`` of each of ``procs`` (for assertion messages)."""
    lines = []
    for pid, _ in sorted(procs):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmd = handle.read().replace(b"\0", b" ").decode("utf-8", "replace")[:120]
        except OSError:
            cmd = "?"
        lines.append(f"{pid}: {cmd}")
    return lines
