"""Zip (torch zip checkpoints, .npz, .keras), tar and 7z container analyzers.

Members are read the way PyTorch reads them (central directory name, data at the local
header offset, CRC and flag bits not trusted) so every payload is analysed, and each
inconsistency is reported (CVE-2025-10155/10156, CVE-2025-1944/1945). Stored members are
analysed through zero-copy views; compressed ones are inflated in bounded chunks and
charged to ``ScanContext.charge_decompressed``. PyTorch storage records
(``<top>/data/<n>``) are raw tensor bytes and are skipped unless ``limits.deep``. In a
torch archive, ``<top>/bytecode.pkl`` and ``<top>/code/**.py`` (TorchScript, lite
interpreter ``.ptl``) also have their operators judged (``scanner.formats.torchops``).
"""

from __future__ import annotations

import bz2
import re
import zlib
from collections import Counter

from scanner.core.archive import (
    ARCHIVE_DUPLICATE,
    ARCHIVE_HIDDEN,
    ARCHIVE_INTEGRITY,
    ARCHIVE_MALFORMED,
    ARCHIVE_OVERLAP,
    ARCHIVE_TRAVERSAL,
    ARCHIVE_UNSUPPORTED,
    KERAS_NOT_ALLOWED,
    NPZ_NOT_ALLOWED,
    TORCH_ZIP_NOT_ALLOWED,
    ZIP_NOT_ALLOWED,
    escapes,
    normalized,
)
from scanner.core.blobview import CHUNK, SliceBlob, iter_chunks, read_bounded
from scanner.core.context import LimitHit, ScanContext
from scanner.core.model import Blob, BytesBlob, Finding
from scanner.core.rules import Rule
from scanner.core.spec import Format, FormatSpec, Probe
from scanner.formats.pickle import PICKLE_NAMES
from scanner.formats.torchops import archive_member_findings
from scanner.formats.ziplib import (
    ZIP_STARTS,
    ZipEntry,
    ZipListing,
    ZipUnreadable,
    parse_eocd_only,
    read_zip,
)

_STORED, _DEFLATED, _BZIP2 = 0, 8, 12


def _kind(listing: ZipListing) -> tuple[Rule, str | None]:
    """The policy rule for this zip and, for a torch checkpoint, its top folder."""
    names = [e.name for e in listing.entries if e.in_central]
    if names:
        top = names[0].split(b"/", 1)[0]
        if b"/" in names[0] and top + b"/data.pkl" in names:
            return TORCH_ZIP_NOT_ALLOWED, top.decode("utf-8", "replace")
    if b"config.json" in names and (b"metadata.json" in names or any(
            n.startswith(b"model.weights.") for n in names)):
        return KERAS_NOT_ALLOWED, None
    if names and all(n.endswith(b".npy") for n in names):
        return NPZ_NOT_ALLOWED, None
    return ZIP_NOT_ALLOWED, None


def _name_findings(path: str, entry: ZipEntry) -> list[Finding]:
    out: list[Finding] = []
    for raw in dict.fromkeys((entry.name, entry.local_name or entry.name,
                              *entry.unicode_names)):
        why = escapes(raw.decode("utf-8", "replace"))
        if why is not None:
            out.append(ARCHIVE_TRAVERSAL.finding(
                path, f"member name escapes the extraction folder ({why})",
                evidence=repr(raw[:200])))
    return out


