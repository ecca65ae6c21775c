"""Daily and monthly token quotas of the local admission backend, kept across restarts.

Use is counted per principal id in UTC calendar windows (:class:`QuotaWindows`) and kept in
a small JSON state file, written atomically (temp file in the same folder, fsync, rename,
mode 0600)::

    {"schema_version": 1, "day": "20261203", "month": "202612",
     "used": {"alice": {"day": 1200, "month": 45000}}}

Writes are debounced: at most one per ``flush_s`` seconds (default 1 s) after a charge, and
one on shutdown, so the hot path never waits on the disk; a crash loses at most the last
``flush_s`` seconds of charges. A file from an earlier day or month has that window's
counts reset when read. An unreadable or invalid state file refuses start-up
(``ApplianceError`` ``quota_state_invalid`` naming the file): silently starting from zero
would hand every key a fresh quota. The Redis backend keeps quotas in Redis instead
(:mod:`appliance.gateway.admission.redis`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

from appliance.config.keys import KeyLimits, write_private
from appliance.errors import ApplianceError

from ..errors import GatewayError
from .backend import QuotaWindows, quota_refusal

LOG = logging.getLogger("appliance.gateway")


def _error(path: Path, message: str) -> ApplianceError:
    return ApplianceError(message, code="quota_state_invalid", where=str(path),
                          fix="restore the file from a backup, or remove it to start every "
                              "key's quota from zero")


class QuotaLedger:
    """Token use per principal for the current UTC day and month (see module docstring)."""

    def __init__(self, path: Path | None, flush_s: float = 1.0) -> None:
        self.path = path
        self.flush_s = flush_s
        self.day = ""
        self.month = ""
        self.used: dict[str, list[int]] = {}  # id -> [day, month]
        self._dirty = False
        self._timer: asyncio.TimerHandle | None = None
        if path is not None and path.exists():
            self._load(path)

    def _load(self, path: Path) -> None:
        try:
            data = json.loads(path.read_bytes())
        except OSError as exc:
            raise _error(path, f"cannot read quota state: {exc.strerror}") from None
        except ValueError as exc:
            raise _error(path, f"quota state is not valid JSON: {exc}") from None
        ok = isinstance(data, dict) and data.get("schema_version") == 1 \
            and isinstance(data.get("day"), str) and isinstance(data.get("month"), str) \
            and isinstance(data.get("used"), dict)
        if not ok:
            raise _error(path, "quota state must be {schema_version: 1, day, month, used}")
        used: dict[str, list[int]] = {}
        for key, value in data["used"].items():
            if not (isinstance(value, dict) and all(
                    isinstance(value.get(k), int) and value[k] >= 0 for k in ("day", "month"))):
                raise _error(path, f"quota state entry {key!r} must be {{day: int, month: int}}")
            used[key] = [value["day"], value["month"]]
        self.day, self.month, self.used = data["day"], data["month"], used

    def _roll(self, windows: QuotaWindows) -> None:
        if windows.month != self.month:
            self.used = {}
            self.day, self.month = windows.day, windows.month
            self._dirty = True
        elif windows.day != self.day:
            for counts in self.used.values():
                counts[0] = 0
            self.day = windows.day
            self._dirty = True

    def check_and_add(self, key_id: str, limits: KeyLimits, tokens: int,
                      commit: bool = True, now: float | None = None) -> GatewayError | None:
        """Refuse (429 ``quota_exceeded``) when ``tokens`` more would pass the day's or the
        month's quota; else, with ``commit``, add them. Principals without quotas are not
        counted."""
        per_day, per_month = limits.tokens_per_day, limits.tokens_per_month
        if per_day is None and per_month is None:
            return None
        windows = QuotaWindows.at(now)
        self._roll(windows)
        counts = self.used.get(key_id, [0, 0])
        if per_day is not None and counts[0] + tokens > per_day:
            return quota_refusal(key_id, "day", per_day, counts[0], tokens, windows.day_left_s)
        if per_month is not None and counts[1] + tokens > per_month:
            return quota_refusal(key_id, "month", per_month, counts[1], tokens,
                                 windows.month_left_s)
        if commit:
            self.add(key_id, tokens)
        return None

    def add(self, key_id: str, tokens: int) -> None:
        counts = self.used.setdefault(key_id, [0, 0])
        counts[0] += tokens
        counts[1] += tokens
        self._dirty = True
        self._schedule()

    def _schedule(self) -> None:
        if self.path is None or self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        self._timer = loop.call_later(self.flush_s, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        try:
            self.flush()
        except OSError as exc:  # kept dirty: the next charge tries again
            LOG.error("cannot write the quota state file %s: %s (quotas are enforced but "
                      "would restart from the last saved use)", self.path, exc.strerror)

    def snapshot(self) -> dict[str, Any]:
        return {"schema_version": 1, "day": self.day, "month": self.month,
                "used": {k: {"day": v[0], "month": v[1]} for k, v in sorted(self.used.items())}}

    def flush(self) -> None:
        """Write the state file now if anything changed (atomic rename, mode 0600)."""
        if self.path is None or not self._dirty:
            return
        self.path.resolve().parent.mkdir(parents=True, exist_ok=True)
        write_private(self.path, json.dumps(self.snapshot(), separators=(",", ":")) + "\n")
        self._dirty = False

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._on_timer()
