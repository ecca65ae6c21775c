"""Jinja chat templates: ``check_chat_template`` is what analyzers call; it imports the
jinja2-based checker (``scanner.formats.template.jinja``) on first use, since jinja2 is
heavy. The rules and limits (``scanner.formats.template.rules``) import without jinja2.
Template files (``chat_template.jinja``) are the ``jinja`` format declared here; GGUF
metadata and JSON configs call ``check_chat_template`` on the templates they hold.
"""

from __future__ import annotations

import re
from dataclasses import replace

from scanner.core.blobview import read_bounded
from scanner.core.context import ScanContext
from scanner.core.model import Blob, Finding
from scanner.core.spec import Format, FormatSpec, Head, Probe
from scanner.formats.template.rules import MAX_TEMPLATE_CHARS, UNPARSEABLE

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


def analyze_template(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Jinja template file (``chat_template.jinja``): ``check_template`` on its UTF-8 text."""
    data = read_bounded(blob, MAX_TEMPLATE_CHARS, "max_template_chars")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return [UNPARSEABLE.finding(blob.name, "template is not UTF-8 text",
                                    f"invalid UTF-8 at byte {exc.start}", offset=exc.start)]
    return check_chat_template(blob.name, text)


_JINJA_OPEN = re.compile(r"\{[%{#]")
_JINJA_CLOSE = re.compile(r"[%}#]\}")


def looks_like_jinja(h: Head) -> bool:
    """Named as a template, or holding both a Jinja opening and a closing delimiter."""
    text = h.text or ""
    return h.suffix in (".jinja", ".jinja2", ".j2") or bool(
        _JINJA_OPEN.search(text) and _JINJA_CLOSE.search(text))


JINJA = Format("jinja")  # Jinja template text
SPECS = (FormatSpec(JINJA, analyze_template, binary=False, claims=(".jinja",),
                    probes=(Probe(230, looks_like_jinja, text=True),)),)
