"""Helpers the scanner's tests share, imported by name (``from scanner_helpers import rules,
scan``; ``tests/scanner/conftest.py`` puts this folder on ``sys.path``). A test file keeps its
own helper only where it scans differently (another analyzer, a guarded blob, checks on
every finding)."""

from __future__ import annotations

import pickle as P
from collections.abc import Iterable
from pathlib import Path

from scanner.core.context import Limits, ScanContext
from scanner.core.model import BytesBlob, Finding
from scanner.scan.dispatch import analyze_blob


def scan(name: str, data: bytes, **limits: int) -> list[Finding]:
    """The findings for one in-memory file ``name`` holding ``data``, through the dispatcher
    (format sniffed from name and content, nested members scanned), under
    ``Limits(**limits)`` (the defaults where none are given)."""
    return analyze_blob(ScanContext(Limits(**limits)), BytesBlob(name, data))


def rules(findings: Iterable[Finding]) -> set[str]:
    """The rule ids among ``findings``."""
    return {f.rule_id for f in findings}


# A pickle protocol-2 stream that calls os.system("id") when loaded (never loaded here).
EVIL_PICKLE = P.PROTO + b"\x02" + P.GLOBAL + b"os\nsystem\n" + P.SHORT_BINUNICODE + b"\x02id" \
    + P.TUPLE1 + P.REDUCE + P.STOP


def parallel_folder(root: Path, notes: int = 60, repeat: int = 0) -> Path:
    """A folder for the parallel-scan tests: ``notes`` text files of distinct sizes over
    ``d0``..``d3`` (named ``note{i}.md``, or ``note{i % repeat}-{i}.md`` so that base names
    share a prefix), ``d1/evil.pkl`` (``EVIL_PICKLE``) and ``d2/run.py``: ``notes + 2``
    regular files."""
    for i in range(notes):
        sub = root / f"d{i % 4}"
        sub.mkdir(parents=True, exist_ok=True)
        name = f"note{i % repeat}-{i}.md" if repeat else f"note{i}.md"
        (sub / name).write_text("x" * (i + 1) + "\n")
    (root / "d1" / "evil.pkl").write_bytes(EVIL_PICKLE)
    (root / "d2" / "run.py").write_text("import os\nos.system('id')\n")
    return root
