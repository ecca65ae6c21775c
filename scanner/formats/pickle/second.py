"""Second opinion from picklescan (mmaitre314/picklescan) on the bytes we interpreted.

It can only add findings, never clear one: when picklescan names a global that our
interpreter did not flag (a parser disagreement), the artifact is reported as
``pickle.second_opinion``. picklescan disassembles with ``pickletools`` (it never
unpickles). Its own failures are ignored: it is an extra check, not a gate.
"""

from __future__ import annotations

import io
import logging

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
    try:
        from picklescan.scanner import SafetyLevel, scan_pickle_bytes
    except Exception:  # noqa: BLE001 - optional dependency
        return []
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
