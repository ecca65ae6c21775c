"""Tar container analyzer (POSIX.1-1988 ustar, GNU long names, POSIX.1-2001 pax headers).

A hand-written, bounded reader instead of ``tarfile`` (the scanner must not share a parser
with the archive it judges: ``tarfile`` holds every member list in memory and extracts by
name, where a hostile archive picks which copy is read): header fields are validated
before use, GNU long-name and pax records are capped, member count is bounded, and regular
members are analysed through zero-copy views. Links that escape the archive, '..' or
absolute names (CVE-2007-4559 class) and special files are findings. Legacy ``torch.save``
tar checkpoints are handled like any tar: their ``pickle``, ``storages`` and ``tensors``
members are sniffed and analysed (``scanner.scan.loaders`` also reads those three names
as pickles, as ``torch.load`` does whatever their bytes).

What counts as a header is exactly what CPython 3.11's ``Lib/tarfile.py`` accepts
(``TarInfo.frombuf``), since the loaders that matter open archives with it
(``torch.load``'s ``_legacy_load`` tries ``tarfile.open(f, "r:")`` before anything else,
torch/serialization.py; NeMo ``restore_from`` opens ``.nemo`` files with ``"r:"`` then
``"r:gz"``): a 512-byte block, not all NUL, whose number fields (mode, uid, gid, size,
mtime, checksum, devmajor, devminor; for GNU sparse members the sparse map and real size)
all parse as ``tarfile.nti`` parses them (``tar_number``: base-256 when the first byte is
0x80 or 0xff, else the text up to the first NUL, ASCII only, stripped, read as
``int(text, 8)`` reads it: sign, ``0o`` prefix, single underscores), and whose checksum
equals the sum of its bytes with the checksum field as eight spaces, unsigned or signed
(``calc_chksums``). The name may be empty and no magic is required (a v7 header); the
ustar prefix field (345-500) is prepended to every name but GNU ``L``/``K``/``S``
headers', as ``frombuf`` does. A later header tarfile would refuse ends its walk
silently; here it is a ``archive.malformed`` finding (fail closed).

The walk goes where ``TarFile.next`` goes: data blocks follow only regular members and
unknown types (``REGULAR_TYPES``, not ``SUPPORTED_TYPES``), so a link, directory or device
header is followed by the next header whatever its size field says; a v7 regular header
named ``x/`` is a directory; pax ``x``/``X`` records apply to the next member and ``g``
records to every later one (``path``, ``linkpath``, ``size``; a ``size`` that ``int()``
refuses is 0, as ``_apply_pax_info`` reads it), a global ``size`` changing what is read
but not where the next header is. Negative sizes stop the walk (``tarfile`` would re-read
one header forever).
"""

from __future__ import annotations

import posixpath
import re

from scanner.core.archive import (
    ARCHIVE_DUPLICATE,
    ARCHIVE_LINK,
    ARCHIVE_MALFORMED,
    ARCHIVE_SPECIAL,
    ARCHIVE_TRAVERSAL,
    ARCHIVE_UNSUPPORTED,
    TAR_NOT_ALLOWED,
    escapes,
    normalized,
)
from scanner.core.blobview import SliceBlob
from scanner.core.context import LimitHit, ScanContext
from scanner.core.model import Blob, BytesBlob, Finding
from scanner.core.spec import Format, FormatSpec, Probe
from scanner.formats.ziplib import display

BLOCK = 512
MAX_META = 1 << 20  # GNU long name / pax record bytes held in memory
_SPECIAL = {b"3": "character device", b"4": "block device", b"6": "FIFO"}


# ASCII characters str.strip() removes (str.isspace(): \t \n \v \f \r, 0x1c-0x1f, space).
_STRIPPED = "".join(chr(c) for c in range(128) if chr(c).isspace())
# What int(text, 8) accepts once the text is stripped: a sign, an optional 0o prefix
# (an underscore may follow it), octal digits with single underscores between them.
_OCTAL = re.compile(r"[+-]?(?:0[oO]_?)?[0-7](?:_?[0-7])*")
# (offset, length) of the number fields TarInfo.frombuf reads from every header.
_NUMBERS = ((100, 8), (108, 8), (116, 8), (124, 12), (136, 12), (329, 8), (337, 8))
# ... and from a GNU sparse header: four (offset, numbytes) pairs, then the real size.
_SPARSE_NUMBERS = (*((386 + 12 * i, 12) for i in range(8)), (483, 12))


