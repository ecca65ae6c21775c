"""Registry of finding kinds. Every ``rule_id`` is stable: JSON, SARIF, exit codes and
policy exceptions key on it. Analyzers declare their rules at import time with ``rule()``.
"""

from __future__ import annotations

from dataclasses import dataclass

from scanner.core.model import Finding, Severity, Verdict


@dataclass(frozen=True)
class Rule:
    """A finding kind: id (``family.name``), the verdict it implies, its severity,
    a one-line title and the fix shown to users."""

    id: str
    verdict: Verdict
    severity: Severity
    title: str
    fix: str

    def finding(
        self, path: str, message: str, evidence: str = "", offset: int | None = None
    ) -> Finding:
        return Finding(self.id, self.severity, self.verdict, path, message, evidence, offset)


RULES: dict[str, Rule] = {}


def rule(id: str, verdict: Verdict, severity: Severity, title: str, fix: str) -> Rule:
    """Declare a rule (module import time). Re-declaring an id with other fields is a bug."""
    new = Rule(id, verdict, severity, title, fix)
    old = RULES.setdefault(id, new)
    if old != new:
        raise RuntimeError(f"rule {id!r} declared twice with different fields")
    return new


V, S = Verdict, Severity

# Rules used by the framework itself (context, dispatch, filesystem).
INTERNAL_ERROR = rule(
    "scanner.internal_error", V.MALFORMED, S.HIGH,
    "A check crashed; the artifact is not trusted (fail closed)",
    "Report the evidence to the appliance maintainers; do not deploy the artifact.",
)
LIMIT_EXCEEDED = rule(
    "scanner.limit_exceeded", V.MALFORMED, S.HIGH,
    "A scan limit (size, count, depth, time) was hit; the artifact is not trusted",
    "Inspect the artifact by hand; raise the limit only for a trusted source.",
)