def _structure_findings(path: str, listing: ZipListing) -> list[Finding]:
    out = [ARCHIVE_INTEGRITY.finding(path, problem) for problem in listing.problems]
    counts = Counter(e.name for e in listing.entries)
    for raw, n in counts.items():
        if n > 1:
            out.append(ARCHIVE_DUPLICATE.finding(
                path, f"{n} members are named {raw.decode('utf-8', 'replace')!r}; every "
                "copy is analysed", evidence=repr(raw[:200])))
    groups: dict[str, set[bytes]] = {}
    for e in listing.entries:
        groups.setdefault(normalized(e.display_name), set()).add(e.name)
    for key, raws in groups.items():
        if len(raws) > 1:
            out.append(ARCHIVE_DUPLICATE.finding(
                path, f"{len(raws)} different member names normalise to {key!r}",
                evidence=key[:200]))
    spans = sorted((e.header_offset, e.data_offset + e.comp_size)
                   for e in listing.entries if e.data_offset is not None)
    overlaps = sum(1 for a, b in zip(spans, spans[1:], strict=False) if b[0] < a[1])
    if overlaps:
        out.append(ARCHIVE_OVERLAP.finding(
            path, f"{overlaps} member(s) start inside the data of another member"))
    return out


def _decompress(ctx: ScanContext, blob: Blob, entry: ZipEntry, start: int) -> tuple[
    bytes, str | None
]:
    """Inflate one member in bounded chunks. Returns (data, problem or None).
    Raises ``LimitHit`` past ``max_member_bytes`` or the target's total budget."""
    out = bytearray()
    pos, end = start, start + entry.comp_size
    dz = zlib.decompressobj(-15) if entry.method == _DEFLATED else None
    db = bz2.BZ2Decompressor() if entry.method == _BZIP2 else None
    pending = b""
    try:
        while True:
            ctx.check_deadline()
            more_output = db is not None and not db.eof and not db.needs_input
            if not pending and not more_output:
                if pos >= end:
                    break
                pending = blob.read_at(pos, min(CHUNK, end - pos))
                if not pending:
                    break
                pos += len(pending)
            if dz is not None:
                piece = dz.decompress(pending, CHUNK)
                pending, done = dz.unconsumed_tail, dz.eof
            elif db is not None:
                piece = db.decompress(pending, CHUNK)
                pending, done = b"", db.eof
            else:  # pragma: no cover - only called for deflate and bzip2
                return bytes(out), f"unsupported compression method {entry.method}"
            ctx.charge_decompressed(len(piece))
            if len(out) + len(piece) > ctx.limits.max_member_bytes:
                raise LimitHit("max_member_bytes", ctx.limits.max_member_bytes)
            out += piece
            if done:
                return bytes(out), None
    except (zlib.error, OSError, EOFError, ValueError) as exc:
        return bytes(out), f"compressed data is corrupt: {exc}"
    return bytes(out), "compressed data ends before the end of the stream"


def _crc_of(ctx: ScanContext, member: Blob) -> int:
    crc = 0
    for _, data in iter_chunks(member):
        ctx.check_deadline()
        crc = zlib.crc32(data, crc)
    return crc


def _member(ctx: ScanContext, blob: Blob, entry: ZipEntry, mpath: str) -> tuple[
    Blob | None, list[Finding]
]:
    """The member as a blob (a view when stored), plus integrity findings."""
    out: list[Finding] = []
    start = entry.data_offset or 0
    if entry.method == _STORED:
        member: Blob = SliceBlob(mpath, blob, start, entry.comp_size)
        if entry.size != entry.comp_size:
            out.append(ARCHIVE_INTEGRITY.finding(
                mpath, f"stored member sizes differ: compressed {entry.comp_size}, "
                f"uncompressed {entry.size}"))
    elif entry.method in (_DEFLATED, _BZIP2):
        data, problem = _decompress(ctx, blob, entry, start)
        if problem:
            out.append(ARCHIVE_INTEGRITY.finding(mpath, problem))
        member = BytesBlob(mpath, data)
        if len(data) != entry.size and not problem:
            out.append(ARCHIVE_INTEGRITY.finding(
                mpath, f"member inflates to {len(data)} bytes, header says {entry.size}"))
    else:
        out.append(ARCHIVE_UNSUPPORTED.finding(
            mpath, f"compression method {entry.method} is not supported; the member "
            "cannot be verified", evidence=f"method={entry.method}"))
        return None, out
    if not entry.flags & 0x0001 and _crc_of(ctx, member) != entry.crc:
        out.append(ARCHIVE_INTEGRITY.finding(
            mpath, "CRC-32 mismatch (PyTorch's reader does not check it; analysed anyway)",
            evidence=f"declared 0x{entry.crc:08x}"))
    return member, out


