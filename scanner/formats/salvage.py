"""Read what can be read of a container whose structure is broken.

A loader does not need an intact archive to run a payload: 7-Zip and py7zr extract the
streams they can reach, and a stored (copy) or LZMA/LZMA2 pack stream decodes without the
header that describes it. When a 7z header cannot be read, the packed region is decoded
the ways 7-Zip writes it (stored; LZMA2; LZMA with the default lc=3 lp=0 pb=2), keeping
whatever a decoder produced before it failed, and every pickle that can start in those
bytes (the region's start, each PROTO opcode, each protocol-0 ``GLOBAL`` line) is
interpreted. Only findings that show code would run are kept: the archive is already
refused as malformed, and guesses must not add noise.

Bounded: at most ``MAX_REGION`` packed bytes, ``MAX_OUTPUT`` decoded bytes per decoder
(charged to ``ScanContext.charge_decompressed``) and ``MAX_STARTS`` pickle starts per
candidate. Source: 7zFormat.txt and lzma86/LZMA SDK defaults; CPython ``pickletools``.
"""

from __future__ import annotations

import lzma
import re

from scanner.core.context import ScanContext
from scanner.core.model import Blob, BytesBlob, Finding, Verdict

MAX_REGION = 64 << 20
MAX_OUTPUT = 256 << 20
MAX_STARTS = 32
_FEED = 64 << 10
# PROTO 2-5, or a protocol 0/1 GLOBAL opcode naming module and attribute on two lines
_STARTS = re.compile(rb"\x80[\x02-\x05]|c[A-Za-z_][\w.]{0,200}\n[A-Za-z_][\w.]{0,200}\n")


def _decode(region: bytes, filters: list[dict[str, int]], cap: int) -> bytes:
    """Raw-decode ``region`` with ``filters``; the output produced before any error."""
    dec = lzma.LZMADecompressor(format=lzma.FORMAT_RAW, filters=filters)
    out: list[bytes] = []
    total = 0
    try:
        for pos in range(0, len(region), _FEED):
            piece = dec.decompress(region[pos: pos + _FEED], cap - total)
            out.append(piece)
            total += len(piece)
            if total >= cap or dec.eof:
                break
    except lzma.LZMAError:
        pass
    return b"".join(out)


def _candidates(ctx: ScanContext, region: bytes) -> list[tuple[str, bytes]]:
    cap = min(MAX_OUTPUT, ctx.limits.max_member_bytes)
    found = [("stored", region)]
    for how, filt in (("lzma2", {"id": lzma.FILTER_LZMA2, "dict_size": 1 << 26}),
                      ("lzma", {"id": lzma.FILTER_LZMA1, "lc": 3, "lp": 0, "pb": 2,
                                "dict_size": 1 << 26})):
        data = _decode(region, [filt], cap)
        if data:
            ctx.charge_decompressed(len(data))
            found.append((how, data))
    return found


def salvage(ctx: ScanContext, blob: Blob, start: int, end: int) -> list[Finding]:
    """Malicious findings in the bytes ``[start, end)`` of ``blob`` read as pack streams.
    Raises ``LimitHit`` when the decoded bytes exceed the scan's budget."""
    end = min(end, blob.size, start + MAX_REGION)
    if end <= start:
        return []
    region = blob.read_at(start, end - start)
    from scanner.formats.pickle.analyze import analyze_pickle_at  # the pickle machine

    out: list[Finding] = []
    seen: set[tuple[str, str]] = set()
    for how, data in _candidates(ctx, region):
        ctx.check_deadline()
        inner = BytesBlob(f"{blob.name}!<{how} bytes at {start}>", data)
        found = ctx.analyze(inner)
        starts = [m.start() for m in _STARTS.finditer(data)][:MAX_STARTS]
        for at in starts:
            if at:
                found += analyze_pickle_at(ctx, inner, at)[0]
        for f in found:
            key = (f.rule_id, f.evidence)
            if f.verdict is Verdict.MALICIOUS and key not in seen:
                seen.add(key)
                out.append(f)
    return out

