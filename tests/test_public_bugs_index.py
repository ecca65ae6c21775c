"""Every public bug in tests/fixtures/public-bugs.jsonl has a regression test named after it.

The index holds one JSON object a line (``id``, ``source``, ``component``, ``symptom``,
``input``, ``expected``); a test function whose name contains the id (``-`` read as ``_``)
anywhere under tests/ is that bug's regression test. A new line without a test fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from _shared import FIXTURES, PUBLIC_BUGS

TESTS = Path(__file__).resolve().parent
FIELDS = {"id", "source", "component", "symptom", "input", "expected"}


def _bugs() -> list[dict[str, object]]:
    return [json.loads(line) for line in PUBLIC_BUGS.read_text().splitlines() if line.strip()]


def _test_names() -> set[str]:
    names: set[str] = set()
    for path in TESTS.rglob("*.py"):
        if FIXTURES in path.parents:
            continue
        names.update(re.findall(r"^\s*(?:async\s+)?def\s+(test_\w+)", path.read_text(), re.M))
    return names


def test_index_lines_have_the_documented_fields_and_unique_ids() -> None:
    bugs = _bugs()
    assert len(bugs) >= 28
    assert all(FIELDS <= set(bug) for bug in bugs), [b.get("id") for b in bugs
                                                      if not FIELDS <= set(b)]
    ids = [bug["id"] for bug in bugs]
    assert len(ids) == len(set(ids))


def test_every_public_bug_has_a_test_named_after_its_id() -> None:
    names = _test_names()
    missing = [bug["id"] for bug in _bugs()
               if not any(str(bug["id"]).replace("-", "_") in name for name in names)]
    assert missing == []
