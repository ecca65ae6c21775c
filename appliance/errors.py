"""One error base for the appliance, with a stable ``code`` and user diagnostics.

Tree::

    ApplianceError
    ├── PolicyError        policy file missing, unreadable or invalid
    ├── SigningError       keygen / sign / verify failures (``code`` names the case)
    ├── ScanRefused        the scanner's verdict is not clean
    ├── PreflightError     a package below its advisory floor, a forbidden environment
    ├── LaunchError        the engine did not start, died or timed out
    └── TlsError           a gateway TLS file is unreadable, invalid or expired

Every error prints as ``error[<code>]: <message>`` plus, when known, the offending path or
field and the fix. The CLI maps any ``ApplianceError`` to exit status 1 (refused) or 2
(usage / no verdict) without a traceback.
"""

from __future__ import annotations


class ApplianceError(Exception):
    """Base error. ``code`` is stable (JSON, logs, tests key on it)."""

    code = "appliance_error"
    exit_status = 1

    def __init__(
        self, message: str, *, code: str | None = None, where: str | None = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.where = where
        self.fix = fix

    def diagnostics(self) -> str:
        """Human-readable, multi-line explanation for stderr."""
        lines = [f"error[{self.code}]: {self.message}"]
        if self.where:
            lines.append(f"  at: {self.where}")
        if self.fix:
            lines.append(f"  fix: {self.fix}")
        return "\n".join(lines)


class PolicyError(ApplianceError):
    code = "policy_invalid"
    exit_status = 2


class SigningError(ApplianceError):
    code = "signature_invalid"


class ScanRefused(ApplianceError):
    code = "scan_refused"


class PreflightError(ApplianceError):
    code = "preflight_failed"


class LaunchError(ApplianceError):
    code = "engine_start_failed"


class TlsError(ApplianceError):
    code = "tls_invalid"
