"""Policy table ``[audit]``: the audit chain's signing key and checkpoints, the copies sent
to journald / syslog, and whether prompts are recorded (``docs/audit.md``).

The file itself stays ``[gateway] audit_log``. Shape (every key optional)::

    [audit]
    signing_key = "${CREDENTIALS_DIRECTORY}/audit.key"  # ECDSA P-256/P-384 PEM (appliance
                                            # keygen); absent: records are chained, unsigned
    passphrase_env = "AUDIT_KEY_PASSPHRASE" # when the key is encrypted
    checkpoint_every = 1000                 # a signed checkpoint after this many records ...
    checkpoint_interval_s = 60              # ... and this often while records are unsigned
                                            # (idle too), at rotation (SIGHUP) and shutdown
    include_prompts = false                 # true: records hold the request's messages
    journald = false                        # also send each record to journald ...
    journald_socket = "/run/systemd/journal/socket"
    syslog = false                          # ... and/or to syslog
    syslog_socket = "/dev/log"
    syslog_facility = "authpriv"
"""

from __future__ import annotations

import os
from logging.handlers import SysLogHandler
from pathlib import Path

from pydantic import Field, StrictBool, field_validator

from appliance.config.base import CREDENTIALS_VAR, StrictModel, expand_credential

# Where the collectors listen by default (Unix datagram sockets that
# appliance.audit.sinks sends to) and the syslog facility names.
JOURNALD_SOCKET = "/run/systemd/journal/socket"
SYSLOG_SOCKET = "/dev/log"
FACILITIES = tuple(sorted(SysLogHandler.facility_names))


class AuditPolicy(StrictModel):
    """``[audit]`` (see the module docstring)."""

    signing_key: Path | None = None
    passphrase_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
    checkpoint_every: int = Field(default=1000, ge=1, le=10_000_000)
    checkpoint_interval_s: float = Field(default=60.0, gt=0, le=86_400)
    include_prompts: StrictBool = False
    journald: StrictBool = False
    journald_socket: str = JOURNALD_SOCKET
    syslog: StrictBool = False
    syslog_socket: str = SYSLOG_SOCKET
    syslog_facility: str = "authpriv"

    @field_validator("syslog_facility")
    @classmethod
    def _facility(cls, value: str) -> str:
        if value not in FACILITIES:
            raise ValueError(f"syslog_facility must be one of {', '.join(FACILITIES)}")
        return value

    def resolved(self, base: Path) -> AuditPolicy:
        """``signing_key`` made absolute against ``base`` (unless it names a systemd
        credential, expanded at start by :meth:`signing_key_path`)."""
        key = self.signing_key
        if key is None or key.is_absolute() or str(key).startswith(CREDENTIALS_VAR):
            return self
        return self.model_copy(update={"signing_key": (base / key).resolve()})

    def signing_key_path(self) -> Path | None:
        """``signing_key`` with ``${CREDENTIALS_DIRECTORY}`` expanded; ``ValueError`` when
        it is used but unset."""
        if self.signing_key is None:
            return None
        return expand_credential(self.signing_key, "audit.signing_key")

    def passphrase(self) -> bytes | None:
        """The key's passphrase from ``passphrase_env`` (``None`` when not configured)."""
        if self.passphrase_env is None:
            return None
        value = os.environ.get(self.passphrase_env, "")
        return value.encode() or None
