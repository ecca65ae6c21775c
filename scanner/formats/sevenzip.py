"""A bounded 7z reader (7zFormat.txt of the LZMA SDK), enough to analyse what ordinary
7z archives hold: plain or LZMA-encoded headers, folders of one simple coder (copy, LZMA,
LZMA2; stdlib ``lzma`` raw filters), sub-streams, and file names.

Every member is decompressed within ``max_member_bytes``/``charge_decompressed`` and a
200:1 ratio, then analysed like a file (``ctx.analyze``). Names are checked for escapes.
Anything else (filters such as BCJ, several coders, encryption, multi-volume, external
headers) is ``archive.unsupported`` (malformed, fail closed). Never raises for bad input.
"""

from __future__ import annotations

import lzma
import zlib

from scanner.core.archive import (
    ARCHIVE_INTEGRITY,
    ARCHIVE_MALFORMED,
    ARCHIVE_TRAVERSAL,
    ARCHIVE_UNSUPPORTED,
    escapes,
)
from scanner.core.context import LimitHit, ScanContext
from scanner.core.model import Blob, BytesBlob, Finding, Severity, Verdict
from scanner.core.rules import rule
from scanner.core.spec import Format, FormatSpec
from scanner.formats.salvage import salvage

SEVENZIP_NOT_ALLOWED = rule(
    "format.7z_not_allowed", Verdict.POLICY, Severity.MEDIUM,
    "7z archive: not an allowed weight format",
    "Ship weights as safetensors files, not inside an archive.",
)

MAGIC = b"7z\xbc\xaf\x27\x1c"  # signature header (7zFormat.txt)
MAX_HEADER = 64 << 20
MAX_RATIO = 200
_COPY, _LZMA2, _LZMA = b"\x00", b"\x21", b"\x03\x01\x01"


class Unsupported(Exception):
    """A valid 7z feature this reader does not implement."""


class Bad(Exception):
    """The archive violates the format."""


class _Buf:
    def __init__(self, data: bytes) -> None:
        self.d, self.i = data, 0

    def byte(self) -> int:
        if self.i >= len(self.d):
            raise Bad("header ends early")
        self.i += 1
        return self.d[self.i - 1]

    def take(self, n: int) -> bytes:
        if n < 0 or self.i + n > len(self.d):
            raise Bad("header field runs past its end")
        self.i += n
        return self.d[self.i - n: self.i]

    def number(self) -> int:
        first = self.byte()
        mask, value = 0x80, 0
        for i in range(8):
            if not first & mask:
                return value | ((first & (mask - 1)) << (8 * i))
            value |= self.byte() << (8 * i)
            mask >>= 1
        return value

    def bits(self, n: int) -> list[bool]:
        out, byte, mask = [], 0, 0
        for _ in range(n):
            if not mask:
                byte, mask = self.byte(), 0x80
            out.append(bool(byte & mask))
            mask >>= 1
        return out

    def digests(self, n: int) -> None:
        defined = [True] * n if self.byte() else self.bits(n)
        self.take(4 * sum(defined))


class _Folder:
    def __init__(self, codec: bytes, props: bytes) -> None:
        self.codec, self.props = codec, props
        self.size = 0
        self.streams: list[int] = []


def _count(n: int, what: str, limit: int = 1_000_000) -> int:
    if n > limit:
        raise Bad(f"{what} count {n} is implausible")
    return n


def _pack_info(b: _Buf) -> tuple[int, list[int]]:
    pos, n = b.number(), _count(b.number(), "pack stream")
    sizes: list[int] = []
    while (prop := b.byte()) != 0:
        if prop == 0x09:
            sizes = [b.number() for _ in range(n)]
        elif prop == 0x0A:
            b.digests(n)
        else:
            raise Bad(f"unexpected property {prop:#x} in PackInfo")
    return pos, sizes


def _folder(b: _Buf) -> _Folder:
    if b.number() != 1:
        raise Unsupported("folder with several coders (filters such as BCJ)")
    flag = b.byte()
    if flag & 0x80 or flag & 0x10:
        raise Unsupported("complex or alternative coder")
    codec = b.take(flag & 0x0F)
    props = b.take(b.number()) if flag & 0x20 else b""
    if codec not in (_COPY, _LZMA2, _LZMA):
        raise Unsupported(f"coder {codec.hex()} (encryption or another codec)")
    return _Folder(codec, props)