def tar_number(field: bytes) -> int | None:
    """A header number field as ``tarfile.nti`` reads it, or ``None`` where ``nti``
    raises: base-256 big-endian after a 0x80 (positive) or 0xff (negative) first byte;
    otherwise the bytes before the first NUL, which must be ASCII, stripped of
    ``_STRIPPED``, empty read as 0, else accepted only in ``int(text, 8)``'s syntax
    (``_OCTAL``: ``0o50447``, ``+7``, ``-1``, ``7_7`` are numbers; ``8``, ``0x7``, ``7 7``,
    ``_7`` are not). Independent of ``tarfile``; tests compare the two on random fields."""
    if not field:
        return None
    if field[0] in (0x80, 0xFF):
        n = int.from_bytes(field[1:], "big")
        return n - 256 ** (len(field) - 1) if field[0] == 0xFF else n
    raw = field.split(b"\x00", 1)[0]
    if not raw.isascii():
        return None
    text = raw.decode("ascii").strip(_STRIPPED)
    if not text:
        return 0
    if _OCTAL.fullmatch(text) is None:
        return None
    sign = -1 if text[0] == "-" else 1
    digits = text.lstrip("+-")
    if digits[:2] in ("0o", "0O"):
        digits = digits[2:]
    return sign * int(digits.replace("_", ""), 8)


def checksum_ok(header: bytes) -> bool:
    """The header checksum as ``tarfile.calc_chksums`` checks it: the stored number equals
    the sum of the 512 bytes with the checksum field as eight spaces, unsigned or signed."""
    stored = tar_number(header[148:156])
    if stored is None or len(header) != BLOCK:
        return False
    body = header[:148] + b" " * 8 + header[156:]
    unsigned = sum(body)
    signed = sum(b - 256 if b > 127 else b for b in body)
    return stored in (unsigned, signed)


def header_error(header: bytes) -> str | None:
    """Why ``tarfile.TarInfo.frombuf`` would refuse ``header`` (a 512-byte block), or
    ``None`` when it reads it as a member header. An all-NUL block is the end-of-archive
    marker (``"end-of-archive block"``)."""
    if len(header) != BLOCK:
        return "truncated tar header"
    if header.count(0) == BLOCK:
        return "end-of-archive block"
    if not checksum_ok(header):
        return "tar header checksum mismatch"
    fields = _NUMBERS + (_SPARSE_NUMBERS if header[156:157] == b"S" else ())
    for at, length in fields:
        if tar_number(header[at:at + length]) is None:
            return f"invalid number field at header offset {at}"
    return None


def _cstr(field: bytes) -> bytes:
    return field.split(b"\x00", 1)[0]


