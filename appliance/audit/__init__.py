"""Tamper-evident audit log: hash-chained records, signed checkpoints, rotation that keeps
the chain, copies to journald / syslog, and the verifier behind ``appliance audit verify``.

Public surface: :class:`AuditChain` (the writer, :mod:`.writer`), :func:`verify_files`,
:class:`Report` and :class:`Finding` (:mod:`.verify`), :class:`DatagramSink`
(:mod:`.sinks`); the link and signature rules are in :mod:`.chain`. What a record holds is
documented in ``docs/audit.md``.
"""

from __future__ import annotations

from .chain import CHECKPOINT_EVENT, GENESIS
from .sinks import DatagramSink
from .verify import Finding, Report, verify_files
from .writer import AuditChain

__all__ = ["CHECKPOINT_EVENT", "GENESIS", "AuditChain", "DatagramSink", "Finding", "Report",
           "verify_files"]
