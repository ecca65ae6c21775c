"""Template rules and limits, importable without jinja2 (the checker in
``scanner.formats.template.jinja`` imports it)."""

from __future__ import annotations

from scanner.core.model import Severity, Verdict
from scanner.core.rules import rule

SANDBOX_ESCAPE = rule(
    "template.sandbox_escape", Verdict.MALICIOUS, Severity.CRITICAL,
    "Jinja chat template reaches Python internals (sandbox escape / SSTI, CVE-2024-34359)",
    "Replace the chat template with a plain one (messages loop, no attribute walks); "
    "never render templates outside an immutable Jinja sandbox.",
)
UNRESOLVED_LOOKUP = rule(
    "template.unresolved_lookup", Verdict.POLICY, Severity.HIGH,
    "Jinja chat template looks up a key taken from render data on an object it builds "
    "(a global, a namespace, a computed value), so the name reached cannot be checked",
    "Look keys up only on message and tool data, or with literal keys; Jinja falls back "
    "to getattr for a missing string key.",
)
UNPARSEABLE = rule(
    "template.unparseable", Verdict.MALFORMED, Severity.MEDIUM,
    "Jinja chat template cannot be parsed, so it cannot be checked",
    "Fix the template syntax (it must parse with Jinja 3 plus the loopcontrols, do and "
    "generation tags) or remove it.",
)

MAX_TEMPLATE_CHARS = 4 << 20  # chat templates are kilobytes; anything this large is refused

