"""Tolerant ZIP structure reader (PKWARE APPNOTE 6.3.x), reading like PyTorch's reader does.

Python's ``zipfile`` refuses archives that PyTorch (miniz) loads: a wrong CRC-32, patched
general-purpose flag bits, a local header name that differs from the central directory
(CVE-2025-10156, CVE-2025-1945, CVE-2025-1944). A scanner built on ``zipfile`` then skips
the payload. This reader never raises for such archives: it lists members the way the
loader sees them (central directory name, data at the local header offset) and records each
inconsistency as a *problem* string for the caller to report.

It also walks the local headers sequentially (what streaming readers see) and lists entries
the central directory does not mention as hidden members. Nothing here decompresses data;
every offset and length is checked against the blob size before use.
"""

from __future__ import annotations

from typing import NamedTuple

from scanner.core.model import Blob

EOCD_SIG = b"PK\x05\x06"
Z64_LOCATOR_SIG = b"PK\x06\x07"
Z64_EOCD_SIG = b"PK\x06\x06"
CD_SIG = b"PK\x01\x02"
LFH_SIG = b"PK\x03\x04"
DD_SIG = b"PK\x07\x08"
# How a zip may start: a local header, an empty archive's end record, or a spanned-
# archive marker (APPNOTE 8.5.3) before the first local header.
ZIP_STARTS = (LFH_SIG, EOCD_SIG, DD_SIG + LFH_SIG, b"PK00" + LFH_SIG)
EOCD_LEN = 22
CD_LEN = 46
LFH_LEN = 30
MAX_COMMENT = 0xFFFF
# Flag bits a plain writer sets: 1/2 deflate options, 3 data descriptor, 11 UTF-8 names.
BENIGN_FLAGS = 0x0002 | 0x0004 | 0x0008 | 0x0800


class ZipUnreadable(Exception):
    """No usable end of central directory record: the blob cannot be read as a zip."""


class ZipEntry:
    """One member as a loader sees it. Offsets are absolute in the blob.

    ``data_offset`` is ``None`` when the local header is missing or unreadable.
    ``in_central`` is false for a hidden member found only by walking local headers.
    ``unicode_names``: the Info-ZIP Unicode Path extra fields (0x7075) of the central and
    local headers: the UTF-8 names unzip and 7-Zip extract to instead of ``name`` (Python's
    zipfile ignores them), so their escapes count too. A slotted class, not a dataclass
    (created at import for a fraction of one: the scanner's start-up is on a fleet scan's
    critical path).
    """

    __slots__ = ("name", "flags", "method", "crc", "comp_size", "size", "header_offset",
                 "data_offset", "local_name", "in_central", "problems", "unicode_names")

    def __init__(self, name: bytes, flags: int, method: int, crc: int, comp_size: int,
                 size: int, header_offset: int, data_offset: int | None = None,
                 local_name: bytes | None = None, in_central: bool = True,
                 problems: list[str] | None = None,
                 unicode_names: list[bytes] | None = None) -> None:
        self.name, self.flags, self.method, self.crc = name, flags, method, crc
        self.comp_size, self.size, self.header_offset = comp_size, size, header_offset
        self.data_offset, self.local_name, self.in_central = data_offset, local_name, in_central
        self.problems: list[str] = [] if problems is None else problems
        self.unicode_names: list[bytes] = [] if unicode_names is None else unicode_names

    def __repr__(self) -> str:
        return f"ZipEntry(name={self.name!r}, header_offset={self.header_offset})"

    @property
    def display_name(self) -> str:
        return display(self.name, self.flags)


class ZipListing(NamedTuple):
    """All members (central directory order, then hidden ones), archive-level problems,
    the count of bytes before the archive (``prefix``) and whether ``max_members`` cut the
    listing short."""

    entries: list[ZipEntry]
    problems: list[str]
    prefix: int
    truncated: bool = False


