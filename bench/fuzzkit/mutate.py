"""Byte-level mutations shared by every format: flips, inserts of format tokens,
deletions, truncations, duplicated and swapped chunks, and interesting integers written
over length fields.

``mutate(draw, data, tokens)`` applies 1-4 of them; ``tokens`` are byte strings of the
format (pickle opcodes, JSON punctuation, zip signatures) so that a mutation often stays
near-valid and reaches the analyser's deeper paths instead of its first check.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from .draw import Draw

# values that break length and offset arithmetic: 0, 1, around byte/short/int/long
# boundaries, negative when read signed
INTERESTING = (0, 1, 2, 7, 8, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0x8000, 0xFFFF, 0x10000,
               0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1 << 32, (1 << 63) - 1, (1 << 64) - 1)
KINDS = ("flip", "set", "insert", "token", "delete", "truncate", "duplicate", "integer")


def mutate(draw: Draw, data: bytes, tokens: Sequence[bytes] = ()) -> bytes:
    """``data`` with 1-4 random mutations applied (never longer than ``2*len + 64``)."""
    raw = bytearray(data)
    for _ in range(draw.integer(1, 4)):
        kind = draw.choice(KINDS)
        at = draw.integer(0, len(raw)) if raw else 0
        if kind == "flip" and at < len(raw):
            raw[at] ^= 1 << draw.integer(0, 7)
        elif kind == "set" and at < len(raw):
            raw[at] = draw.integer(0, 255)
        elif kind == "insert":
            raw[at:at] = draw.blob(8)
        elif kind == "token" and tokens:
            raw[at:at] = draw.choice(tokens)
        elif kind == "delete":
            del raw[at : at + draw.integer(1, 16)]
        elif kind == "truncate":
            del raw[at:]
        elif kind == "duplicate" and raw:
            start = draw.integer(0, len(raw) - 1)
            chunk = raw[start : start + draw.integer(1, 32)]
            raw[at:at] = chunk
        elif kind == "integer":
            size = draw.choice((1, 2, 4, 8))
            value = draw.choice(INTERESTING) % (1 << (8 * size))
            packed = struct.pack({1: "<B", 2: "<H", 4: "<I", 8: "<Q"}[size], value)
            raw[at : at + size] = packed
        if len(raw) > 2 * len(data) + 64:
            del raw[2 * len(data) + 64 :]
    return bytes(raw)
