"""Content sniffing: decide a blob's ``Format`` from its bytes, never from its name.

A pickle named ``.safetensors``, ``.json`` or with no extension is a pickle; a zip named
``data.txt`` is a zip. Names are used only as a tie-break for binary that matches no
format (a 3-byte ``x.safetensors`` goes to the safetensors validator, which reports it
malformed, instead of to the generic unknown-binary check), and by probes that say so
(TensorFlow ``*.pb``, Python ``*.py``, Jinja ``*.jinja``).

The tests and their order come from the format registry (``scanner.scan.registry``; the
order is explained in ``scanner.core.spec``); this module only reads the head, runs them
and splits text from binary. Names decide first only for files whose place in a layout
is their meaning (``Probe(by_name=True)``: OCI layout files, a Core ML manifest). Reads:
the first 4 KiB, plus what probes read (a zip's end record in the last 64 KiB, HDF5
superblock candidates).
"""

from __future__ import annotations

from collections.abc import Callable

from scanner.core.model import Blob
from scanner.core.spec import EMPTY, TEXT, UNKNOWN, Format, FormatSpec, Head
from scanner.scan.registry import NAME_HINTS, SPECS

HEAD = 4096
# C0 control bytes other than tab, LF, VT, FF, CR, ESC (UTF-8 never uses them in
# multi-byte sequences, so counting bytes counts control characters).
_CONTROL_BYTES = bytes(b for b in range(32) if b not in b"\t\n\r\f\v\x1b")

Test = Callable[[Head], bool]
Tests = tuple[tuple[Test, Format], ...]
NO_BYTE = 256


def _magic_test(magic: tuple[bytes, ...]) -> Test:
    return lambda h: h.head.startswith(magic)


_Row = tuple[int, int, Test, Format]  # (order, registry position, test, format)
_MagicRow = tuple[int, int, bytes, Format]


def _tables(specs: tuple[FormatSpec, ...]) -> tuple[Tests, list[_Row], Tests,
                                                   dict[int, list[_MagicRow]]]:
    """(name tests, byte probes, text tests, magics by first byte); the tests sorted by
    (order, registry position), the probes in registry order (``_byte_tests`` merges them
    with one first byte's magics)."""
    named: list[_Row] = []
    probes: list[_Row] = []
    text: list[_Row] = []
    magics: dict[int, list[_MagicRow]] = {}
    for index, spec in enumerate(specs):
        for m in spec.magic:
            magics.setdefault(m[0], []).append((spec.order, index, m, spec.format))
        for probe in spec.probes:
            table = named if probe.by_name else text if probe.text else probes
            table.append((probe.order, index, probe.test, spec.format))
    return _ordered(named), probes, _ordered(text), magics


def _ordered(tests: list[_Row]) -> Tests:
    return tuple((t, f) for _, _, t, f in sorted(tests, key=lambda x: x[:2]))


NAME_TESTS, _PROBES, TEXT_TESTS, _MAGICS = _tables(SPECS)
# Byte tests by the blob's first byte (``NO_BYTE``: a head read back empty), built on first
# use: the table for byte ``b`` holds every probe and only the magic tests of magics
# starting with ``b`` (same order as one list of all of them; a blob's head costs one
# index, not a ``startswith`` per magic).
_BY_FIRST: list[Tests | None] = [None] * (NO_BYTE + 1)


def _byte_tests(first: int) -> Tests:
    found = _BY_FIRST[first]
    if found is None:
        mine: dict[tuple[int, int, Format], tuple[bytes, ...]] = {}
        for order, index, magic, fmt in _MAGICS.get(first, ()):
            key = (order, index, fmt)
            mine[key] = (*mine.get(key, ()), magic)
        found = _BY_FIRST[first] = _ordered(
            _PROBES + [(o, i, _magic_test(m), f) for (o, i, f), m in mine.items()])
    return found


def _text(head: bytes, complete: bool) -> str | None:
    """``head`` as text, or ``None`` for binary (NUL or many control bytes, not UTF-8)."""
    if b"\x00" in head:
        return None
    data = head
    for cut in range(4):  # a multi-byte sequence may straddle the end of the head
        try:
            text = data.decode("utf-8")
            break
        except UnicodeDecodeError:
            if complete or cut == 3:
                return None
            data = data[:-1]
    else:  # pragma: no cover
        return None
    controls = len(data) - len(data.translate(None, _CONTROL_BYTES))
    return None if controls * 20 > max(len(text), 1) else text


def sniff(blob: Blob, *, by_name: bool = True) -> Format:
    """The format of ``blob``, decided from its content (see the module docstring);
    ``by_name=False`` skips the tests of a file's place in a layout (an analyzer that
    judges such a file by its content: OCI blobs). Never raises for any content a probe
    can be handed."""
    head = Head(blob, blob.read_at(0, HEAD) if blob.size > 0 else b"")
    if by_name:
        for test, fmt in NAME_TESTS:
            if test(head):
                return fmt
    if blob.size <= 0:
        return EMPTY
    for test, fmt in _byte_tests(head.head[0] if head.head else NO_BYTE):
        if test(head):
            return fmt
    text = _text(head.head, complete=len(head.head) >= blob.size)
    if text is None:
        return NAME_HINTS.get(head.suffix, UNKNOWN)
    decoded = Head(blob, head.head, text)
    for test, fmt in TEXT_TESTS:
        if test(decoded):
            return fmt
    return TEXT