def display(raw: bytes, flags: int = 0x0800) -> str:
    """A member name for reports: UTF-8 (cp437 when not UTF-8 and bit 11 is clear), with
    control characters escaped so a name cannot forge report lines."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("cp437") if not flags & 0x0800 else raw.decode("utf-8", "replace")
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


def _u16(b: bytes, o: int) -> int:
    return int.from_bytes(b[o : o + 2], "little")


def _u32(b: bytes, o: int) -> int:
    return int.from_bytes(b[o : o + 4], "little")


def _u64(b: bytes, o: int) -> int:
    return int.from_bytes(b[o : o + 8], "little")


class _Eocd(NamedTuple):
    pos: int  # offset of the (zip64 if any, else classic) end record that precedes the CD
    entries: int  # the entry count it declares
    cd_size: int
    cd_offset: int


def _find_eocd(blob: Blob) -> _Eocd:
    tail_len = min(blob.size, EOCD_LEN + MAX_COMMENT)
    tail_start = blob.size - tail_len
    tail = blob.read_at(tail_start, tail_len)
    pos = len(tail)
    while True:
        pos = tail.rfind(EOCD_SIG, 0, pos)
        if pos < 0:
            raise ZipUnreadable("no end of central directory record")
        if pos + EOCD_LEN <= len(tail):
            comment_len = _u16(tail, pos + 20)
            if pos + EOCD_LEN + comment_len <= len(tail):
                break
    rec = tail[pos : pos + EOCD_LEN]
    eocd = _Eocd(tail_start + pos, _u16(rec, 10), _u32(rec, 12), _u32(rec, 16))
    loc_pos = eocd.pos - 20
    if loc_pos >= 0 and blob.read_at(loc_pos, 4) == Z64_LOCATOR_SIG:
        z64_pos = loc_pos - 56
        rec64 = blob.read_at(z64_pos, 56) if z64_pos >= 0 else b""
        if len(rec64) != 56 or rec64[:4] != Z64_EOCD_SIG:
            loc = blob.read_at(loc_pos, 20)
            z64_pos = _u64(loc, 8)
            rec64 = blob.read_at(z64_pos, 56)
        if len(rec64) == 56 and rec64[:4] == Z64_EOCD_SIG:
            return _Eocd(z64_pos, _u64(rec64, 32), _u64(rec64, 40), _u64(rec64, 48))
        raise ZipUnreadable("zip64 end of central directory locator points to no record")
    return eocd


def _zip64_extra(extra: bytes, size: int, comp: int, offset: int) -> tuple[int, int, int]:
    """Apply the zip64 extended information extra field (header id 0x0001)."""
    pos = 0
    while pos + 4 <= len(extra):
        hid, hlen = _u16(extra, pos), _u16(extra, pos + 2)
        body = extra[pos + 4 : pos + 4 + hlen]
        if hid == 0x0001:
            vals = [_u64(body, i) for i in range(0, len(body) - 7, 8)]
            if size == 0xFFFFFFFF and vals:
                size = vals.pop(0)
            if comp == 0xFFFFFFFF and vals:
                comp = vals.pop(0)
            if offset == 0xFFFFFFFF and vals:
                offset = vals.pop(0)
            break
        pos += 4 + hlen
    return size, comp, offset


def unicode_path_names(extra: bytes) -> list[bytes]:
    """The names of every Info-ZIP Unicode Path extra field (header id 0x7075: version
    byte, CRC-32 of the header name, UTF-8 name) in ``extra`` (APPNOTE 4.6.9)."""
    out: list[bytes] = []
    pos = 0
    while pos + 4 <= len(extra):
        hid, hlen = _u16(extra, pos), _u16(extra, pos + 2)
        if hid == 0x7075 and hlen >= 5:
            out.append(extra[pos + 9 : pos + 4 + hlen])
        pos += 4 + hlen
    return out


def _read_central(blob: Blob, start: int, end: int, base: int, limit: int) -> tuple[
    list[ZipEntry], bool
]:
    """Central directory records in ``[start, end)``; offsets relative to ``base``."""
    entries: list[ZipEntry] = []
    pos = start
    while pos + CD_LEN <= end:
        rec = blob.read_at(pos, CD_LEN)
        if len(rec) < CD_LEN or rec[:4] != CD_SIG:
            break
        if len(entries) >= limit:
            return entries, True
        nlen, xlen, clen = _u16(rec, 28), _u16(rec, 30), _u16(rec, 32)
        var = blob.read_at(pos + CD_LEN, nlen + xlen)
        name, extra = var[:nlen], var[nlen:]
        size, comp, offset = _zip64_extra(extra, _u32(rec, 24), _u32(rec, 20), _u32(rec, 42))
        entries.append(ZipEntry(name=name, flags=_u16(rec, 8), method=_u16(rec, 10),
                                crc=_u32(rec, 16), comp_size=comp, size=size,
                                header_offset=base + offset,
                                unicode_names=unicode_path_names(extra) if xlen else []))
        pos += CD_LEN + nlen + xlen + clen
    return entries, False


def _attach_local(blob: Blob, entry: ZipEntry) -> None:
    """Read ``entry``'s local header: set ``data_offset``/``local_name``, note mismatches."""
    rec = blob.read_at(entry.header_offset, LFH_LEN)
    if len(rec) < LFH_LEN or rec[:4] != LFH_SIG:
        entry.problems.append(f"no local file header at offset {entry.header_offset}")
        return
    nlen, xlen = _u16(rec, 26), _u16(rec, 28)
    var = blob.read_at(entry.header_offset + LFH_LEN, nlen + xlen)
    entry.local_name = var[:nlen]
    if xlen:
        entry.unicode_names += unicode_path_names(var[nlen:])
    entry.data_offset = entry.header_offset + LFH_LEN + nlen + xlen
    if entry.local_name != entry.name:
        entry.problems.append(
            f"local header names {display(entry.local_name)!r}, central directory "
            f"{entry.display_name!r}")
    lflags, lmethod = _u16(rec, 6), _u16(rec, 8)
    if lflags != entry.flags:
        entry.problems.append(f"general-purpose flags differ: local 0x{lflags:04x}, "
                              f"central 0x{entry.flags:04x}")
    if lmethod != entry.method:
        entry.problems.append(f"compression method differs: local {lmethod}, "
                              f"central {entry.method}")
    if not lflags & 0x0008 and _u32(rec, 14) != entry.crc:
        entry.problems.append("CRC-32 differs between local header and central directory")