def _pax(data: bytes) -> dict[str, str] | None:
    """Parse pax extended header records ``"<len> <key>=<value>\\n"``; ``None`` if bad."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        space = data.find(b" ", pos, pos + 20)
        if space < 0 or not data[pos:space].isdigit():
            return None
        length = int(data[pos:space])
        record = data[space + 1 : pos + length]
        if length <= 0 or pos + length > len(data) or not record.endswith(b"\n"):
            return None
        key, eq, value = record[:-1].partition(b"=")
        if not eq:
            return None
        out[key.decode("utf-8", "replace")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


# Header types (CPython Lib/tarfile.py): GNU long name/link and pax records (x, X Solaris,
# g global); REGULAR_TYPES and SUPPORTED_TYPES, which decide whether data blocks follow.
_META = (b"L", b"K", b"x", b"X", b"g")
_REGULAR = (b"0", b"\x00", b"7", b"S")
_SUPPORTED = (*_REGULAR, b"1", b"2", b"5", b"6", b"3", b"4", b"L", b"K")


def _blocks(size: int) -> int:
    """Bytes of the data blocks after a header, as ``TarInfo._block`` rounds them."""
    return -(-size // BLOCK) * BLOCK


def _pax_int(raw: str) -> int:
    """A pax ``size`` as ``_apply_pax_info`` reads it: ``int(value)``, 0 when that fails."""
    try:
        return int(raw)
    except ValueError:
        return 0


def _pax_path(records: dict[str, str], key: str) -> str | None:
    """A pax ``path`` (or ``GNU.sparse.name``) / ``linkpath`` record, ``path`` without
    trailing slashes as tarfile strips them; ``None`` when absent or empty."""
    value = records.get(key) or (records.get("GNU.sparse.name") if key == "path" else None)
    if value and key == "path":
        value = value.rstrip("/")
    return value or None


def _link_escapes(name: str, target: str, hard: bool) -> str | None:
    why = escapes(target)
    if why is not None and why != "'..' component":
        return why
    base = "" if hard else posixpath.dirname(name)
    joined = posixpath.normpath(posixpath.join(base, target.replace("\\", "/")))
    return "link target leaves the archive" if joined.startswith("..") else None


class _TarWalk:
    def __init__(self, ctx: ScanContext, blob: Blob, stream: bool = False) -> None:
        self.ctx, self.blob, self.stream = ctx, blob, stream
        self.findings: list[Finding] = [TAR_NOT_ALLOWED.finding(blob.name, TAR_NOT_ALLOWED.title)]
        self.seen: set[str] = set()

    def malformed(self, message: str, offset: int) -> None:
        self.findings.append(ARCHIVE_MALFORMED.finding(self.blob.name, message, offset=offset))

    def run(self) -> None:
        """Walk the headers as ``TarFile.next`` does (module docstring): GNU ``L``/``K``
        names, pax ``x``/``X`` records for the next member and ``g`` records for every
        later one (``path``, ``linkpath``, ``size``), data blocks skipped only after
        regular members and unknown types (a link, directory or device header is followed
        by the next header whatever its size field says)."""
        pos, members = 0, 0
        long_name: str | None = None
        long_link: str | None = None
        pax: dict[str, str] | None = None  # an x header's records over the global ones
        global_pax: dict[str, str] = {}
        while pos + BLOCK <= self.blob.size:
            self.ctx.check_deadline()
            header = self.blob.read_at(pos, BLOCK)
            if header == b"\x00" * BLOCK or (self.stream and not header):
                return  # end-of-archive marker (a stream may end without one, as tarfile reads)
            why = header_error(header)
            if why is not None:  # tarfile: refused at offset 0, the walk's end later on
                return self.malformed(why, pos)
            size = tar_number(header[124:136]) or 0  # header_error parsed it
            kind = header[156:157]
            data_at = pos + BLOCK
            if kind in _META:
                if size < 0:
                    return self.malformed(f"negative member size ({size})", pos)
                if size > MAX_META:
                    raise LimitHit("tar metadata record bytes", MAX_META, size)
                if data_at + size > self.blob.size:
                    self.malformed(f"member data ({size} bytes) runs past the end of the file",
                                   pos)
                meta = self.blob.read_at(data_at, size)
                if kind == b"L":
                    long_name = _cstr(meta).decode("utf-8", "surrogateescape")
                elif kind == b"K":
                    long_link = _cstr(meta).decode("utf-8", "surrogateescape")
                else:
                    parsed = _pax(meta)
                    if parsed is None:
                        return self.malformed("invalid pax extended header", pos)
                    if kind == b"g":
                        global_pax.update(parsed)
                    else:
                        pax = {**global_pax, **parsed}
                pos = data_at + _blocks(size)
                continue
            members += 1
            if members > self.ctx.limits.max_archive_members:
                raise LimitHit("max_archive_members", self.ctx.limits.max_archive_members)
            records = pax if pax is not None else global_pax
            content = _pax_int(records["size"]) if "size" in records else size
            step = content if pax is not None and "size" in pax else size
            if content < 0 or step < 0:  # tarfile steps by ceil(size/512) blocks
                return self.malformed(f"negative member size ({min(content, step)})", pos)
            if data_at + content > self.blob.size:
                self.malformed(f"member data ({content} bytes) runs past the end of the file",
                               pos)
            name = (_pax_path(pax or {}, "path") or long_name
                    or _pax_path(global_pax, "path") or self._header_name(header))
            link = (_pax_path(pax or {}, "linkpath") or long_link
                    or _pax_path(global_pax, "linkpath")
                    or _cstr(header[157:257]).decode("utf-8", "surrogateescape"))
            if kind == b"\x00" and _cstr(header[0:100]).endswith(b"/"):
                kind = b"5"  # a v7 directory (frombuf)
            if kind == b"5":
                name = name.rstrip("/")
            self.member(name, kind, link, data_at, content)
            long_name = long_link = None
            pax = None
            if kind in _REGULAR or kind not in _SUPPORTED:
                pos = data_at + _blocks(step)
            else:
                pos = data_at

    @staticmethod
    def _header_name(header: bytes) -> str:
        """The member name as ``TarInfo.frombuf`` builds it: the prefix field (345-500,
        whatever the magic) joined before the name field, except for GNU ``L``/``K``/``S``
        headers (``L``/``K`` never reach here)."""
        name = _cstr(header[0:100])
        prefix = _cstr(header[345:500])
        if prefix and header[156:157] != b"S":
            name = prefix + b"/" + name
        return name.decode("utf-8", "surrogateescape")

    def member(self, name: str, kind: bytes, link: str, data_at: int, size: int) -> None:
        shown = display(name.encode("utf-8", "surrogateescape"))
        mpath = f"{self.blob.name}!{shown}"
        why = escapes(name)
        if why is not None:
            self.findings.append(ARCHIVE_TRAVERSAL.finding(
                mpath, f"member name escapes the extraction folder ({why})", evidence=shown))
        key = normalized(name)
        if key in self.seen and kind != b"5":
            self.findings.append(ARCHIVE_DUPLICATE.finding(
                mpath, f"more than one member is named {key!r}; every copy is analysed"))
        self.seen.add(key)
        if kind in (b"1", b"2"):
            hard = kind == b"1"
            why = _link_escapes(name, link, hard)
            what = "hard link" if hard else "symbolic link"
            if why is not None:
                self.findings.append(ARCHIVE_TRAVERSAL.finding(
                    mpath, f"{what} to {display(link.encode('utf-8', 'replace'))!r}: {why}"))
            else:
                self.findings.append(ARCHIVE_LINK.finding(mpath, f"{what} member", evidence=link))
        elif kind in _SPECIAL:
            self.findings.append(ARCHIVE_SPECIAL.finding(mpath, f"{_SPECIAL[kind]} member"))
        elif kind == b"S":
            self.findings.append(ARCHIVE_UNSUPPORTED.finding(
                mpath, "GNU sparse member cannot be verified"))
        elif kind != b"5":  # regular file (unknown types read as regular, like tarfile)
            member = self._streamed(mpath, data_at, size) if self.stream else SliceBlob(
                mpath, self.blob, data_at, size)
            if member is not None:
                self.findings += self.ctx.analyze(member)

    def _streamed(self, mpath: str, data_at: int, size: int) -> Blob | None:
        """A member of a forward-only stream, held in memory (one at a time, charged to
        the decompression budget); over ``max_member_bytes`` it is a limit finding and is
        skipped (the walk goes on to the next member)."""
        if size > self.ctx.limits.max_member_bytes:
            self.findings.append(LimitHit("max_member_bytes", self.ctx.limits.max_member_bytes,
                                          size).finding(mpath))
            return None
        self.ctx.charge_decompressed(size)
        data = self.blob.read_at(data_at, size)
        if len(data) < size:
            self.malformed(f"member data ({size} bytes) runs past the end of the stream", data_at)
        return BytesBlob(mpath, data)


def analyze_tar(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Findings for a tar blob and (through ``ctx.analyze``) for each regular member.

    Never raises for bad input; a limit hit is appended to the findings gathered so far."""
    walk = _TarWalk(ctx, blob)
    try:
        walk.run()
    except LimitHit as hit:
        walk.findings.append(hit.finding(blob.name))
    return walk.findings


def analyze_tar_stream(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """``analyze_tar`` over a forward-only blob (a decompressing stream whose ``read_at``
    only moves forward, ``size`` an upper bound): each regular member is read into memory
    in turn and analysed, never the whole archive. Never raises for bad input."""
    walk = _TarWalk(ctx, blob, stream=True)
    try:
        walk.run()
    except LimitHit as hit:
        walk.findings.append(hit.finding(blob.name))
    except ValueError as exc:  # the stream under the tar is corrupt or truncated
        walk.findings.append(ARCHIVE_MALFORMED.finding(blob.name, str(exc)))
    return walk.findings


def is_tar_header(head: bytes) -> bool:
    """Whether ``tarfile.open(f, "r:")`` reads ``head``'s first 512 bytes as a member
    header (``header_error`` is ``None``): ustar, GNU, pax or v7, any name (empty too),
    with or without magic. An all-NUL first block opens as an empty archive, which no
    loader reads anything from: not a header."""
    return len(head) >= BLOCK and header_error(head[:BLOCK]) is None


TAR = Format("tar")  # tar container (old torch tar checkpoints too)
SPECS = (FormatSpec(TAR, analyze_tar, probes=(Probe(60, lambda h: is_tar_header(h.head)),)),)
