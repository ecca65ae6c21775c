"""Protocol-0 number arguments (INT, LONG, FLOAT lines) read exactly as CPython's C
unpickler reads them, which accepts more than ``pickletools`` does.

A reading stricter than the loader's is fail-open: the scanner stops at a line that
``pickle.load`` accepts and runs past (``I017`` is 15 to CPython, a syntax error to
``pickletools``; ``I0x1f`` is 31; ``I1\\x00junk`` is 1). Written out here because these
rules are the C code's, not any Python parser's (Modules/_pickle.c, CPython 3.11):

- ``load_int``: ``strtol(line, &end, 0)`` (C base 0: optional leading white space and sign,
  ``0x``/``0X`` hex, a leading ``0`` octal, else decimal); accepted when ``end`` is the
  newline or a NUL and the value fits a C ``long`` (64 bits here); otherwise
  ``PyLong_FromString(line, NULL, 0)`` (Python's ``int(text, 0)`` on the C string, i.e. up
  to the first NUL: ``0o``/``0b``/``0x`` prefixes, underscores, surrounding white space).
- ``load_long``: a trailing ``L`` removed, then ``PyLong_FromString(line, NULL, 0)``.
- ``load_float``: ``PyOS_string_to_double`` up to the newline or a NUL. Python's ``float``
  is used on the text before the first NUL: it accepts a little more (underscores, white
  space), which only lets the scanner read further than CPython would, never less.

Each function takes the line without its newline and returns the value, or raises
``ValueError`` where CPython raises.
"""

from __future__ import annotations

import re

# C strtol, base 0, C locale: white space, sign, then hex / octal / decimal digits.
_STRTOL = re.compile(rb"[ \t\n\v\f\r]*([+-]?)(?:0[xX]([0-9a-fA-F]+)|(0[0-7]*)|([1-9][0-9]*))")
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


def _c_string(text: bytes) -> bytes:
    """``text`` as a C string sees it: up to the first NUL."""
    nul = text.find(b"\0")
    return text if nul < 0 else text[:nul]


def load_int(text: bytes) -> int:
    """The value of an INT line (``I<text>\\n``), as ``load_int`` computes it."""
    c = _c_string(text)
    match = _STRTOL.match(c)
    if match is not None and match.end() == len(c):
        sign, hexa, octal, decimal = match.groups()
        value = (int(hexa, 16) if hexa is not None
                 else int(octal, 8) if octal is not None else int(decimal))
        value = -value if sign == b"-" else value
        if _LONG_MIN <= value <= _LONG_MAX:
            return value
    return int(c, 0)


def load_long(text: bytes) -> int:
    """The value of a LONG line (``L<text>\\n``), as ``load_long`` computes it."""
    return int(_c_string(text[:-1] if text.endswith(b"L") else text), 0)


def load_float(text: bytes) -> float:
    """The value of a FLOAT line (``F<text>\\n``), read up to the first NUL (see above)."""
    return float(_c_string(text))
