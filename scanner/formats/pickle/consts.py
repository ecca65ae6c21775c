"""Opcode handlers that push constants or set up the stream (PROTO, FRAME, ints, floats,
strings, bytes, buffers) for the symbolic pickle interpreter (``scanner.formats.pickle.vm``).

Mirrors CPython ``Lib/pickle.py`` ``_Unpickler.load_*`` (number lines as the C unpickler
reads them: ``scanner.formats.pickle.numbers``); large arguments are skipped by
offset, never read whole. A handler gets the machine and the opcode byte.
"""

from __future__ import annotations

import codecs
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

from scanner.formats.pickle import numbers
from scanner.formats.pickle.reader import INLINE_MAX, Truncated
from scanner.formats.pickle.values import FLOAT, Bad, Big

if TYPE_CHECKING:
    from scanner.formats.pickle.vm import Machine

KEEP_CHARS = 4096  # longest str/bytes constant kept as a value (names, keys)

Handler = Callable[["Machine", int], "bool | None"]
TABLE: dict[int, Handler] = {}  # opcode byte -> handler (scanner.formats.pickle.ops adds the rest)


def op(*codes: bytes) -> Callable[[Handler], Handler]:
    """Decorator registering a handler in ``TABLE`` for each opcode in ``codes``."""
    def register(fn: Handler) -> Handler:
        for code in codes:
            TABLE[code[0]] = fn
        return fn
    return register


@op(b"\x80")
def _proto(m: Machine, code: int) -> None:
    m.proto = m.r.byte()
    if m.proto > 5:
        raise Bad(f"unsupported pickle protocol {m.proto}")


@op(b"\x95")
def _frame(m: Machine, code: int) -> None:
    n = m.int_arg(8)
    if m.r.pos + n > m.r.size:
        raise Truncated(m.r.pos, n)
    m.r.open_frame(n)


@op(b"N")
def _none(m: Machine, code: int) -> None:
    m.push(None)


@op(b"\x88", b"\x89")
def _bool(m: Machine, code: int) -> None:
    m.push(code == 0x88)


@op(b"I")
def _int(m: Machine, code: int) -> None:
    text = m.line()
    if text in (b"00", b"01"):
        m.push(text == b"01")
        return
    try:
        m.push(numbers.load_int(text))
    except ValueError:
        raise Bad("INT argument is not an integer") from None


@op(b"L")
def _long(m: Machine, code: int) -> None:
    try:
        m.push(numbers.load_long(m.line()))
    except ValueError:
        raise Bad("LONG argument is not an integer") from None


@op(b"F")
def _float(m: Machine, code: int) -> None:
    try:
        numbers.load_float(m.line())
    except ValueError:
        raise Bad("FLOAT argument is not a number") from None
    m.push(FLOAT)


@op(b"G")
def _binfloat(m: Machine, code: int) -> None:
    m.r.read(8)
    m.push(FLOAT)


@op(b"J")
def _binint(m: Machine, code: int) -> None:
    m.push(m.int_arg(4, signed=True))


@op(b"K")
def _binint1(m: Machine, code: int) -> None:
    m.push(m.r.byte())


@op(b"M")
def _binint2(m: Machine, code: int) -> None:
    m.push(m.int_arg(2))


@op(b"\x8a")
def _long1(m: Machine, code: int) -> None:
    m.push(m.int_arg(m.r.byte(), signed=True))


@op(b"\x8b")
def _long4(m: Machine, code: int) -> None:
    n = m.int_arg(4, signed=True)
    if n < 0:
        raise Bad("LONG4 has a negative byte count")
    if n > KEEP_CHARS:
        m.r.skip(n)
        m.push(Big("int", n))
    else:
        m.push(m.int_arg(n, signed=True))


@op(b"S")
def _string(m: Machine, code: int) -> None:
    off = m.r.pos
    data, length = m.r.readline(INLINE_MAX)
    if length > INLINE_MAX:
        m.push(Big("str", length))
        return
    if len(data) < 2 or data[0] != data[-1] or data[0] not in b"\"'":
        raise Bad("STRING argument is not quoted")
    try:
        with warnings.catch_warnings():  # invalid escapes warn (DeprecationWarning)
            warnings.simplefilter("ignore")
            raw = codecs.escape_decode(data[1:-1])[0]
    except ValueError:
        raise Bad("STRING argument has a bad escape") from None
    m.look_nested(off + 1, len(raw), raw)
    m.push(m.keep(raw.decode("latin-1"), len(raw), "str"))


@op(b"V")
def _unicode(m: Machine, code: int) -> None:
    off = m.r.pos
    data, length = m.r.readline(INLINE_MAX)
    if length > INLINE_MAX:
        m.push(Big("str", length))
        return
    try:
        text = data.decode("raw-unicode-escape")
    except UnicodeDecodeError:
        raise Bad("UNICODE argument has a bad escape") from None
    raw = text.encode("utf-8", "surrogatepass")
    m.look_nested(off, len(raw), raw)
    m.push(m.keep(text, len(raw), "str"))


@op(b"T")
def _binstring(m: Machine, code: int) -> None:
    m.push_data(m.int_arg(4, signed=True), "latin1")


@op(b"U")
def _short_binstring(m: Machine, code: int) -> None:
    m.push_data(m.r.byte(), "latin1")


@op(b"X")
def _binunicode(m: Machine, code: int) -> None:
    m.push_data(m.int_arg(4), "utf8")


@op(b"\x8c")
def _short_binunicode(m: Machine, code: int) -> None:
    m.push_data(m.r.byte(), "utf8")


@op(b"\x8d")
def _binunicode8(m: Machine, code: int) -> None:
    m.push_data(m.int_arg(8), "utf8")


@op(b"B")
def _binbytes(m: Machine, code: int) -> None:
    m.push_data(m.int_arg(4), "bytes")


@op(b"C")
def _short_binbytes(m: Machine, code: int) -> None:
    m.push_data(m.r.byte(), "bytes")


@op(b"\x8e", b"\x96")
def _binbytes8(m: Machine, code: int) -> None:  # BINBYTES8, BYTEARRAY8
    m.push_data(m.int_arg(8), "bytes")


@op(b"\x97")
def _next_buffer(m: Machine, code: int) -> None:
    raise Bad("NEXT_BUFFER needs out-of-band buffers, which no model loader supplies")


@op(b"\x98")
def _readonly_buffer(m: Machine, code: int) -> None:
    m.top()
