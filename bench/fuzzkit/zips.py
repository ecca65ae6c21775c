"""Zip inputs, laid out as the loaders that read zips expect: ``torch.save`` archives
(``archive/data.pkl`` + ``data/N`` storages + ``version``/``byteorder``), joblib/npz-like
archives, nested archives. Members vary in name (paths that escape, absolute, backslashes,
duplicates, unicode, empty), compression (stored, deflate, bzip2, lzma) and content (the
malicious and benign pickle seeds, random bytes, a nested zip). Then zip-aware mutations
(cut inside the central directory or end record, signatures inserted, CRCs and sizes
broken) and byte mutations. Built with the stdlib ``zipfile`` writer.
"""

from __future__ import annotations

import io
import warnings
import zipfile

from . import pickles
from .draw import Draw
from .mutate import mutate
from .oracle import Case

NAMES = ("pytorch_model.bin", "model.pt", "weights.pth", "last.ckpt", "archive.zip",
         "arrays.npz", "handler.mar")
MEMBER_NAMES = ("archive/data.pkl", "archive/version", "archive/byteorder", "archive/data/0",
                "data.pkl", "../escape.pkl", "/abs/data.pkl", "a\\..\\b.pkl", "x/./data.pkl",
                "", "é/data.pkl", "archive/.data/serialization_id", "nested.zip",
                "model.pt", "arr.npy", "a" * 200)
COMPRESSION = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)
TOKENS = (b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06", b"PK\x06\x06", b"PK\x06\x07",
          b"PK\x07\x08", b"\xff\xff\xff\xff", b"\x00\x00")


def _content(draw: Draw, depth: int) -> tuple[bytes, bool]:
    """(member bytes, whether they are a malicious pickle)."""
    kind = draw.integer(0, 5)
    if kind == 0:
        return draw.choice(pickles.MALICIOUS)[1], True
    if kind == 1:
        return draw.choice(pickles.BENIGN_SEEDS)[1], False
    if kind == 2 and depth < 2:
        inner, bad = _archive(draw, depth + 1)
        return inner, bad
    if kind == 3:
        return b"3", False
    return draw.blob(64), False


def _archive(draw: Draw, depth: int = 0) -> tuple[bytes, bool]:
    out = io.BytesIO()
    malicious = False
    torch_layout = draw.chance(0.6)
    with warnings.catch_warnings(), zipfile.ZipFile(out, "w") as archive:
        warnings.simplefilter("ignore")  # duplicate member names are wanted here
        if torch_layout:
            pkl, bad = (draw.choice(pickles.MALICIOUS)[1], True) if draw.chance(0.5) else \
                (draw.choice(pickles.BENIGN_SEEDS)[1], False)
            malicious |= bad
            archive.writestr(zipfile.ZipInfo("archive/data.pkl"), pkl)
            archive.writestr("archive/version", b"3\n")
            archive.writestr("archive/byteorder", b"little")
        for _ in range(draw.integer(0 if torch_layout else 1, 4)):
            info = zipfile.ZipInfo(draw.choice(MEMBER_NAMES))
            info.compress_type = draw.choice(COMPRESSION)
            content, bad = _content(draw, depth)
            malicious |= bad
            archive.writestr(info, content)
    return out.getvalue(), malicious


def _cut_directory(draw: Draw, data: bytes) -> bytes:
    """Cut or damage the central directory / end record."""
    end = data.rfind(b"PK\x05\x06")
    central = data.find(b"PK\x01\x02")
    if end < 0 or central < 0:
        return data
    kind = draw.integer(0, 3)
    if kind == 0:
        return data[: draw.integer(central, len(data) - 1)]
    if kind == 1:  # entry count / directory size / offset fields set to odd values
        field = end + draw.choice((8, 10, 12, 16))
        width = 2 if field < end + 12 else 4
        value = draw.choice((0, 1, 0xFFFF, 0xFFFFFFFF, len(data)))
        value %= 1 << (8 * width)
        return data[:field] + value.to_bytes(width, "little") + data[field + width:]
    if kind == 2:  # drop the central directory, keep the end record
        return data[:central] + data[end:]
    return data[:end] + data[end:end + 20] + b"\x05\x00" + b"junk!"  # comment longer than said


# (offset from the signature, width) of the fields a reader trusts: flags, method, CRC,
# sizes, name/extra/comment lengths, disk number, external attributes, local offset
CENTRAL_FIELDS = ((8, 2), (10, 2), (16, 4), (20, 4), (24, 4), (28, 2), (30, 2), (32, 2),
                  (34, 2), (38, 4), (42, 4))
LOCAL_FIELDS = ((6, 2), (8, 2), (14, 4), (18, 4), (22, 4), (26, 2), (28, 2))
FIELD_VALUES = (0, 1, 8, 9, 12, 14, 93, 99, 0x0800, 0x0001, 0x0008, 0x0041, 0x7FFF, 0xFFFF,
                0xFFFFFFFF, 0x7FFFFFFF, 30, 46)


def _set_field(draw: Draw, data: bytes) -> bytes:
    """One header field of one local or central entry set to an interesting value (a
    flag such as encrypted or data descriptor, an unknown method, ZIP64 markers, a size
    or offset that points elsewhere)."""
    central = draw.chance(0.5)
    sig, fields = (b"PK\x01\x02", CENTRAL_FIELDS) if central else (b"PK\x03\x04", LOCAL_FIELDS)
    starts: list[int] = []
    at = data.find(sig)
    while at >= 0 and len(starts) < 64:
        starts.append(at)
        at = data.find(sig, at + 1)
    if not starts:
        return data
    at = draw.choice(starts)
    offset, width = draw.choice(fields)
    value = draw.choice(FIELD_VALUES) % (1 << (8 * width))
    field = at + offset
    return data[:field] + value.to_bytes(width, "little") + data[field + width:]


def generate(draw: Draw) -> Case:
    data, malicious = _archive(draw)
    if draw.chance(0.3):
        data = _cut_directory(draw, data)
    for _ in range(draw.integer(0, 2)):
        data = _set_field(draw, data)
    if draw.chance(0.6):
        data = mutate(draw, data, TOKENS)
    return Case(draw.choice(NAMES), data, "mal:zip" if malicious else "ok:zip")
