"""Copies of each audit record for the host's log collector: journald (native protocol) and
syslog (RFC 3164 over the local ``/dev/log`` socket), both Unix datagram sockets.

Hand-written with the standard library's ``socket`` (no logging handler): a sink must never
block or fail a request, so the socket is non-blocking and a send that cannot be done now
(collector down, queue full, record too large for one datagram) is dropped and counted in
``dropped`` (the file copy is the one of record; it carries the chain). A lost socket is
re-opened at most every :data:`RECONNECT_S` seconds.

journald fields: ``MESSAGE`` (the record's JSON line), ``PRIORITY=6``,
``SYSLOG_IDENTIFIER=appliance-audit``, ``APPLIANCE_AUDIT_SEQ``, ``APPLIANCE_AUDIT_SHA256``
(the line's hash, the next record's ``prev``). syslog: ``<PRI>appliance-audit[PID]: LINE``
with the configured facility, severity info.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import time
from logging.handlers import SysLogHandler
from typing import Literal

LOG = logging.getLogger("appliance.audit")
RECONNECT_S = 5.0
IDENT = b"appliance-audit"


class DatagramSink:
    """One collector: ``kind`` ``"journald"`` or ``"syslog"`` at the Unix socket
    ``address``; ``facility`` a syslog facility name (``appliance.config.audit.FACILITIES``)."""

    def __init__(self, kind: Literal["journald", "syslog"], address: str,
                 facility: str = "authpriv") -> None:
        self.kind = kind
        self.address = address
        self.priority = SysLogHandler.facility_names[facility] * 8 + SysLogHandler.LOG_INFO
        self.sock: socket.socket | None = None
        self.sent = 0
        self.dropped = 0
        self._retry_at = 0.0
        self._warned = False

    def _connect(self) -> socket.socket | None:
        now = time.monotonic()
        if now < self._retry_at:
            return None
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            sock.setblocking(False)
            sock.connect(self.address)
        except OSError as exc:
            self._retry_at = now + RECONNECT_S
            self._warn(exc)
            return None
        self.sock = sock
        return sock

    def _warn(self, exc: OSError) -> None:
        if not self._warned:
            self._warned = True
            LOG.error("audit %s sink %s unavailable (records dropped there, the file keeps "
                      "them): %s", self.kind, self.address, exc)

    def datagram(self, line: bytes, seq: int, digest: str) -> bytes:
        """What is sent for one record."""
        if self.kind == "journald":
            return (b"MESSAGE=" + line + b"\nPRIORITY=6\nSYSLOG_IDENTIFIER=" + IDENT
                    + b"\nAPPLIANCE_AUDIT_SEQ=%d\nAPPLIANCE_AUDIT_SHA256=%s\n"
                    % (seq, digest.encode()))
        return b"<%d>%s[%d]: %s" % (self.priority, IDENT, os.getpid(), line)

    def send(self, line: bytes, seq: int, digest: str) -> None:
        """Send one record's copy now or drop it (never raises, never blocks)."""
        sock = self.sock or self._connect()
        if sock is None:
            self.dropped += 1
            return
        try:
            sock.send(self.datagram(line, seq, digest))
            self.sent += 1
        except (BlockingIOError, InterruptedError):
            self.dropped += 1
        except OSError as exc:  # collector gone, datagram too large ...
            self.dropped += 1
            self._warn(exc)
            if exc.errno != errno.EMSGSIZE:
                self.close()
                self._retry_at = time.monotonic() + RECONNECT_S

    def close(self) -> None:
        """Close the socket (re-opened on the next send after the back-off)."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
