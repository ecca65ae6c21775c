"""NumPy ``.npy`` analyzer (format versions 1.0, 2.0, 3.0; numpy/lib/format.py).

Layout: magic ``\\x93NUMPY``, major, minor, header length (u16 for 1.0, u32 for 2.0/3.0),
then a Python dict literal ``{'descr': ..., 'fortran_order': ..., 'shape': ...}`` padded
with spaces and a newline, then the array data. The header is parsed with
``ast.literal_eval`` on a bounded string (never ``eval``). An object dtype (``'|O'``, also
inside a structured dtype) means the data is a pickle that ``numpy.load(...,
allow_pickle=True)`` unpickles (picklescan#11): it is handed to the pickle analyzer.
Numeric arrays are refused by policy; header/shape/size inconsistencies are malformed.
"""

from __future__ import annotations

import ast
import math
import re

from scanner.core.context import ScanContext
from scanner.core.model import Blob, Finding, Severity, Verdict
from scanner.core.rules import rule
from scanner.core.spec import Format, FormatSpec

NPY_NOT_ALLOWED = rule(
    "format.npy_not_allowed", Verdict.POLICY, Severity.MEDIUM,
    "NumPy .npy array: not an allowed weight format",
    "Convert the arrays to safetensors (safetensors.numpy.save_file).",
)
NPY_OBJECT = rule(
    "npy.object_dtype", Verdict.POLICY, Severity.HIGH,
    "NumPy array with object dtype: its data is a pickle (loaded with allow_pickle=True)",
    "Store numeric arrays only; never load object arrays from untrusted sources.",
)
NPY_MALFORMED = rule(
    "npy.malformed", Verdict.MALFORMED, Severity.HIGH,
    "NumPy .npy header or size is invalid",
    "Re-save the array with numpy.save; do not load this file.",
)

MAGIC = b"\x93NUMPY"  # NEP 1 (numpy.lib.format)
MAX_DIMS = 64  # NPY_MAXDIMS
MAX_HEADER = 1 << 16  # numpy itself refuses headers over 10 000 bytes by default
_SIMPLE = re.compile(r"[<>|=]?(?:([biufc])(\d+)|([SaUV])(\d+)|([mM])8(?:\[\w+\])?|b1|\?)")
_OBJECT = re.compile(r"[<>|=]?(?:O\d*|object_?)")


class _Bad(Exception):
    pass


def _itemsize(descr: object, depth: int = 0) -> int | None:
    """Bytes per element for ``descr``; ``None`` when it contains an object field.
    Raises ``_Bad`` for a descr numpy's writer never produces."""
    if depth > 32:
        raise _Bad("dtype nested too deeply")
    if isinstance(descr, str):
        if _OBJECT.fullmatch(descr):
            return None
        m = _SIMPLE.fullmatch(descr)
        if not m:
            raise _Bad(f"unsupported dtype descr {descr[:80]!r}")
        if m.group(2):
            return int(m.group(2))
        if m.group(4):
            return int(m.group(4)) * (4 if m.group(3) == "U" else 1)
        return 8 if m.group(5) else 1
    if isinstance(descr, tuple) and len(descr) == 2:
        base = _itemsize(descr[0], depth + 1)
        return None if base is None else base * _count(descr[1])
    if isinstance(descr, list):
        total: int | None = 0
        for field in descr:
            if not isinstance(field, tuple) or len(field) not in (2, 3):
                raise _Bad("structured dtype field is not a (name, dtype[, shape]) tuple")
            size = _itemsize(field[1], depth + 1)
            if size is None or total is None:
                total = None
                continue
            total += size * (_count(field[2]) if len(field) == 3 else 1)
        return total
    raise _Bad(f"dtype descr of type {type(descr).__name__}")


def _count(shape: object) -> int:
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, tuple) or len(shape) > MAX_DIMS or not all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 63 for d in shape):
        raise _Bad(f"shape {shape!r:.80} is not a tuple of at most {MAX_DIMS} int64 sizes")
    return math.prod(shape)


def _header(blob: Blob) -> tuple[dict[str, object], int]:
    """The header dict and the offset where array data starts."""
    fixed = blob.read_at(0, 12)
    if len(fixed) < 10 or not fixed.startswith(MAGIC):
        raise _Bad("missing \\x93NUMPY magic")
    major = fixed[6]
    if major == 1:
        length, start = int.from_bytes(fixed[8:10], "little"), 10
    elif major in (2, 3) and len(fixed) == 12:
        length, start = int.from_bytes(fixed[8:12], "little"), 12
    else:
        raise _Bad(f"unsupported format version {major}.{fixed[7]}")
    if length > MAX_HEADER:
        raise _Bad(f"header length {length} exceeds {MAX_HEADER} bytes")
    if start + length > blob.size:
        raise _Bad(f"header length {length} runs past the end of the file ({blob.size} bytes)")
    raw = blob.read_at(start, length)
    try:
        text = raw.decode("utf-8" if major == 3 else "latin-1")
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError,
            UnicodeDecodeError) as exc:
        raise _Bad(f"header is not a Python literal: {type(exc).__name__}") from None
    if not isinstance(value, dict) or set(value) != {"descr", "fortran_order", "shape"}:
        raise _Bad("header must be a dict with exactly descr, fortran_order and shape")
    if not isinstance(value["fortran_order"], bool):
        raise _Bad("fortran_order is not a bool")
    return value, start + length


def analyze_npy(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Findings for a ``.npy`` blob: policy refusal; object dtype -> the pickle analyzer's
    findings for the data; malformed header/shape/size -> ``npy.malformed``."""
    findings = [NPY_NOT_ALLOWED.finding(blob.name, NPY_NOT_ALLOWED.title)]
    try:
        header, data_at = _header(blob)
        count = _count(header["shape"])
        itemsize = _itemsize(header["descr"])
    except _Bad as exc:
        return findings + [NPY_MALFORMED.finding(blob.name, str(exc))]
    if itemsize is None:
        findings.append(NPY_OBJECT.finding(
            blob.name, "object dtype: the array data is a pickle",
            evidence=str(header["descr"])[:200], offset=data_at))
        from scanner.formats.pickle.analyze import analyze_pickle_at  # the pickle machine

        found, end = analyze_pickle_at(ctx, blob, data_at)
        findings += found
        if end < blob.size:
            findings.append(NPY_MALFORMED.finding(
                blob.name, f"{blob.size - end} bytes follow the object array's pickle",
                offset=end))
        return findings
    expected = count * itemsize
    actual = blob.size - data_at
    if actual != expected:
        findings.append(NPY_MALFORMED.finding(
            blob.name, f"shape {header['shape']!r:.80} x itemsize {itemsize} = {expected} "
            f"bytes, file holds {actual} bytes of data", offset=data_at))
    return findings


NPY = Format("npy")  # NumPy .npy (object dtype carries a pickle)
SPECS = (FormatSpec(NPY, analyze_npy, order=20, magic=(MAGIC,), name_hints=(".npy",),
                    claims=(".npy",)),)
