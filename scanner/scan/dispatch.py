"""Run the analyzer for a blob's sniffed format; crashes and limit hits become findings.

Analyzers come from the format registry (``scanner.scan.registry``): a function, or a
``(module, function)`` pair imported on first use, so a scan of safetensors files never pays
for the pickle machine or jinja2. ``load_all_rules()`` imports every analyzer module (their
rules register at import) for reports that list all rules. Importing this module registers
``analyze_blob`` as the nested dispatcher of ``ScanContext.analyze`` (and
``analyze_content`` behind ``ScanContext.analyze_content``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import cast

from scanner.core.context import Analyzer, LimitHit, ScanContext, set_dispatcher
from scanner.core.model import Blob, Finding
from scanner.core.rules import INTERNAL_ERROR, RULES, Rule
from scanner.core.spec import Format, LazyAnalyzer
from scanner.scan.loaders import extra_findings, readings
from scanner.scan.registry import SPECS
from scanner.scan.sniff import sniff

# Format -> its analyzer (a function, or (module, function) not imported yet).
ANALYZERS: dict[Format, Analyzer | LazyAnalyzer] = {s.format: s.analyzer for s in SPECS}
# Modules whose rules are not reached through an analyzer's module import.
_EXTRA_RULE_MODULES = ("scanner.formats.template.jinja", "scanner.core.fs",
                       "scanner.scan.folder", "scanner.core.archive")
_LOADED: dict[Format, Analyzer] = {}


def analyzer_for(fmt: Format) -> Analyzer:
    """The analyzer function for ``fmt`` (its module imported on first use)."""
    found = _LOADED.get(fmt)
    if found is None:
        ref = ANALYZERS[fmt]
        if isinstance(ref, tuple):
            module, function = ref
            found = cast(Analyzer, getattr(importlib.import_module(module), function))
        else:
            found = ref
        _LOADED[fmt] = found
    return found


def load_all_rules() -> dict[str, Rule]:
    """Import every analyzer module so that ``RULES`` is complete; returns ``RULES``."""
    for fmt in ANALYZERS:
        analyzer_for(fmt)
    for module in _EXTRA_RULE_MODULES:
        importlib.import_module(module)
    return RULES


def analyze_blob(ctx: ScanContext, blob: Blob, fmt: Format | None = None) -> list[Finding]:
    """Sniff ``blob`` (unless its ``fmt`` is already known) and analyze it, then as every
    other format a loader reads it as (``scanner.scan.loaders``: by its name, and by
    content valid as two formats). Never raises for bad input: an analyzer crash is a
    ``scanner.internal_error`` finding and a limit hit a ``scanner.limit_exceeded`` one."""
    found: list[Finding] = []

    def primary() -> list[Finding]:
        nonlocal fmt
        ctx.check_deadline()
        if fmt is None:
            fmt = sniff(blob)
        found.extend(analyzer_for(fmt)(ctx, blob))
        for other, reader in readings(blob, fmt):
            found.extend(extra_findings(_guarded(ctx, blob, other), other, reader))
        return found

    return _guard(blob, primary, found)


def _guarded(ctx: ScanContext, blob: Blob, fmt: Format) -> list[Finding]:
    """``fmt``'s analyzer on ``blob``; crashes and limit hits as findings."""
    def run() -> list[Finding]:
        ctx.check_deadline()
        return analyzer_for(fmt)(ctx, blob)

    return _guard(blob, run, [])


def _guard(blob: Blob, run: Callable[[], list[Finding]],
           so_far: list[Finding]) -> list[Finding]:
    """``run()``, or ``so_far`` plus the finding for the exception it raised."""
    try:
        return run()
    except LimitHit as hit:
        return so_far + [hit.finding(blob.name)]
    except RecursionError:
        return so_far + [INTERNAL_ERROR.finding(
            blob.name, "analysis exceeded the recursion limit", evidence="RecursionError")]
    except MemoryError:
        return so_far + [INTERNAL_ERROR.finding(
            blob.name, "analysis ran out of memory", evidence="MemoryError")]
    except Exception as exc:  # noqa: BLE001 - fail closed: any crash is a finding
        return so_far + [INTERNAL_ERROR.finding(
            blob.name, f"analysis crashed: {type(exc).__name__}",
            evidence=f"{type(exc).__name__}: {exc}"[:500])]


def analyze_content(ctx: ScanContext, blob: Blob) -> tuple[Format, list[Finding]]:
    """``blob`` sniffed with ``by_name=False`` and analysed at this nesting level (the
    hook behind ``ScanContext.analyze_content``)."""
    fmt = sniff(blob, by_name=False)
    return fmt, analyze_blob(ctx, blob, fmt)


set_dispatcher(analyze_blob, analyze_content)
