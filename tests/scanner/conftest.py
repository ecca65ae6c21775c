"""Scanner tests call analyzers directly; nested blobs (container members) go through the
dispatcher that ``scanner.scan.dispatch`` registers when imported (``scanner.core.context``),
so it is imported here once for every scanner test. The helpers they share
(``scanner_helpers``: ``scan``, ``rules``) are imported by name from this folder."""

import sys
from pathlib import Path

import scanner.scan.dispatch  # noqa: F401 - registers ScanContext's nested dispatcher

sys.path.insert(0, str(Path(__file__).resolve().parent))
