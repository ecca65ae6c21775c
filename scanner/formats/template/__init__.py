"""Jinja chat templates: ``check_chat_template`` is what analyzers call; it imports the
jinja2-based checker (``scanner.formats.template.jinja``) on first use, since jinja2 is
heavy. The rules and limits (``scanner.formats.template.rules``) import without jinja2.
There is no template ``FormatSpec`` here: template files are sniffed as ``jinja`` text and
analysed by ``scanner.formats.text``; GGUF metadata and JSON configs call this too.
"""

from __future__ import annotations

from dataclasses import replace

from scanner.core.model import Finding

MAX_CACHED = 512  # distinct (template, location) results kept per process
_CACHE: dict[tuple[object, str, str], list[Finding]] = {}


def check_chat_template(path: str, text: str, *, location: str = "") -> list[Finding]:
    """``scanner.formats.template.jinja.check_template``, imported on first use.

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
