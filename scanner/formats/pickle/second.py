"""Second opinion from picklescan (mmaitre314/picklescan) on the bytes we interpreted.

It can only add findings, never clear one: when picklescan names a global that our
interpreter did not flag (a parser disagreement), the artifact is reported as
``pickle.second_opinion``. picklescan disassembles with ``pickletools`` (it never
unpickles). Its own failures are ignored: it is an extra check, not a gate.

Start-up cost: ``picklescan.scanner`` imports ``http.client`` and ``tempfile`` for its URL,
Hugging Face and 7z helpers, which only ``scan_pickle_bytes`` is called of here. Those two
imports cost ~35 ms of CPU per process (measured on the 2-core host kind, about a tenth
of a whole fleet scan), so picklescan is imported with placeholder modules in their place,
removed again right after: the process keeps importing the real modules wherever they are
needed, and a call into picklescan's download helpers fails loudly instead of running.
"""

from __future__ import annotations

import io
import logging
import sys
import types
from typing import Any

from scanner.core.model import Blob, Finding
from scanner.formats.pickle import rules as R

MAX_BYTES = 4 << 20  # picklescan keeps every opcode in memory (~0.6 s per MiB): small only


def second_opinion(blob: Blob, start: int, end: int, seen: dict[str, bool]) -> list[Finding]:
    """picklescan's view of ``blob[start:end]`` (one or several consecutive pickles).

    ``seen`` maps each global our interpreter resolved (``module.name``) to whether it is
    allowlisted. Returns ``pickle.second_opinion`` findings for globals picklescan rates
    dangerous that we allowlisted, and for non-innocuous globals we never saw. Names that
    picklescan could not resolve (its ``unknown``) are left to our interpreter, which
    resolves STACK_GLOBAL exactly or reports ``pickle.dynamic_global`` itself.
    """
    size = end - start
    if size <= 0 or size > MAX_BYTES:
        return []
    picklescan = _picklescan()
    if picklescan is None:
        return []
    SafetyLevel, scan_pickle_bytes = picklescan.SafetyLevel, picklescan.scan_pickle_bytes
    data = blob.read_at(start, size)
    log = logging.getLogger("picklescan")
    was_disabled = log.disabled
    log.disabled = True
    try:
        result = scan_pickle_bytes(io.BytesIO(data), blob.name, multiple_pickles=True)
        flagged = [
            (str(g.module), str(g.name), g.safety is SafetyLevel.Dangerous)
            for g in result.globals
            if g.safety is not SafetyLevel.Innocuous
        ]
    except Exception:  # noqa: BLE001 - its crash is not our crash
        return []
    finally:
        log.disabled = was_disabled
    out: list[Finding] = []
    for module, name, dangerous in sorted(set(flagged)):
        if "unknown" in (module, name):
            continue
        qual = f"{module}.{name}"
        allowlisted = seen.get(qual)
        if allowlisted is False or (allowlisted is True and not dangerous):
            continue
        why = ("rated dangerous by picklescan although allowlisted here" if allowlisted
               else "reported by picklescan but never resolved by this analyzer")
        out.append(R.SECOND_OPINION.finding(
            blob.name, f"global {qual} {why}", evidence=qual[:300], offset=start))
    return out


# modules picklescan.scanner imports for helpers never called here -> names it takes from them
_UNUSED: dict[str, tuple[str, ...]] = {"http.client": (), "tempfile": ("TemporaryDirectory",)}


def _unavailable(*args: object, **kwargs: object) -> Any:
    raise RuntimeError("picklescan's download/extract helpers are not available in the scanner")


def _picklescan() -> Any:
    """``picklescan.scanner`` (``None`` when not installed), imported without the modules
    of ``_UNUSED`` that the process has not imported yet (see the module docstring)."""
    loaded = sys.modules.get("picklescan.scanner")
    if loaded is not None:
        return loaded
    placeholders: dict[str, types.ModuleType] = {}
    for name, attrs in _UNUSED.items():
        if name not in sys.modules:
            module = types.ModuleType(name, "placeholder while importing picklescan")
            for attr in attrs:
                setattr(module, attr, _unavailable)
            placeholders[name] = module
    sys.modules.update(placeholders)
    try:
        from picklescan import scanner
    except Exception:  # noqa: BLE001 - optional dependency
        return None
    finally:
        for name, module in placeholders.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]
    return scanner
