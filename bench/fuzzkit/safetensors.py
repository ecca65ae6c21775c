"""safetensors inputs: an 8-byte little-endian header length, a JSON header, tensor
bytes. Generated headers vary what the format's validators check: the length (exact,
off by a few, zero, past the file, huge), the JSON (duplicate keys, ``\\u`` escapes,
NaN/Infinity, huge numbers, deep nesting, trailing bytes, padding), tensor names (empty,
paths, control characters, very long), dtypes (every real one and unknown ones), shapes
(empty, zero, negative, overflowing, non-integers) and ``data_offsets`` (overlapping,
gaps, reversed, past the buffer), ``__metadata__`` of the wrong types. Then byte
mutations. Named ``model.safetensors``, or ``pytorch_model.bin`` (which a loader hands to
``torch.load``: the reference judge reads it as a pickle).
"""

from __future__ import annotations

import json
import struct

from .draw import Draw
from .mutate import mutate
from .oracle import Case

NAMES = ("model.safetensors", "model-00001-of-00002.safetensors", "pytorch_model.bin",
         "adapter_model.safetensors")
DTYPES = ("F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "U16", "U32", "U64",
          "BOOL", "F8_E4M3", "F8_E5M2", "E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64", "f32",
          "", "F128", "U8 ", "\u0046\u0033\u0032")
WIDTH = {"F64": 8, "I64": 8, "U64": 8, "C64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2,
         "BF16": 2, "I16": 2, "U16": 2}
TENSOR_NAMES = ("weight", "model.layers.0.mlp.up_proj.weight", "", "a" * 300, "../../etc/x",
                "/abs/path", "C:\\\\x", "..\\\\..\\\\x", "\u002e\u002e/up", "a\x00b",
                "__metadata__", "é名", "lm_head.weight", " ")
TOKENS = (b"{", b"}", b"[", b"]", b",", b":", b'"', b"\\u0000", b"\\", b"1e999", b"-1",
          b"NaN", b'"dtype"', b'"shape"', b'"data_offsets"', b'"__metadata__"', b"\xff",
          b"\x00" * 8, b" ")


def _shape(draw: Draw) -> object:
    kind = draw.integer(0, 9)
    if kind < 6:
        return [draw.integer(0, 4) for _ in range(draw.integer(0, 3))]
    return draw.choice(([-1], [1 << 62, 1 << 62], [1.5], ["2"], [None], 3, [[2]],
                        [0, 1 << 64], [2] * 70))


def _header(draw: Draw) -> tuple[str, int]:
    """(JSON text of a header, bytes of tensor data it describes)."""
    entries: list[tuple[str, object]] = []
    offset = 0
    for _ in range(draw.integer(0, 5)):
        name = draw.choice(TENSOR_NAMES) if draw.chance(0.3) else f"t{len(entries)}"
        dtype = draw.choice(DTYPES) if draw.chance(0.3) else draw.choice(("F32", "F16", "U8"))
        shape = _shape(draw) if draw.chance(0.3) else [draw.integer(1, 4), draw.integer(1, 4)]
        count = 1
        if isinstance(shape, list) and all(isinstance(d, int) for d in shape):
            for d in shape:
                count *= d
        size = count * WIDTH.get(dtype, 1) if count < 1 << 20 else 16
        begin, end = offset, offset + size
        if draw.chance(0.15):
            begin, end = draw.choice(((end, begin), (begin, end + 1), (begin - 1, end),
                                      (0, 1 << 63), (-1, 0), (begin, end - 1)))
        offsets: object = [begin, end] if not draw.chance(0.05) else [begin, end, 0]
        entries.append((name, {"dtype": dtype, "shape": shape, "data_offsets": offsets}))
        offset = max(offset, size + offset)
    if draw.chance(0.4):
        meta: object = draw.choice(({"format": "pt"}, {"format": 1}, [], "x", None,
                                    {"a": {"b": "c"}}, {"\u0000": ""}))
        entries.insert(draw.integer(0, len(entries)), ("__metadata__", meta))
    if entries and draw.chance(0.1):  # a duplicate key (json.dumps of a dict cannot)
        entries.append(draw.choice(entries))
    text = "{" + ",".join(f"{json.dumps(k, ensure_ascii=draw.chance(0.5))}:"
                          f"{json.dumps(v)}" for k, v in entries) + "}"
    if draw.chance(0.1):
        text = draw.choice(("[" * 200 + "]" * 200, '{"a":' * 100 + "1" + "}" * 100,
                            '{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,NaN]}}',
                            '{"x":{"dtype":"F32","shape":[1e999],"data_offsets":[0,4]}}',
                            '{"\\u0078":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                            '"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'))
    if draw.chance(0.2):
        text += " " * draw.integer(0, 9)
    return text, offset


def generate(draw: Draw) -> Case:
    header, size = _header(draw)
    raw = header.encode("utf-8", "surrogatepass")
    length = len(raw)
    if draw.chance(0.15):
        length = draw.choice((0, 1, length - 1, length + 1, length + 8, 1 << 40,
                              (1 << 64) - 1, 100 << 20))
    data = struct.pack("<Q", length % (1 << 64)) + raw + b"\x00" * size
    if draw.chance(0.1):
        data += draw.blob(16)
    if draw.chance(0.6):
        data = mutate(draw, data, TOKENS)
    return Case(draw.choice(NAMES), data, "gen:header")
