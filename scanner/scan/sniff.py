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


def _tables(specs: tuple[FormatSpec, ...]) -> tuple[Tests, tuple[Tests, ...], Tests]:
    """(name tests, byte tests by first byte, text tests), each sorted by (order, registry
    position). Byte tests are grouped by the blob's first byte: the table for byte ``b``
    holds every probe and only the magic tests of magics starting with ``b`` (same order
    as one list of all of them; a blob's head costs one index, not a ``startswith`` per
    magic); table ``NO_BYTE`` (a head read back empty) holds the probes only."""
    named: list[tuple[int, int, Test, Format]] = []
    probes: list[tuple[int, int, Test, Format]] = []
    text: list[tuple[int, int, Test, Format]] = []
    magics: list[tuple[int, int, bytes, Format]] = []
    for index, spec in enumerate(specs):
        magics.extend((spec.order, index, m, spec.format) for m in spec.magic)
        for probe in spec.probes:
            table = named if probe.by_name else text if probe.text else probes
            table.append((probe.order, index, probe.test, spec.format))

    def ordered(tests: list[tuple[int, int, Test, Format]]) -> Tests:
        return tuple((t, f) for _, _, t, f in sorted(tests, key=lambda x: x[:2]))

    by_byte: list[Tests] = []
    for first in range(NO_BYTE + 1):
        mine: dict[tuple[int, int, Format], tuple[bytes, ...]] = {}
        for order, index, magic, fmt in magics:
            if magic[0] == first:
                key = (order, index, fmt)
                mine[key] = (*mine.get(key, ()), magic)
        tests = probes + [(o, i, _magic_test(m), f) for (o, i, f), m in mine.items()]
        by_byte.append(ordered(tests))
    return ordered(named), tuple(by_byte), ordered(text)


NAME_TESTS, BYTE_TESTS_BY_FIRST, TEXT_TESTS = _tables(SPECS)


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
    for test, fmt in BYTE_TESTS_BY_FIRST[head.head[0] if head.head else NO_BYTE]:
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
