"""Legacy GGML files (the llama.cpp formats before GGUF, 2023): magics ``ggml``
(unversioned), ``ggmf`` (v1), ``ggjt`` (v1-v3) and ``ggla`` (LoRA adapters, v1), written as
little-endian uint32 (``lmgg``, ``fmgg``, ``tjgg``, ``algg`` on disk).

Data only (hyper-parameters, a vocabulary, tensors), but not an allowed format:
``format.ggml_not_allowed`` (policy). The layout llama.cpp's ``llama_file_loader`` read
(llama.cpp ``llama.cpp``/``llama-util.h`` before PR #2398) is walked with every length
checked against the bytes left *before* it is used, so a file that would make a legacy
loader read out of bounds is ``ggml.malformed``:

- ``ggmf``/``ggjt``: 7 uint32 hyper-parameters (n_vocab, n_embd, n_mult, n_head, n_layer,
  n_rot, ftype), n_vocab tokens (uint32 length, bytes, float32 score), then tensors to
  the end of the file: n_dims, name length, ggml type, dims, name, (``ggjt``: data aligned
  to 32 bytes) and the data (size from the type's block size; ggjt v1/v2 Q4_0/Q4_1/Q8_0
  blocks had float32 scales);
- ``ggla``: version, r, alpha, then tensors as ``ggjt``;
- ``ggml`` (unversioned) was also written by non-llama examples with other
  hyper-parameters, so only its header length is checked.

Bounds: ``MAX_VOCAB`` tokens, ``MAX_TENSORS`` tensors, names of ``MAX_NAME`` bytes, a
64 KiB read window (tensor data is skipped, not read); the deadline is checked every 4,096 records.
"""

from __future__ import annotations

import math
import struct

from scanner.core.context import LimitHit, ScanContext
from scanner.core.model import Blob, Finding, Severity, Verdict
from scanner.core.rules import rule
from scanner.core.spec import Format, FormatSpec
from scanner.formats.gguf import GGML_TYPES

GGML_NOT_ALLOWED = rule(
    "format.ggml_not_allowed", Verdict.POLICY, Severity.MEDIUM,
    "Legacy GGML/GGJT file (pre-GGUF llama.cpp): not an allowed weight format",
    "Ship safetensors weights for the serving engine.",
)
GGML_MALFORMED = rule(
    "ggml.malformed", Verdict.MALFORMED, Severity.HIGH,
    "Legacy GGML header, vocabulary or tensor record is invalid (lengths, dims, types, "
    "data past the end)",
    "Regenerate the file from trusted weights; do not load this one.",
)

# on-disk magic -> (name, versions accepted; () = unversioned)
MAGICS: dict[bytes, tuple[str, tuple[int, ...]]] = {
    b"lmgg": ("ggml", ()), b"fmgg": ("ggmf", (1,)), b"tjgg": ("ggjt", (1, 2, 3)),
    b"algg": ("ggla", (1,)),
}
_OLD_BLOCK_BYTES = {2: 20, 3: 24, 8: 36}  # ggjt v1/v2: float32 scales (llama.cpp PR #1508)
MAX_VOCAB = 1 << 22
MAX_TENSORS = 1 << 16
MAX_NAME = 1 << 10
MAX_DIMS = 4
WINDOW = 64 << 10


class _Bad(Exception):
    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


class _Cursor:
    def __init__(self, blob: Blob) -> None:
        self.blob, self.pos = blob, 0
        self.start, self.buf = 0, b""

    def read(self, n: int, what: str) -> bytes:
        if n < 0 or n > self.blob.size - self.pos:
            raise _Bad(f"{what} ({n} bytes) runs past the end of the file", self.pos)
        end = self.pos + n
        if not (self.start <= self.pos and end <= self.start + len(self.buf)):
            self.start, self.buf = self.pos, self.blob.read_at(self.pos, max(n, WINDOW))
        data = self.buf[self.pos - self.start:end - self.start]
        self.pos = end
        return data

    def u32(self, what: str) -> int:
        return int.from_bytes(self.read(4, what), "little")

    def i32(self, what: str) -> int:
        return int(struct.unpack("<i", self.read(4, what))[0])


