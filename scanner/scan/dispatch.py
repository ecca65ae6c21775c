"""Run the analyzer for a blob's sniffed format; crashes and limit hits become findings.

Analyzer modules are imported on first use, so a scan of safetensors files never pays for
the pickle interpreter, the zip reader or jinja2. ``load_all_rules()`` imports every
analyzer module (their rules register at import) for reports that list all rules.
"""

from __future__ import annotations

import importlib
from typing import cast

from scanner.core.context import Analyzer, LimitHit, ScanContext
from scanner.core.formats import Format
from scanner.core.model import Blob, Finding
from scanner.core.rules import INTERNAL_ERROR, RULES, Rule
from scanner.core.spec import SPECS
from scanner.scan.sniff import sniff

# Format -> (module under ``scanner``, function), from the format registry.
ANALYZER_NAMES: dict[Format, tuple[str, str]] = {s.format: s.analyzer for s in SPECS}
_EXTRA_RULE_MODULES = ("formats.template.rules", "formats.template.jinja", "core.fs",
                       "scan.folder", "core.archive", "formats.pysource")
_LOADED: dict[Format, Analyzer] = {}


def analyzer_for(fmt: Format) -> Analyzer:
    """The analyzer function for ``fmt`` (its module imported on first use)."""
    found = _LOADED.get(fmt)
    if found is None:
        module, function = ANALYZER_NAMES[fmt]
        found = cast(Analyzer, getattr(importlib.import_module(f"scanner.{module}"),
                                            function))
        _LOADED[fmt] = found
    return found


def load_all_rules() -> dict[str, Rule]:
    """Import every analyzer module so that ``RULES`` is complete; returns ``RULES``."""
    for module in {m for m, _ in ANALYZER_NAMES.values()} | set(_EXTRA_RULE_MODULES):
        importlib.import_module(f"scanner.{module}")
    return RULES


def analyze_blob(ctx: ScanContext, blob: Blob, fmt: Format | None = None) -> list[Finding]:
    """Sniff ``blob`` (unless its ``fmt`` is already known) and analyze it. Never raises
    for bad input: an analyzer crash is a ``scanner.internal_error`` finding and a limit
    hit a ``scanner.limit_exceeded`` one."""
    try:
        ctx.check_deadline()
        if fmt is None:
            fmt = sniff(blob)
        return analyzer_for(fmt)(ctx, blob)
    except LimitHit as hit:
        return [hit.finding(blob.name)]
    except RecursionError:
        return [INTERNAL_ERROR.finding(blob.name, "analysis exceeded the recursion limit",
                                       evidence="RecursionError")]
    except MemoryError:
        return [INTERNAL_ERROR.finding(blob.name, "analysis ran out of memory",
                                       evidence="MemoryError")]
    except Exception as exc:  # noqa: BLE001 - fail closed: any crash is a finding
        return [INTERNAL_ERROR.finding(blob.name, f"analysis crashed: {type(exc).__name__}",
                                       evidence=f"{type(exc).__name__}: {exc}"[:500])]
