"""Content sniffing: decide a blob's ``Format`` from its bytes, never from its name.

A pickle named ``.safetensors``, ``.json`` or with no extension is a pickle; a zip named
``data.txt`` is a zip. Names are used only as a tie-break for binary that matches no
format (a 3-byte ``x.safetensors`` goes to the safetensors validator, which reports it
malformed, instead of to the generic unknown-binary check), and by probes that say so
(TensorFlow ``*.pb``, Python ``*.py``, Jinja ``*.jinja``).

The tests and their order come from the format registry (``scanner.scan.registry``; the
order is explained in ``scanner.core.spec``); this module only reads the head, runs them
and splits text from binary. Reads: the first 4 KiB, plus what probes read (a zip's end
record in the last 64 KiB, HDF5 superblock candidates).
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


def _magic_test(magic: tuple[bytes, ...]) -> Test:
    return lambda h: h.head.startswith(magic)


def _tables(specs: tuple[FormatSpec, ...]) -> tuple[tuple[tuple[Test, Format], ...],
                                                   tuple[tuple[Test, Format], ...]]:
    """(byte tests, text tests), each sorted by (order, registry position)."""
    binary: list[tuple[int, int, Test, Format]] = []
    text: list[tuple[int, int, Test, Format]] = []
    for index, spec in enumerate(specs):
        if spec.magic:
            binary.append((spec.order, index, _magic_test(spec.magic), spec.format))
        for probe in spec.probes:
            (text if probe.text else binary).append(
                (probe.order, index, probe.test, spec.format))
    return (tuple((t, f) for _, _, t, f in sorted(binary, key=lambda x: x[:2])),
            tuple((t, f) for _, _, t, f in sorted(text, key=lambda x: x[:2])))


BYTE_TESTS, TEXT_TESTS = _tables(SPECS)


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


def sniff(blob: Blob) -> Format:
    """The format of ``blob``, decided from its content (see the module docstring).
    Never raises for any content a probe can be handed."""
    if blob.size <= 0:
        return EMPTY
    head = Head(blob, blob.read_at(0, HEAD))
    for test, fmt in BYTE_TESTS:
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