def _tensors(ctx: ScanContext, cur: _Cursor, aligned: bool, version: int) -> int:
    count = 0
    while cur.pos < cur.blob.size:
        if count >= MAX_TENSORS:
            raise LimitHit("ggml tensor count", MAX_TENSORS)
        if count % 4096 == 0:
            ctx.check_deadline()
        at = cur.pos
        n_dims, name_len, gtype = cur.i32("n_dims"), cur.i32("name length"), cur.i32("type")
        if not 1 <= n_dims <= MAX_DIMS:
            raise _Bad(f"tensor {count}: n_dims {n_dims} outside 1..{MAX_DIMS}", at)
        if not 1 <= name_len <= MAX_NAME:
            raise _Bad(f"tensor {count}: name length {name_len} outside 1..{MAX_NAME}", at)
        if gtype not in GGML_TYPES:
            raise _Bad(f"tensor {count}: unknown ggml type {gtype}", at)
        dims = [cur.i32("dimension") for _ in range(n_dims)]
        if any(d < 1 for d in dims):
            raise _Bad(f"tensor {count}: dimension {dims} not positive", at)
        name = cur.read(name_len, "tensor name").decode("utf-8", "replace")
        if aligned:
            cur.read(-cur.pos & 31, "alignment padding")
        block, size = GGML_TYPES[gtype]
        if version < 3:
            size = _OLD_BLOCK_BYTES.get(gtype, size)
        elements = math.prod(dims)
        if elements % block:
            raise _Bad(f"tensor {name!r}: {elements} elements not a multiple of the "
                       f"block size {block}", at)
        nbytes = elements // block * size
        if nbytes > cur.blob.size - cur.pos:
            raise _Bad(f"tensor {name!r}: data ({nbytes} bytes) runs past the end of the "
                       "file", at)
        cur.pos += nbytes
        count += 1
    return count


def _walk(ctx: ScanContext, blob: Blob, name: str, version: int) -> str:
    """Walk a ggmf/ggjt/ggla file; returns a summary for the policy finding."""
    cur = _Cursor(blob)
    cur.pos = 8
    if name == "ggla":
        cur.read(8, "LoRA header (r, alpha)")
        return f"{_tensors(ctx, cur, True, 3)} tensors"
    hparams = [cur.u32("hyper-parameters") for _ in range(7)]
    n_vocab = hparams[0]
    if n_vocab > MAX_VOCAB:
        raise LimitHit("ggml vocabulary size", MAX_VOCAB, n_vocab)
    if n_vocab * 8 > blob.size - cur.pos:
        raise _Bad(f"n_vocab {n_vocab} cannot fit in the file", 8)
    for i in range(n_vocab):
        if i % 4096 == 0:
            ctx.check_deadline()
        length = cur.u32("token length")
        cur.read(length + 4, f"token {i} and its score")
    tensors = _tensors(ctx, cur, name == "ggjt", version)
    return f"n_vocab {n_vocab}, {tensors} tensors"


def analyze_ggml(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Findings for a legacy GGML blob (see the module docstring). Never raises for bad
    input; a limit hit is ``scanner.limit_exceeded``."""
    head = blob.read_at(0, 8)
    name, versions = MAGICS.get(head[:4], ("ggml", ()))
    out = [GGML_NOT_ALLOWED.finding(blob.name, f"legacy {name} file", evidence=name)]
    if not versions:
        if blob.size < 4 + 7 * 4:
            out.append(GGML_MALFORMED.finding(blob.name, "ggml header shorter than its "
                                              "hyper-parameters"))
        return out
    if len(head) < 8:
        return out + [GGML_MALFORMED.finding(blob.name, f"{name} file has no version")]
    version = int.from_bytes(head[4:8], "little")
    if version not in versions:
        return out + [GGML_MALFORMED.finding(
            blob.name, f"{name} version {version} is not one of {list(versions)}",
            evidence=f"version {version}", offset=4)]
    try:
        summary = _walk(ctx, blob, name, version)
        out[0] = GGML_NOT_ALLOWED.finding(blob.name, f"legacy {name} v{version} file "
                                          f"({summary})", evidence=name)
    except _Bad as bad:
        out.append(GGML_MALFORMED.finding(blob.name, f"invalid {name} file: {bad}",
                                          offset=bad.offset))
    except LimitHit as hit:
        out.append(hit.finding(blob.name))
    return out


GGML = Format("ggml")  # legacy pre-GGUF llama.cpp files: ggml, ggmf, ggjt, ggla
SPECS = (FormatSpec(GGML, analyze_ggml, order=20, magic=tuple(MAGICS)),)
