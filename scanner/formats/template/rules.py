"""Template rules and limits, importable without jinja2 (the checker in
``scanner.formats.template.jinja`` loads jinja2 only when a template is actually checked)."""

from __future__ import annotations

from dataclasses import replace

from scanner.core.model import Finding, Severity, Verdict
from scanner.core.rules import rule

SANDBOX_ESCAPE = rule(
    "template.sandbox_escape", Verdict.MALICIOUS, Severity.CRITICAL,
    "Jinja chat template reaches Python internals (sandbox escape / SSTI, CVE-2024-34359)",
    "Replace the chat template with a plain one (messages loop, no attribute walks); "
    "never render templates outside an immutable Jinja sandbox.",
)
UNPARSEABLE = rule(
    "template.unparseable", Verdict.MALFORMED, Severity.MEDIUM,
    "Jinja chat template cannot be parsed, so it cannot be checked",
    "Fix the template syntax (it must parse with Jinja 3 plus the loopcontrols, do and "
    "generation tags) or remove it.",
)

MAX_TEMPLATE_CHARS = 4 << 20  # chat templates are kilobytes; anything this large is refused


MAX_CACHED = 512  # distinct (template, location) results kept per process
_CACHE: dict[tuple[object, str, str], list[Finding]] = {}


def check_chat_template(path: str, text: str, *, location: str = "") -> list[Finding]:
    """``scanner.formats.template.jinja.check_template``, imported on first use (jinja2 is heavy).

    Results are memoised by (template text, location): a fleet holds the same template
    many times, and the check depends on nothing else (findings are re-pathed)."""
    from scanner.formats.template.jinja import check_template

    key = (check_template, text, location)  # the checker too: tests replace it
    cached = _CACHE.get(key)
    if cached is None:
        cached = check_template(path, text, location=location)
        if len(_CACHE) >= MAX_CACHED:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = cached
    return [replace(f, path=path) for f in cached]
