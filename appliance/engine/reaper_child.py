"""The reaper process: stops the appliance's process groups once the appliance is gone.

Run by path (``python -I -S reaper_child.py GRACE_S``, see :mod:`appliance.engine.reaper`),
so it imports nothing but the standard library and starts in some 20 ms. Its stdin is a pipe
whose only write end the appliance holds (close-on-exec: no child inherits it), one line per
change::

    +PGID      guard process group PGID (a child started in a session of its own)
    -PGID      the appliance stopped that group itself: forget it

End of input means the appliance exited, however it exited (SIGKILL and the OOM killer
included: the kernel closes its descriptors). Then every guarded group that still has a live
member is sent SIGTERM, given ``GRACE_S`` seconds to empty, sent SIGKILL, and the reaper
exits. A group is only signalled while it has a live member whose session id is the group
id (the engine runs ``setsid``): the kernel never hands out a pid still in use as a process
group or session id, so a guarded number cannot name someone else's processes meanwhile.

:func:`group_members` reads ``/proc`` (Linux); :mod:`appliance.engine.supervisor` uses it too.
"""

from __future__ import annotations

import os
import signal
import sys
import time

POLL_S = 0.05


def _stat_fields(pid: str) -> list[bytes] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (``state`` first), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None  # gone meanwhile


def group_members(pgid: int, session: int | None = None) -> list[int]:
    """Pids of live (not zombie) processes in process group ``pgid`` (and, when given, in
    session ``session``), from ``/proc`` (Linux; empty where ``/proc`` is unreadable)."""
    members = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        fields = _stat_fields(entry)
        if fields is None or len(fields) < 4 or fields[0] in (b"Z", b"X"):
            continue
        if int(fields[2]) == pgid and (session is None or int(fields[3]) == session):
            members.append(int(entry))
    return members


def stop_groups(groups: set[int], grace_s: float) -> list[int]:
    """SIGTERM each group of ``groups`` with a live member in its own session, wait up to
    ``grace_s`` seconds for all of them to empty, then SIGKILL what is left. Returns the
    groups that were signalled."""
    alive = [g for g in sorted(groups) if group_members(g, session=g)]
    for group in alive:
        try:
            os.killpg(group, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + grace_s
    while any(group_members(g, session=g) for g in alive) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    for group in alive:
        if group_members(group, session=group):
            try:
                os.killpg(group, signal.SIGKILL)
            except OSError:
                pass
    return alive


def main(argv: list[str]) -> int:
    grace_s = float(argv[1]) if len(argv) > 1 else 5.0
    # Terminal signals are not ours (we run in a session of our own; belt and braces).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    groups: set[int] = set()
    for raw in sys.stdin.buffer:
        line = raw.strip()
        try:
            number = int(line[1:])
        except ValueError:
            continue
        if number <= 1:
            continue  # never 0 (own group) or 1 (init)
        if line.startswith(b"+"):
            groups.add(number)
        elif line.startswith(b"-"):
            groups.discard(number)
    stopped = stop_groups(groups, grace_s)
    if stopped:
        try:
            os.write(2, (f"appliance: reaper: the appliance is gone; stopped process group(s) "
                         f"{', '.join(map(str, stopped))}\n").encode())
        except OSError:
            pass  # nobody reads our stderr any more
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