def _check_entry(blob: Blob, entry: ZipEntry) -> None:
    odd = entry.flags & ~BENIGN_FLAGS
    if odd:
        what = "encryption " if odd & 0x0041 else ""
        entry.problems.append(f"unexpected {what}general-purpose flag bits 0x{odd:04x}")
    if entry.data_offset is not None and entry.data_offset + entry.comp_size > blob.size:
        entry.problems.append(f"member data ({entry.comp_size} bytes at offset "
                              f"{entry.data_offset}) runs past the end of the file")


def _walk_local(blob: Blob, start: int, known: dict[int, ZipEntry], limit: int) -> tuple[
    list[ZipEntry], bool
]:
    """Follow local headers from ``start`` as a streaming reader would; return entries the
    central directory does not list (at most ``limit``) and whether more were left."""
    hidden: list[ZipEntry] = []
    pos = start
    for _ in range(len(known) + limit + 1):
        rec = blob.read_at(pos, LFH_LEN)
        if len(rec) < LFH_LEN or rec[:4] != LFH_SIG:
            break
        flags, nlen, xlen = _u16(rec, 6), _u16(rec, 26), _u16(rec, 28)
        var = blob.read_at(pos + LFH_LEN, nlen + xlen)
        size, comp, _ = _zip64_extra(var[nlen:], _u32(rec, 22), _u32(rec, 18), 0)
        data = pos + LFH_LEN + nlen + xlen
        central = known.get(pos)
        if central is not None:
            comp = central.comp_size
        else:
            if len(hidden) >= limit:
                return hidden, True
            hidden.append(ZipEntry(name=var[:nlen], flags=flags, method=_u16(rec, 8),
                                   crc=_u32(rec, 14), comp_size=comp, size=size,
                                   header_offset=pos, data_offset=data, local_name=var[:nlen],
                                   in_central=False,
                                   unicode_names=unicode_path_names(var[nlen:])))
            if flags & 0x0008 and comp == 0:
                break  # length unknown without the central directory: stop walking
        nxt = data + comp
        if flags & 0x0008:
            nxt += 16 if blob.read_at(nxt, 4) == DD_SIG else 12
        if nxt <= pos or nxt >= blob.size:
            break
        pos = nxt
    return hidden, False


