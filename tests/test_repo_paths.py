"""Nothing in the project names a path outside the repository or a note a clone cannot open.

Scans the project's own text (code, tests, docs, bench, scripts, policies, units, CI and the
top-level files; not the model artifacts under tests/fixtures) for an absolute path into a
developer's workspace, a ``shared/`` folder beside the checkout, and references to research
notes (``<note>.md §N``, ``research/...``). State the fact, or cite the public source.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("appliance", "scanner", "tests", "bench", "docs", "scripts", "policies", "systemd",
           ".ci")
TOP = ("README.md", "Dockerfile", "pyproject.toml", "setup.py", "MANIFEST.in", ".dockerignore",
       ".gitignore", ".gitattributes")
SKIP_PARTS = {"__pycache__", "fixtures", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
# Built from pieces so this file does not match itself.
WORK = "/" + "work/"
FORBIDDEN = re.compile("|".join([
    re.escape(WORK),
    r"\.\./" + "shared",
    r"\b" + "research" + r"/[\w-]+",
    r"\b[\w-]+\.md" + r" §",
    "research" + r" notes?\b",
]))


def _texts() -> list[Path]:
    files = [REPO / name for name in TOP if (REPO / name).is_file()]
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*")):
            if path.is_file() and not SKIP_PARTS & set(path.relative_to(REPO).parts):
                files.append(path)
    return files


def test_no_text_names_a_path_outside_the_repository() -> None:
    hits = []
    scanned = 0
    for path in _texts():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary (images, keys in DER)
        scanned += 1
        for number, line in enumerate(text.splitlines(), 1):
            if FORBIDDEN.search(line):
                hits.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:120]}")
    assert scanned > 100
    assert hits == []


def test_the_pattern_catches_what_it_is_for() -> None:
    for line in (WORK + "shared/x", "see ../" + "shared/corpus", "research" + "/signing.md",
                 "(vllm.md" + " §3.1)", "research" + " note"):
        assert FORBIDDEN.search(line), line
    assert not FORBIDDEN.search("RFC 8259 §7 and tests/fixtures/corpus/cases.json")
