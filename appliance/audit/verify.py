"""``appliance audit verify``: walk the audit chain (:mod:`.chain`) through one or more
files (oldest first, e.g. ``audit.jsonl.2 audit.jsonl.1 audit.jsonl``) and report the first
record that is broken or missing.

:func:`verify_files` returns a :class:`Report`: ``problem`` (``None`` when intact) is the
first :class:`Finding` — ``code`` one of

* ``audit_not_a_record``: a line is not a JSON object with an integer ``seq`` and a
  64-hex ``prev``;
* ``audit_record_missing``: ``seq`` jumps forward and the skipped records are nowhere in the
  files (deleted);
* ``audit_record_out_of_order``: ``seq`` jumps to a record that is elsewhere in the files,
  goes back or repeats (records moved or copied);
* ``audit_record_altered``: ``seq`` runs on but ``prev`` is not the hash of the line before
  (that line was edited, or a record was replaced); the finding names the altered line;
* ``audit_checkpoint_invalid``: a checkpoint's signature does not verify with the public key;
* ``audit_unsigned``: the files hold no valid checkpoint at all.

``file`` / ``line`` (1-based) / ``seq`` locate it. Besides: ``records``, ``checkpoints``,
``unsigned_tail`` (records after the last valid checkpoint: linked, not yet signed, so their
deletion would not show), ``starts_at`` (the first ``seq``: not 0 when older files were not
given; the first record's own link is then not checked) and ``restarts`` (where a new chain
began after an unreadable tail or a lost file: file, line; accepted only when its ``ts`` is
not before the last record's, else it is ``audit_record_out_of_order``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from .chain import CHECKPOINT_EVENT, GENESIS, checkpoint_valid, line_hash

HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Finding:
    """One problem: stable ``code``, human ``message``, where (``file``, 1-based ``line``,
    ``seq`` when known)."""

    code: str
    message: str
    file: str
    line: int
    seq: int | None = None


@dataclass
class Report:
    """The result of :func:`verify_files` (see the module docstring)."""

    problem: Finding | None = None
    records: int = 0
    checkpoints: int = 0
    unsigned_tail: int = 0
    starts_at: int | None = None
    restarts: list[tuple[str, int]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no record is broken or missing and a checkpoint verified."""
        return self.problem is None


@dataclass
class _Walk:
    key: ec.EllipticCurvePublicKey
    report: Report
    expect_seq: int | None = None
    prev_hash: str | None = None
    prev_where: tuple[str, int] | None = None
    seen: set[int] = field(default_factory=set)  # every seq in the files (first pass)
    prev_ts: float = 0.0

    def fail(self, code: str, message: str, where: tuple[str, int],
             seq: int | None) -> None:
        self.report.problem = Finding(code, message, where[0], where[1], seq)

    def step(self, raw: bytes, where: tuple[str, int]) -> None:
        record = _record(raw)
        if record is None:
            self.fail("audit_not_a_record", "line is not an audit record (JSON object with "
                      "integer seq and hex prev)", where, None)
            return
        seq, prev = record["seq"], record["prev"]
        if self.expect_seq is None:
            self.report.starts_at = seq
        elif seq == 0 and prev == GENESIS and _ts(record) >= self.prev_ts:
            self.report.restarts.append(where)  # new chain: the old one ended before
        elif seq > self.expect_seq and self.expect_seq in self.seen:
            self.fail("audit_record_out_of_order", f"seq {seq} where {self.expect_seq} was "
                      f"expected; record {self.expect_seq} is elsewhere (records moved)",
                      where, seq)
            return
        elif seq > self.expect_seq:
            self.fail("audit_record_missing", f"records seq {self.expect_seq}..{seq - 1} "
                      "are missing before this line (deleted)", where, seq)
            return
        elif seq < self.expect_seq:
            self.fail("audit_record_out_of_order", f"seq {seq} where {self.expect_seq} was "
                      "expected (records moved or repeated)", where, seq)
            return
        elif prev != self.prev_hash:
            altered = self.prev_where or where
            self.fail("audit_record_altered", f"record seq {seq - 1} was altered or replaced: "
                      f"record seq {seq} (line {where[1]}) does not link to it", altered,
                      seq - 1)
            return
        if record.get("event") == CHECKPOINT_EVENT:
            if not _checkpoint_ok(self.key, record):
                self.fail("audit_checkpoint_invalid", "checkpoint signature does not verify "
                          "with the public key", where, seq)
                return
            self.report.checkpoints += 1
            self.report.unsigned_tail = 0
        else:
            self.report.unsigned_tail += 1
        self.report.records += 1
        self.expect_seq, self.prev_hash, self.prev_where = seq + 1, line_hash(raw), where
        self.prev_ts = max(self.prev_ts, _ts(record))


def _ts(record: dict[str, Any]) -> float:
    ts = record.get("ts")
    return float(ts) if isinstance(ts, int | float) else 0.0


def _record(raw: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    seq, prev = record.get("seq"), record.get("prev")
    if type(seq) is not int or seq < 0 or not isinstance(prev, str) or not HEX64.match(prev):
        return None
    return record


def _checkpoint_ok(key: ec.EllipticCurvePublicKey, record: dict[str, Any]) -> bool:
    ts, sig = record.get("ts"), record.get("sig")
    if not isinstance(ts, float) or not isinstance(sig, str):
        return False
    return checkpoint_valid(key, record["seq"], record["prev"], ts, sig)


def verify_files(paths: list[Path], key: ec.EllipticCurvePublicKey) -> Report:
    """Verify the chain through ``paths`` (oldest first) with the audit public ``key``.
    Raises ``OSError`` when a file cannot be read."""
    walk = _Walk(key, Report())
    for path in paths:
        with path.open("rb") as fh:
            for line in fh:
                record = _record(line.rstrip(b"\n"))
                if record is not None:
                    walk.seen.add(record["seq"])
    for path in paths:
        with path.open("rb") as fh:
            for number, line in enumerate(fh, 1):
                raw = line.rstrip(b"\n")
                if not raw.strip():
                    continue
                walk.step(raw, (str(path), number))
                if walk.report.problem is not None:
                    return walk.report
    report = walk.report
    if report.checkpoints == 0:
        where = (str(paths[-1]), 0) if paths else ("", 0)
        walk.fail("audit_unsigned", "no signed checkpoint verifies: the records cannot be "
                  "authenticated", where, None)
    return report
