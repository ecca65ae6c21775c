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
"""

from __future__ import annotations

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

__all__ = [
    "PICKLE_OPCODES", "RULES", "TORCH_LEGACY_MAGIC", "Big", "Blob", "FileBlob", "Finding",
    "Glob", "JSONProblem", "Limits", "Made", "Opaque", "PickleMachine", "Rule", "ScanContext",
    "Seq", "Severity", "SliceBlob", "Verdict", "ZipUnreadable", "describe", "loads_strict",
    "read_zip",
]
