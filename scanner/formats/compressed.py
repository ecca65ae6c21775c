"""Single-file compression (gzip, bzip2, xz/lzma, zstd, lz4 frames), ``.tar.gz`` included.

The stream is decompressed in bounded chunks (stdlib ``zlib``/``bz2``/``lzma``; never a
whole-file read): the output is charged to ``ScanContext.charge_decompressed`` and a
decompression ratio above ``MAX_RATIO`` (after the first MiB) is a limit hit, so a bomb
stops early. The decompressed bytes are then sniffed and analysed like any file (a tar
inside is walked, an R workspace is checked, a pickle is interpreted). Concatenated gzip
members are followed as ``gzip`` does. zstd and lz4 have no stdlib decoder: refused as
``archive.unsupported`` (fail closed). Every compressed file is at least
``format.compressed_not_allowed`` (policy).
"""

from __future__ import annotations

import bz2
import lzma
import zlib
from collections.abc import Callable
from typing import Any

from scanner.core.archive import ARCHIVE_MALFORMED, ARCHIVE_UNSUPPORTED
from scanner.core.blobview import CHUNK
from scanner.core.context import LimitHit, ScanContext
from scanner.core.model import Blob, BytesBlob, Finding, Severity, Verdict
from scanner.core.rules import rule
from scanner.core.spec import Format, FormatSpec, Probe

COMPRESSED_NOT_ALLOWED = rule(
    "format.compressed_not_allowed", Verdict.POLICY, Severity.MEDIUM,
    "Compressed file (gzip/bzip2/xz/zstd/lz4): not an allowed weight format",
    "Decompress trusted files before packaging and ship safetensors.",
)

MAX_RATIO = 200  # decompressed bytes per compressed byte, checked after RATIO_FREE bytes
RATIO_FREE = 1 << 20
MAGICS: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"), (b"\x04\x22\x4d\x18", "lz4"),
)


def kind_of(head: bytes) -> str | None:
    """The compression named by ``head``'s magic bytes, or ``None``."""
    for magic, kind in MAGICS:
        if head.startswith(magic):
            if kind == "bzip2" and not (len(head) > 3 and head[3:4] in b"123456789"):
                continue
            if kind == "gzip" and not (len(head) > 2 and head[2] == 8):  # CM = deflate
                continue
            return kind
    return None


def _decoder(kind: str) -> Callable[[], object]:
    if kind == "gzip":
        return lambda: zlib.decompressobj(16 + zlib.MAX_WBITS)
    if kind == "bzip2":
        return bz2.BZ2Decompressor
    return lambda: lzma.LZMADecompressor(format=lzma.FORMAT_XZ)


def decompress(ctx: ScanContext, blob: Blob, kind: str) -> bytes:
    """All decompressed bytes of ``blob`` (bounded). Raises ``LimitHit`` (size, ratio,
    budget) or ``ValueError`` (corrupt stream)."""
    limit = ctx.limits.max_member_bytes
    new = _decoder(kind)
    dec: Any = new()
    out: list[bytes] = []
    total = pos = 0
    done = False
    while pos < blob.size and not done:
        ctx.check_deadline()
        data = blob.read_at(pos, min(CHUNK, blob.size - pos))
        if not data:
            break
        pos += len(data)
        while True:
            try:
                piece = dec.decompress(data, limit - total + 1)
            except (OSError, EOFError, lzma.LZMAError, zlib.error) as exc:
                raise ValueError(f"{kind} stream is corrupt: {exc}") from None
            total += len(piece)
            out.append(piece)
            if total > limit:
                raise LimitHit("max_member_bytes", limit, total)
            if total > RATIO_FREE and total > MAX_RATIO * pos:
                raise LimitHit("max_decompression_ratio", MAX_RATIO, total // max(pos, 1))
            if dec.eof:
                rest = dec.unused_data
                if kind == "gzip" and rest.strip(b"\x00"):  # another gzip member follows
                    dec, data = new(), rest
                    continue
                done = True
                break
            if kind == "gzip":
                data = dec.unconsumed_tail
                if not data:
                    break
            elif dec.needs_input:
                break
            else:
                data = b""
    if not dec.eof:
        raise ValueError(f"{kind} stream ends before its end marker (truncated)")
    ctx.charge_decompressed(total)
    return b"".join(out)


def analyze_compressed(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """A compressed file: policy refusal, then the decompressed content's own findings."""
    kind = kind_of(blob.read_at(0, 8)) or "unknown"
    findings = [COMPRESSED_NOT_ALLOWED.finding(blob.name, f"{kind}-compressed file",
                                               evidence=kind)]
    if kind in ("zstd", "lz4", "unknown"):
        return findings + [ARCHIVE_UNSUPPORTED.finding(
            blob.name, f"{kind} stream: no verified decoder, its content cannot be analysed",
            evidence=kind)]
    try:
        data = decompress(ctx, blob, kind)
    except ValueError as exc:
        return findings + [ARCHIVE_MALFORMED.finding(blob.name, str(exc), evidence=kind)]
    except LimitHit as hit:
        return findings + [hit.finding(blob.name)]
    inner = blob.name + "!" + _inner_name(blob.name)
    return findings + ctx.analyze(BytesBlob(inner, data))


def _inner_name(name: str) -> str:
    last = name.rsplit("!", 1)[-1].rsplit("/", 1)[-1]
    for ext in (".gz", ".bz2", ".xz", ".zst", ".lz4", ".tgz"):
        if last.lower().endswith(ext):
            stem = last[: -len(ext)]
            return stem + ".tar" if ext == ".tgz" else stem
    return last + ".decompressed"


COMPRESSED = Format("compressed")  # single-file gzip/bzip2/xz/zstd/lz4 (tar.gz too)
SPECS = (FormatSpec(COMPRESSED, analyze_compressed,
                    probes=(Probe(30, lambda h: kind_of(h.head) is not None),)),)