def _unpack_info(b: _Buf) -> list[_Folder]:
    if b.byte() != 0x0B:
        raise Bad("UnPackInfo without folders")
    folders = [None] * _count(b.number(), "folder")
    if b.byte() != 0:
        raise Unsupported("external folder definitions")
    out = [_folder(b) for _ in folders]
    if b.byte() != 0x0C:
        raise Bad("UnPackInfo without unpack sizes")
    for f in out:
        f.size = b.number()
    while (prop := b.byte()) != 0:
        if prop == 0x0A:
            b.digests(len(out))
        else:
            raise Bad(f"unexpected property {prop:#x} in UnPackInfo")
    return out


def _substreams(b: _Buf, folders: list[_Folder]) -> None:
    nums = [1] * len(folders)
    prop = b.byte()
    if prop == 0x0D:
        nums = [_count(b.number(), "sub-stream") for _ in folders]
        prop = b.byte()
    sizes_given = prop == 0x09
    for f, n in zip(folders, nums, strict=True):
        if n == 0:
            continue
        sizes = [b.number() for _ in range(n - 1)] if sizes_given else []
        if sum(sizes) > f.size:
            raise Bad("sub-stream sizes exceed their folder")
        f.streams = sizes + [f.size - sum(sizes)]
    if sizes_given:
        prop = b.byte()
    while prop != 0:
        if prop == 0x0A:
            b.digests(sum(nums))
        else:
            raise Bad(f"unexpected property {prop:#x} in SubStreamsInfo")
        prop = b.byte()


def _streams_info(b: _Buf) -> tuple[int, list[int], list[_Folder]]:
    pos, sizes, folders = 0, list[int](), list[_Folder]()
    while (prop := b.byte()) != 0:
        if prop == 0x06:
            pos, sizes = _pack_info(b)
        elif prop == 0x07:
            folders = _unpack_info(b)
            for f in folders:
                f.streams = [f.size]
        elif prop == 0x08:
            _substreams(b, folders)
        else:
            raise Bad(f"unexpected property {prop:#x} in StreamsInfo")
    if len(sizes) != len(folders):
        raise Unsupported("folders and pack streams do not pair one to one")
    return pos, sizes, folders


def _names(b: _Buf, n: int) -> tuple[list[str], list[bool]]:
    names, empty = [""] * n, [False] * n
    while (prop := b.number()) != 0:
        size = b.number()
        data = _Buf(b.take(size))
        if prop == 0x0E:
            empty = data.bits(n)
        elif prop == 0x11:
            if data.byte() != 0:
                raise Unsupported("external file names")
            text = data.d[data.i:].decode("utf-16-le", "replace")
            parts = text.split("\x00")
            names = (parts + [""] * n)[:n]
    return names, empty