def read_zip(blob: Blob, max_members: int) -> ZipListing:
    """List ``blob``'s members. Raises ``ZipUnreadable`` only when no end of central
    directory record exists; every other inconsistency becomes a problem string.

    Reads: the last 64 KiB, the central directory and each local header (30 bytes + name).
    At most ``max_members`` entries (central plus hidden) are listed; ``truncated`` says so.
    """
    eocd = _find_eocd(blob)
    problems: list[str] = []
    prefix = eocd.pos - eocd.cd_size - eocd.cd_offset
    starts: list[tuple[int, int]] = []  # (cd start, base for local offsets)
    if prefix >= 0:
        starts.append((eocd.pos - eocd.cd_size, prefix))
        if prefix > 0:
            problems.append(f"{prefix} bytes precede the archive (prefixed or concatenated)")
    else:
        problems.append("central directory size/offset point outside the file")
        prefix = 0
    if eocd.cd_offset != eocd.pos - eocd.cd_size and blob.read_at(eocd.cd_offset, 4) == CD_SIG:
        starts.append((eocd.cd_offset, 0))  # where a reader that ignores the prefix looks
    entries: list[ZipEntry] = []
    truncated = False
    seen: set[tuple[int, bytes]] = set()
    for cd_start, base in starts:
        found, cut = _read_central(blob, cd_start, cd_start + eocd.cd_size, base,
                                   max_members - len(entries))
        truncated |= cut
        for entry in found:
            if (entry.header_offset, entry.name) not in seen:
                seen.add((entry.header_offset, entry.name))
                entries.append(entry)
    if not truncated and len(entries) != eocd.entries and len(starts) == 1:
        problems.append(f"end record declares {eocd.entries} entries, central directory "
                        f"holds {len(entries)}")
    for entry in entries:
        _attach_local(blob, entry)
        _check_entry(blob, entry)
    known = {e.header_offset: e for e in entries}
    hidden, cut = _walk_local(blob, prefix, known, max(0, max_members - len(entries)))
    for entry in hidden:
        entry.problems.append("local header not listed in the central directory "
                              "(hidden member)")
        _check_entry(blob, entry)
    return ZipListing(entries + hidden, problems, prefix, truncated or cut)


def parse_eocd_only(blob: Blob) -> bool:
    """True when ``blob`` ends with a structurally valid end of central directory record
    whose central directory starts with a central header (or is empty). Cheap: one tail
    read plus one 4-byte read; used by content sniffing for zips with a prefix."""
    try:
        eocd = _find_eocd(blob)
    except ZipUnreadable:
        return False
    cd_start = eocd.pos - eocd.cd_size
    if cd_start < 0 or cd_start < eocd.cd_offset:
        return False
    if eocd.cd_size == 0:
        return eocd.entries == 0
    return blob.read_at(cd_start, 4) == CD_SIG

