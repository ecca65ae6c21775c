"""Scanner tests call analyzers directly; nested blobs (container members) go through the
dispatcher that ``scanner.scan.dispatch`` registers when imported (``scanner.core.context``),
so it is imported here once for every scanner test."""

import scanner.scan.dispatch  # noqa: F401 - registers ScanContext's nested dispatcher
