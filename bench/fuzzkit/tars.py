"""Tar inputs, laid out like NeMo's ``.nemo`` archives (``model_config.yaml`` +
``model_weights.ckpt``) and generic model tarballs: members vary in name (escaping paths,
absolute, long GNU/PAX names, duplicates), type (file, directory, symlink, hard link,
FIFO, device), format (ustar, GNU, PAX), compression (none, gzip, bzip2, xz), content
(pickle seeds, a torch zip, Hydra configs with benign or dangerous ``_target_``, a nested
tar). Then header-aware mutations (checksum, size and type fields) and byte mutations.
Built with the stdlib ``tarfile`` writer.
"""

from __future__ import annotations

import io
import tarfile

from . import pickles, yamls, zips
from .draw import Draw
from .mutate import mutate
from .oracle import Case

NAMES = ("model.nemo", "model.tar", "model.tar.gz", "checkpoint.tgz")
MEMBER_NAMES = ("model_config.yaml", "model_weights.ckpt", "./model_config.yaml",
                "./model_weights.ckpt", "../escape.ckpt", "/abs/model_weights.ckpt",
                "tokenizer.model", "a\\..\\b.yaml", "x" * 120 + "/model_weights.ckpt",
                "nested.tar", "vocab.txt", "é.yaml", "")
FORMATS = (tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT)
TYPES = (tarfile.REGTYPE, tarfile.REGTYPE, tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE,
         tarfile.LNKTYPE, tarfile.FIFOTYPE, tarfile.CHRTYPE)
TOKENS = (b"ustar\x00", b"ustar  \x00", b"0000644\x00", b"\x00" * 512, b"././@LongLink",
          b"PaxHeader", b"\x1f\x8b", b"7", b"9999999999\x00")


def _content(draw: Draw, name: str, depth: int) -> bytes:
    if name.endswith(".yaml"):
        return yamls.generate_text(draw)
    kind = draw.integer(0, 4)
    if kind == 0:
        return draw.choice(pickles.MALICIOUS)[1]
    if kind == 1:
        return draw.choice(pickles.BENIGN_SEEDS)[1]
    if kind == 2:
        return zips._archive(draw, 1)[0]
    if kind == 3 and depth < 1:
        return _archive(draw, depth + 1, "")
    return draw.blob(64)


def _archive(draw: Draw, depth: int, mode: str) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=f"w{mode}",  # type: ignore[call-overload]
                      format=draw.choice(FORMATS)) as archive:
        names = ["model_config.yaml", "model_weights.ckpt"] if draw.chance(0.6) else []
        names += [draw.choice(MEMBER_NAMES) for _ in range(draw.integer(0, 3))]
        for name in names:
            info = tarfile.TarInfo(name)
            info.type = tarfile.REGTYPE if name in ("model_config.yaml",
                                                    "model_weights.ckpt") else draw.choice(TYPES)
            if info.type in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                info.linkname = draw.choice(("model_weights.ckpt", "../../etc/passwd", "/",
                                             "x" * 150))
            content = _content(draw, name, depth) if info.type == tarfile.REGTYPE else b""
            info.size = len(content)
            try:
                archive.addfile(info, io.BytesIO(content) if content else None)
            except ValueError:  # a name or link this header format cannot hold
                continue
    return out.getvalue()


def _break_header(draw: Draw, data: bytes) -> bytes:
    """Damage one header field of the first member: checksum, size, type, magic."""
    if len(data) < 512:
        return data
    field, width = draw.choice(((148, 8), (124, 12), (156, 1), (257, 6), (345, 155), (0, 100)))
    value = draw.blob(width).ljust(width, b"\x00")[:width]
    return data[:field] + value + data[field + width:]


def generate(draw: Draw) -> Case:
    name = draw.choice(NAMES)
    compress = {"model.tar.gz": ":gz", "checkpoint.tgz": ":gz"}.get(name, "")
    if name == "model.nemo":
        compress = draw.choice(("", ":gz"))
    if draw.chance(0.05):
        compress = draw.choice((":bz2", ":xz"))
    data = _archive(draw, 0, compress)
    if not compress and draw.chance(0.3):
        data = _break_header(draw, data)
    if draw.chance(0.5):
        data = mutate(draw, data, TOKENS)
    return Case(name, data, "gen:tar")
