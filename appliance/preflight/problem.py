"""One preflight refusal (:class:`Problem`) and the codes it may carry (:data:`PREFLIGHT_CODES`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from scanner.diagnostic import CodeRegistry, Diagnostic

PREFLIGHT_CODES = CodeRegistry("preflight", {
    "package_missing": "a package the policy requires is not installed",
    "package_below_floor": "an installed package is below its patched advisory floor",
    "python_optimize_not_allowed": "python -O / PYTHONOPTIMIZE strips assert-based checks",
    "forbidden_environment": "an engine variable that opens attack surface is set",
    "advisory_feed_rejected": "the installed advisory feed no longer verifies (key revoked or "
                              "expired, file altered)",
    "advisory_feed_rolled_back": "the advisory list in force is older than the highest feed "
                                 "serial ever installed, or that record is unreadable",
})
"""Codes of :class:`Problem` (``appliance check`` also reports the gateway listener's TLS
problems as problems, with their ``appliance`` codes)."""


@dataclass(frozen=True)
class Problem:
    """One preflight refusal: ``code`` is stable (:data:`PREFLIGHT_CODES`), ``subject`` the
    package or variable, ``advisory`` the advisory id or source."""

    code: str
    subject: str
    message: str
    advisory: str
    fix: str
    registry: ClassVar[CodeRegistry] = PREFLIGHT_CODES

    @property
    def diagnostic(self) -> Diagnostic:
        """``Diagnostic(code, "message (advisory)", at=subject, fix)``."""
        return Diagnostic(self.code, f"{self.message} ({self.advisory})", self.subject,
                          self.fix)

    def render(self) -> str:
        return self.diagnostic.render()
