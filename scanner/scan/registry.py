"""The format registry: the one list of format modules, and the tables derived from their
``SPECS`` (``scanner.core.spec``) that the sniffer, the dispatcher and the folder rules
read. A new format is one module under ``scanner/formats/`` plus one line in ``MODULES``
(imported by name here; ``tests/scanner/test_layout.py`` adds these edges to the import
graph it checks for cycles).

Importing this imports every format module's top level (specs and sniff predicates), not
the heavy analysis code a format keeps behind a lazy analyzer (the pickle machine, jinja2).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from scanner.core.spec import Format, FormatSpec

# One line per format module (each module's SPECS lists the formats it declares). Order
# breaks ties between sniff tests of equal order.
MODULES: tuple[str, ...] = (
    "scanner.formats.safetensors",
    "scanner.formats.pickle",
    "scanner.formats.zip",
    "scanner.formats.tar",
    "scanner.formats.sevenzip",
    "scanner.formats.numpy",
    "scanner.formats.keras",
    "scanner.formats.gguf",
    "scanner.formats.ggml",
    "scanner.formats.executable",
    "scanner.formats.flax",
    "scanner.formats.onnx",
    "scanner.formats.compressed",
    "scanner.formats.rdata",
    "scanner.formats.tensorflow",
    "scanner.formats.trtengine",
    "scanner.formats.executorch",
    "scanner.formats.torchmobile",
    "scanner.formats.coreml",
    "scanner.formats.paddle",
    "scanner.formats.oci",
    "scanner.formats.xml",
    "scanner.formats.text",
    "scanner.formats.pysource",
    "scanner.formats.template",
    "scanner.formats.yamlconf",
)


def _specs(names: tuple[str, ...]) -> tuple[FormatSpec, ...]:
    """Every module's SPECS, in registry order. Raises ``TypeError``/``ValueError`` for a
    module without a tuple of ``FormatSpec`` or a format declared twice (at import: a
    broken registry never scans)."""
    specs: list[FormatSpec] = []
    for name in names:
        module: ModuleType = importlib.import_module(name)
        declared = getattr(module, "SPECS", None)
        if not isinstance(declared, tuple) or not all(
                isinstance(s, FormatSpec) for s in declared):
            raise TypeError(f"{module.__name__}.SPECS must be a tuple of FormatSpec")
        specs.extend(declared)
    formats = [s.format for s in specs]
    if len(set(formats)) != len(formats):
        raise ValueError(f"a format is declared twice: {sorted(formats)}")
    return tuple(specs)


SPECS: tuple[FormatSpec, ...] = _specs(MODULES)
BY_FORMAT: dict[Format, FormatSpec] = {s.format: s for s in SPECS}
NAME_HINTS: dict[str, Format] = {}
for _spec in SPECS:
    for _hint in _spec.name_hints:
        NAME_HINTS.setdefault(_hint, _spec.format)
# Container and weight formats: a file sniffed as one of these is judged by its analyzer.
BINARY_FORMATS: frozenset[Format] = frozenset(s.format for s in SPECS if s.binary)
# suffix -> the formats a file so named may hold (folder rule format.extension_mismatch).
CLAIMS: dict[str, frozenset[Format]] = {
    suffix: frozenset(s.format for s in SPECS if suffix in s.claims)
    for suffix in sorted({c for s in SPECS for c in s.claims})
}
# suffix -> the one text format claiming it (analysed as that format when its content did
# not sniff as any binary format).
NAMED_TEXT: dict[str, Format] = {
    suffix: next(iter(fmts)) for suffix, fmts in CLAIMS.items()
    if len(fmts) == 1 and not BY_FORMAT[next(iter(fmts))].binary
}