def _decode(ctx: ScanContext, blob: Blob, start: int, packed: int, f: _Folder) -> bytes:
    if f.size > ctx.limits.max_member_bytes:
        raise LimitHit("max_member_bytes", ctx.limits.max_member_bytes, f.size)
    if f.size > MAX_RATIO * max(packed, 1) + (1 << 20):
        raise LimitHit("max_decompression_ratio", MAX_RATIO, f.size // max(packed, 1))
    ctx.charge_decompressed(f.size)
    raw = blob.read_at(start, packed)
    if len(raw) != packed:
        raise Bad("pack stream runs past the end of the file")
    if f.codec == _COPY:
        out = raw
    else:
        if f.codec == _LZMA2:
            if len(f.props) != 1 or f.props[0] > 40:
                raise Bad("bad LZMA2 properties")
            p = f.props[0]
            filt = {"id": lzma.FILTER_LZMA2,
                    "dict_size": 0xFFFFFFFF if p == 40 else (2 | (p & 1)) << (p // 2 + 11)}
        else:
            if len(f.props) != 5 or f.props[0] >= 9 * 5 * 5:
                raise Bad("bad LZMA properties")
            d = f.props[0]
            filt = {"id": lzma.FILTER_LZMA1, "lc": d % 9, "lp": (d // 9) % 5, "pb": d // 45,
                    "dict_size": int.from_bytes(f.props[1:], "little")}
        dec = lzma.LZMADecompressor(format=lzma.FORMAT_RAW, filters=[filt])
        try:
            out = dec.decompress(raw, f.size)
        except lzma.LZMAError as exc:
            raise Bad(f"corrupt stream: {exc}") from None
    if len(out) != f.size:
        raise Bad(f"folder unpacks to {len(out)} bytes, header says {f.size}")
    return out


def _header(ctx: ScanContext, blob: Blob) -> tuple[bytes, list[Finding]]:
    sig = blob.read_at(0, 32)
    if len(sig) < 32 or not sig.startswith(MAGIC):
        raise Bad("file shorter than the 7z signature header")
    problems = []
    if zlib.crc32(sig[12:32]) != int.from_bytes(sig[8:12], "little"):
        problems.append(ARCHIVE_INTEGRITY.finding(blob.name, "start header CRC mismatch"))
    offset = int.from_bytes(sig[12:20], "little")
    size = int.from_bytes(sig[20:28], "little")
    if size > MAX_HEADER:
        raise LimitHit("max_7z_header_bytes", MAX_HEADER, size)
    data = blob.read_at(32 + offset, size)
    if len(data) != size:
        raise Bad("next header runs past the end of the file")
    if zlib.crc32(data) != int.from_bytes(sig[28:32], "little"):
        problems.append(ARCHIVE_INTEGRITY.finding(blob.name, "header CRC mismatch"))
    b = _Buf(data)
    if data[:1] == b"\x17":  # encoded header: one folder holding the real header
        b.byte()
        pos, sizes, folders = _streams_info(b)
        if len(folders) != 1:
            raise Unsupported("encoded header in several folders")
        data = _decode(ctx, blob, 32 + pos, sizes[0], folders[0])
    return data, problems


def analyze_7z(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Policy refusal, then each member's own findings (see the module docstring)."""
    out = [SEVENZIP_NOT_ALLOWED.finding(blob.name, "7z archive")]
    opened = False  # a member reached the analyzers
    try:
        data, problems = _header(ctx, blob)
        out += problems
        b = _Buf(data)
        if b.byte() != 0x01:
            raise Bad("header does not start with kHeader")
        pos, sizes, folders = 0, list[int](), list[_Folder]()
        names, empty = list[str](), list[bool]()
        while (prop := b.byte()) != 0:
            if prop == 0x04:
                pos, sizes, folders = _streams_info(b)
            elif prop == 0x05:
                n = _count(b.number(), "file", ctx.limits.max_archive_members)
                names, empty = _names(b, n)
            else:
                raise Unsupported(f"header property {prop:#x} (archive properties or "
                                  "additional streams)")
        files = [name for name, e in zip(names, empty, strict=False) if not e]
        streams = [(fi, s) for fi, f in enumerate(folders) for s in f.streams]
        if len(files) != len(streams):
            raise Bad(f"{len(files)} files with data but {len(streams)} streams")
        for name in names:
            why = escapes(name.replace("\\", "/"))
            if why:
                out.append(ARCHIVE_TRAVERSAL.finding(f"{blob.name}!{name}", why, name[:200]))
        at, member = 32 + pos, 0
        for fi, f in enumerate(folders):
            ctx.check_deadline()
            unpacked = _decode(ctx, blob, at, sizes[fi], f)
            at += sizes[fi]
            cut = 0
            for size in f.streams:
                opened = True
                name = files[member]
                member += 1
                out += ctx.analyze(BytesBlob(f"{blob.name}!{name}", unpacked[cut: cut + size]))
                cut += size
    except Unsupported as exc:
        out.append(ARCHIVE_UNSUPPORTED.finding(blob.name, f"7z feature not supported: {exc}",
                                               evidence="7z"))
        out += _salvaged(ctx, blob, opened)
    except Bad as exc:
        out.append(ARCHIVE_MALFORMED.finding(blob.name, f"7z archive cannot be read: {exc}"))
        out += _salvaged(ctx, blob, opened)
    except LimitHit as hit:
        out.append(hit.finding(blob.name))
    return out


def _salvaged(ctx: ScanContext, blob: Blob, opened: bool) -> list[Finding]:
    """When no member could be reached, what the pack streams hold anyway (they start at
    byte 32 and end where the start header puts the next header, or at the end of the
    file): an extractor reads them without the header (``scanner.formats.salvage``)."""
    if opened:
        return []
    sig = blob.read_at(0, 32)
    offset = int.from_bytes(sig[12:20], "little") if len(sig) == 32 else blob.size
    end = 32 + offset if 0 < offset <= blob.size - 32 else blob.size
    try:
        return salvage(ctx, blob, 32, end)
    except LimitHit as hit:
        return [hit.finding(blob.name)]


SEVENZIP = Format("7z")
SPECS = (FormatSpec(SEVENZIP, analyze_7z, order=20, magic=(MAGIC,)),)
