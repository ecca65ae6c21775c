"""The format registry: the one list of format modules, and the tables derived from their
``SPECS`` (``scanner.core.spec``) that the sniffer, the dispatcher and the folder rules
read. A new format is one module under ``scanner/formats/`` plus one line in ``MODULES``.

Importing this imports every format module's top level (specs and sniff predicates), not
the heavy analysis code a format keeps behind a lazy analyzer (the pickle machine, jinja2).
"""

from __future__ import annotations

from types import ModuleType

from scanner.core.spec import Format, FormatSpec
from scanner.formats import (
    compressed,
    gguf,
    keras,
    numpy,
    onnx,
    pickle,
    rdata,
    safetensors,
    sevenzip,
    tar,
    tensorflow,
    text,
    xml,
    zip,
)

# One line per format module; each module's SPECS lists the formats it declares.
MODULES: tuple[ModuleType, ...] = (
    safetensors,
    pickle,
    zip,
    tar,
    sevenzip,
    numpy,
    keras,
    gguf,
    onnx,
    compressed,
    rdata,
    tensorflow,
    xml,
    text,
)


def _specs(modules: tuple[ModuleType, ...]) -> tuple[FormatSpec, ...]:
    specs: list[FormatSpec] = []
    for module in modules:
        declared = module.SPECS
        if not isinstance(declared, tuple) or not all(
                isinstance(s, FormatSpec) for s in declared):
            raise TypeError(f"{module.__name__}.SPECS must be a tuple of FormatSpec")
        specs.extend(declared)
    names = [s.format for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"a format is declared twice: {sorted(names)}")
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
