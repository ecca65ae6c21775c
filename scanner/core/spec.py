"""What a format module declares: its ``Format`` name and ``FormatSpec`` lines.

Each format module (``scanner/formats/*``) ends with ``SPECS = (FormatSpec(...), ...)``;
``scanner.scan.registry`` lists the modules (one line per module) and derives every table
the sniffer, the dispatcher and the folder rules read. Nothing else names a format, so a
new format is one module plus one registry line. Imports only ``scanner.core.model``.

Sniff order: first the ``Probe(by_name=True)`` tests (files whose place in a layout is
part of their meaning: an OCI ``blobs/sha256/<digest>``, a Core ML ``Manifest.json``; run
even for an empty blob, skipped by ``sniff(blob, by_name=False)``); then, for a non-empty
blob, every spec's ``magic`` test runs at the spec's ``order``, every other ``Probe`` at
its own ``order``; all byte tests (magic and ``Probe(text=False)``) run first, lowest order
first (ties: registry order), the first that matches decides. When none matches, the head
is decoded: binary falls back to the ``name_hints`` of the file's suffix, else ``UNKNOWN``;
text runs the ``Probe(text=True)`` tests, else is ``TEXT``. An empty blob is ``EMPTY``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from scanner.core.model import Blob, Finding

if TYPE_CHECKING:
    from scanner.core.context import ScanContext


_INTERNED: dict[str, Format] = {}


class Format(str):
    """A format's name, and its identity: ``Format("pickle") == "pickle"``, and one instance
    per name (``Format("zip") is Format("zip")``). The format module that declares the
    spec creates it (there is no central enumeration: the registry is the list)."""

    __slots__ = ()

    def __new__(cls, name: str) -> Format:
        found = _INTERNED.get(name)
        if found is None:
            found = _INTERNED[name] = super().__new__(cls, name)
        return found

    @property
    def value(self) -> str:
        """The name (``Format`` was an ``enum.Enum``; reports used ``.value``)."""
        return str(self)

    def __repr__(self) -> str:
        return f"Format({str(self)!r})"


# The sniffer's own outcomes (their analyzers live in ``scanner.formats.text``).
EMPTY = Format("empty")
TEXT = Format("text")  # UTF-8 text no text probe recognised
UNKNOWN = Format("unknown")  # binary no probe recognised and no name hint names


class Head(NamedTuple):
    """What the sniffer has read of one blob: ``head`` = its first ``HEAD`` bytes (fewer
    for a small blob); ``text`` = ``head`` decoded (text probes only, else ``None``)."""

    blob: Blob
    head: bytes
    text: str | None = None

    @property
    def name(self) -> str:
        return self.blob.name

    @property
    def size(self) -> int:
        return self.blob.size

    @property
    def suffix(self) -> str:
        """Lower-case suffix of the last name component (``a/b.JSON`` -> ``.json``; a
        member ``x.zip!a/b.pt`` -> ``.pt``), ``""`` for none."""
        last = self.blob.name.rsplit("!", 1)[-1].rsplit("/", 1)[-1].lower()
        dot = last.rfind(".")
        return last[dot:] if dot > 0 else ""


class Probe(NamedTuple):
    """A structural sniff test at ``order`` (see the module docstring); ``text=True``: run
    on decoded text (``Head.text`` set) after every byte test failed; ``by_name=True``: a
    test of the blob's place (name) and content, run before every other test, also on an
    empty blob (``Head.head == b""``), and skipped by a sniff by content alone."""

    order: int
    test: Callable[[Head], bool]
    text: bool = False
    by_name: bool = False


Analyzer = Callable[["ScanContext", Blob], list[Finding]]
# (absolute module name, function name): imported on first use, so a scan of safetensors
# files never pays for the pickle machine or jinja2.
LazyAnalyzer = tuple[str, str]


class FormatSpec(NamedTuple):
    """One format.

    ``analyzer``: the function, or ``(module, function)`` imported on first use.
    ``magic``: byte strings the blob starts with, tested at ``order``. ``probes``: more
    tests (each with its order). ``name_hints``: suffixes that pick this format for binary
    no test recognised (a 3-byte ``x.safetensors`` goes to the safetensors validator).
    ``claims``: suffixes whose files must hold this format (or another format claiming the
    same suffix); a file so named that sniffed otherwise is ``format.extension_mismatch``,
    or, for a text format (``binary=False``) and non-binary content, is analysed as this
    format anyway. ``binary``: a container or weight format, judged by its content.
    """

    format: Format
    analyzer: Analyzer | LazyAnalyzer
    order: int = 1000
    magic: tuple[bytes, ...] = ()
    probes: tuple[Probe, ...] = ()
    name_hints: tuple[str, ...] = ()
    claims: tuple[str, ...] = ()
    binary: bool = True