def _keras_config(ctx: ScanContext, member: Blob) -> list[Finding]:
    from scanner.formats.keras import analyze_keras_config

    data = read_bounded(member, ctx.limits.max_json_bytes, "max_json_bytes")
    return analyze_keras_config(ctx, member.name, data)


def analyze_zip(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Findings for a zip blob and (through ``ctx.analyze``) for each of its members.

    Never raises for bad input: an unreadable archive is ``archive.malformed`` and a limit
    hit is ``scanner.limit_exceeded``, appended to the findings gathered so far."""
    try:
        listing = read_zip(blob, ctx.limits.max_archive_members)
    except ZipUnreadable as exc:
        return [ZIP_NOT_ALLOWED.finding(blob.name, "zip archive (unreadable)"),
                ARCHIVE_MALFORMED.finding(blob.name, f"zip cannot be read: {exc}")]
    policy, torch_top = _kind(listing)
    findings = [policy.finding(blob.name, policy.title)]
    findings += _structure_findings(blob.name, listing)
    storage = re.compile(re.escape(torch_top) + r"/data/\d+") if torch_top else None
    if listing.truncated:  # the listed members are still analysed below
        findings.append(LimitHit("max_archive_members", ctx.limits.max_archive_members)
                        .finding(blob.name))
    try:
        if listing.prefix > 0:
            findings += ctx.analyze(SliceBlob(f"{blob.name}!<prefix>", blob, 0, listing.prefix))
        for entry in listing.entries:
            ctx.check_deadline()
            mpath = f"{blob.name}!{entry.display_name}"
            findings += _name_findings(mpath, entry)
            rule_ = ARCHIVE_INTEGRITY if entry.in_central else ARCHIVE_HIDDEN
            findings += [rule_.finding(mpath, p) for p in entry.problems]
            if entry.data_offset is None:
                continue
            if storage and not ctx.limits.deep and storage.fullmatch(entry.display_name):
                continue  # raw tensor bytes: torch never unpickles them
            try:
                findings += _analyze_member(ctx, blob, entry, mpath, torch_top)
            except LimitHit as hit:
                if hit.what != "max_member_bytes":
                    raise
                findings.append(hit.finding(mpath))  # this member only; go on with the rest
    except LimitHit as hit:  # deadline or total budget: keep what was found so far
        findings.append(hit.finding(blob.name))
    return findings


def _analyze_member(ctx: ScanContext, blob: Blob, entry: ZipEntry, mpath: str,
                    torch_top: str | None) -> list[Finding]:
    member, findings = _member(ctx, blob, entry, mpath)
    if member is not None:
        findings += ctx.analyze(member)
        if entry.name == b"config.json":
            findings += _keras_config(ctx, member)
        if torch_top is not None and entry.display_name.startswith(torch_top + "/"):
            # TorchScript archives: the operators bytecode.pkl and code/**.py run
            inner = entry.display_name[len(torch_top) + 1:]
            findings += archive_member_findings(ctx, member, inner)
    return findings


def analyze_7z(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """7z archives: ``scanner.formats.sevenzip.analyze_7z`` (kept here for old imports)."""
    from scanner.formats.sevenzip import analyze_7z as read_7z

    return read_7z(ctx, blob)


ZIP = Format("zip")  # generic zip; torch zip checkpoints, .npz, .keras are zips
SPECS = (FormatSpec(
    ZIP, analyze_zip, order=10, magic=ZIP_STARTS,
    # A zip found from its end record: prefixed zips and polyglots (the analyzer reads
    # the prefix too).
    probes=(Probe(80, lambda h: h.size >= 22 and parse_eocd_only(h.blob)),),
    name_hints=(".zip", ".npz", ".keras"),
    claims=(".npz", ".keras", ".ptl", *PICKLE_NAMES),
),)
