"""The scanner's readers and types that code outside the scanner may build on.

``appliance`` imports the scanner only through its public modules: :mod:`scanner`
(``Finding``, ``Severity``, ``Verdict``), :mod:`scanner.api` (``scan_paths`` /
``scan_target``), :mod:`scanner.diagnostic` (``CodeRegistry``, ``Diagnostic``),
:mod:`scanner.cli` (the scan command) and this module; never ``scanner.core``,
``scanner.formats``, ``scanner.scan`` or ``scanner.report`` (an import-linter contract in
``pyproject.toml`` holds it). What is here is re-exported unchanged from those layers:

* strict JSON: :func:`loads_strict` (duplicate keys, NaN, depth and size refused) and
  :class:`JSONProblem` (``scanner.core.strict_json``);
* findings and rules: :class:`Finding`, :class:`Severity`, :class:`Verdict`, :class:`Rule`,
  :data:`RULES` (every rule id, ``scanner.core.rules``);
* bytes under test: :class:`Blob` (the protocol), :class:`FileBlob` (a file),
  :class:`SliceBlob` (a window of another blob) (``scanner.core.model``, ``blobview``);
* one scan's limits and deadline: :class:`ScanContext`, :class:`Limits`
  (``scanner.core.context``);
* the symbolic pickle interpreter (``scanner.formats.pickle``): :class:`PickleMachine` (the
  ``vm.Machine`` to run or subclass), :data:`PICKLE_OPCODES` (opcode -> handler, the
  machine's ``table``), its values :class:`Glob`, :class:`Made`, :class:`Seq`,
  :class:`Big`, :class:`Opaque`, :func:`describe`, and :data:`TORCH_LEGACY_MAGIC` (the
  legacy ``torch.save`` header);
* the bounds-checked ZIP reader: :func:`read_zip`, :class:`ZipUnreadable`
  (``scanner.formats.ziplib``).

Each name is imported on first use (module ``__getattr__``, PEP 562), so a caller that
wants the strict JSON parser (the gateway, on every request path) does not load the pickle
machine or the ZIP reader.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scanner.core.blobview import SliceBlob
    from scanner.core.context import Limits, ScanContext
    from scanner.core.model import Blob, FileBlob, Finding, Severity, Verdict
    from scanner.core.rules import RULES, Rule
    from scanner.core.strict_json import JSONProblem, loads_strict
    from scanner.formats.pickle.ops import TABLE as PICKLE_OPCODES
    from scanner.formats.pickle.sniff import TORCH_LEGACY_MAGIC
    from scanner.formats.pickle.values import Big, Glob, Made, Opaque, Seq, describe
    from scanner.formats.pickle.vm import Machine as PickleMachine
    from scanner.formats.ziplib import ZipUnreadable, read_zip

# public name -> (module, name there)
_SOURCES: dict[str, tuple[str, str]] = {
    "SliceBlob": ("scanner.core.blobview", "SliceBlob"),
    "Limits": ("scanner.core.context", "Limits"),
    "ScanContext": ("scanner.core.context", "ScanContext"),
    **{name: ("scanner.core.model", name)
       for name in ("Blob", "FileBlob", "Finding", "Severity", "Verdict")},
    "RULES": ("scanner.core.rules", "RULES"),
    "Rule": ("scanner.core.rules", "Rule"),
    "JSONProblem": ("scanner.core.strict_json", "JSONProblem"),
    "loads_strict": ("scanner.core.strict_json", "loads_strict"),
    # from ops, not consts: the table is complete once ops has registered its handlers
    "PICKLE_OPCODES": ("scanner.formats.pickle.ops", "TABLE"),
    "TORCH_LEGACY_MAGIC": ("scanner.formats.pickle.sniff", "TORCH_LEGACY_MAGIC"),
    **{name: ("scanner.formats.pickle.values", name)
       for name in ("Big", "Glob", "Made", "Opaque", "Seq", "describe")},
    "PickleMachine": ("scanner.formats.pickle.vm", "Machine"),
    "ZipUnreadable": ("scanner.formats.ziplib", "ZipUnreadable"),
    "read_zip": ("scanner.formats.ziplib", "read_zip"),
}

__all__ = [
    "PICKLE_OPCODES", "RULES", "TORCH_LEGACY_MAGIC", "Big", "Blob", "FileBlob", "Finding",
    "Glob", "JSONProblem", "Limits", "Made", "Opaque", "PickleMachine", "Rule", "ScanContext",
    "Seq", "Severity", "SliceBlob", "Verdict", "ZipUnreadable", "describe", "loads_strict",
    "read_zip",
]


def __getattr__(name: str) -> Any:
    """Import ``name`` from its layer on first use (then it is a plain module global)."""
    try:
        module, attr = _SOURCES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
