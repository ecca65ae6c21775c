"""The audit chain writer: appends linked records (:mod:`.chain`) to the audit file, signs
checkpoints, keeps the chain across rotation, and copies records to journald / syslog.

Shapes: :meth:`AuditChain.append` takes a JSON-able ``dict`` (the record's own members) and
writes ``{"seq": n, "prev": <hash>, **record}`` as one line (``json.dumps``, compact, ASCII),
with one ``write`` on a file opened ``O_APPEND`` (mode 0600). Single writer: the gateway's
event loop (no locks).

Continuity: at start the chain continues from the last record of the file, or, when the
file is empty or missing (logrotate moved it while the appliance was down), from the last
record of ``<file>.1``; with neither, or an unreadable last line, a new chain begins: its
first record has ``seq`` 0 and ``prev`` :data:`~.chain.GENESIS` (the reason is logged). On
:meth:`reopen` (SIGHUP after logrotate) a checkpoint closes the old file and the new file's
first record links to it. A failed write is logged once; the record is then missing from the
file and ``appliance audit verify`` reports it missing (the chain is not patched over it).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from .chain import (
    CHECKPOINT_EVENT,
    GENESIS,
    key_fingerprint,
    line_hash,
    sign_checkpoint,
)
from .sinks import DatagramSink

LOG = logging.getLogger("appliance.audit")
TAIL_BYTES = 1 << 20
NO_PREVIOUS = "no previous audit file"


def _last_line(path: Path) -> bytes | None:
    """The last non-empty line of ``path`` (read from at most its last 1 MiB), or ``None``
    when the file is missing or empty."""
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - TAIL_BYTES))
            tail = fh.read()
    except OSError:
        return None
    lines = [ln for ln in tail.split(b"\n") if ln.strip()]
    return lines[-1] if lines else None


def _resume(path: Path) -> tuple[int, str] | str:
    """``(next seq, prev hash)`` continuing the chain, or why a new chain starts."""
    for candidate in (path, path.with_name(path.name + ".1")):
        line = _last_line(candidate)
        if line is None:
            continue
        try:
            record = json.loads(line)
            seq = record["seq"]
        except (ValueError, KeyError, TypeError):
            return f"the last line of {candidate.name} is not an audit record"
        if type(seq) is not int or seq < 0:
            return f"the last line of {candidate.name} has no valid seq"
        return seq + 1, line_hash(line)
    return NO_PREVIOUS


class AuditChain:
    """Chained, checkpointed audit file plus optional collector copies.

    ``key``: the checkpoint signing key (``None``: no checkpoints, records still chained);
    ``every`` / ``interval_s``: checkpoint after that many records or that many seconds
    (checked when a record is appended); ``sinks``: :class:`DatagramSink` copies.
    """

    def __init__(self, path: Path, key: ec.EllipticCurvePrivateKey | None = None,
                 every: int = 1000, interval_s: float = 60.0,
                 sinks: tuple[DatagramSink, ...] = ()) -> None:
        self.path = path
        self.key = key
        self.key_id = key_fingerprint(key.public_key()) if key is not None else None
        self.every = every
        self.interval_s = interval_s
        self.sinks = sinks
        self._broken = False
        self._since = 0  # records since the last checkpoint
        self._checkpoint_at = time.monotonic()
        resumed = _resume(path)
        self._file = self._open()
        if isinstance(resumed, str):
            level = logging.INFO if resumed == NO_PREVIOUS else logging.WARNING
            LOG.log(level, "audit log %s: a new chain begins (%s)", path, resumed)
            self.seq, self.prev = 0, GENESIS
        else:
            self.seq, self.prev = resumed

    def _open(self) -> Any:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        return os.fdopen(fd, "ab", buffering=0)

    def _write(self, record: dict[str, Any]) -> None:
        line = json.dumps({"seq": self.seq, "prev": self.prev, **record},
                          separators=(",", ":")).encode("ascii")
        digest = line_hash(line)
        try:
            self._file.write(line + b"\n")
        except (OSError, ValueError) as exc:  # ValueError: closed during shutdown
            if not self._broken:
                LOG.error("audit log write failed: %s", exc)
            self._broken = True
        for sink in self.sinks:
            sink.send(line, self.seq, digest)
        self.seq += 1
        self.prev = digest

    def append(self, record: dict[str, Any]) -> None:
        """Append one record (then a checkpoint when one is due); never raises for I/O."""
        self._write(record)
        self._since += 1
        if self.key is not None and (self._since >= self.every or
                                     time.monotonic() - self._checkpoint_at
                                     >= self.interval_s):
            self.checkpoint()

    def checkpoint(self) -> None:
        """Write a signed checkpoint now (no-op without a key or with nothing new)."""
        if self.key is None or self._since == 0:
            return
        ts = round(time.time(), 3)
        sig = sign_checkpoint(self.key, self.seq, self.prev, ts)
        self._write({"ts": ts, "event": CHECKPOINT_EVENT, "key": self.key_id, "sig": sig})
        self._since = 0
        self._checkpoint_at = time.monotonic()

    def reopen(self) -> None:
        """Checkpoint the current file, then open the path again (after logrotate moved
        it); the chain continues in the new file. On failure keep the old file."""
        self.checkpoint()
        try:
            new = self._open()
        except OSError as exc:
            LOG.error("audit log reopen failed, keeping the old file: %s", exc)
            return
        old, self._file = self._file, new
        self._broken = False
        old.close()

    def close(self) -> None:
        """Checkpoint, close the file and the sinks."""
        self.checkpoint()
        self._file.close()
        for sink in self.sinks:
            sink.close()
