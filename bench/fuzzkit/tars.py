"""Tar inputs, laid out like NeMo's ``.nemo`` archives (``model_config.yaml`` +
``model_weights.ckpt``) and generic model tarballs: members vary in name (escaping paths,
absolute, long GNU/PAX names, duplicates), type (file, directory, symlink, hard link,
FIFO, device), format (ustar, GNU, PAX), compression (none, gzip, bzip2, xz), content
(pickle seeds, a torch zip, Hydra configs with benign or dangerous ``_target_``, a nested
tar), torch legacy tar checkpoints (``storages``/``tensors``/``pickle`` members, named
``pytorch_model.bin``). Then header-aware mutations (checksum, size and type fields broken,
or respelled as tarfile still reads them: ``0o`` checksums, empty v7 names) and byte
mutations.
Built with the stdlib ``tarfile`` writer.
"""

from __future__ import annotations

import io
import tarfile

from . import pickles, yamls, zips
from .draw import Draw
from .mutate import mutate
from .oracle import Case

NAMES = ("model.nemo", "model.tar", "model.tar.gz", "checkpoint.tgz", "pytorch_model.bin")
MEMBER_NAMES = ("model_config.yaml", "model_weights.ckpt", "./model_config.yaml",
                "./model_weights.ckpt", "../escape.ckpt", "/abs/model_weights.ckpt",
                "tokenizer.model", "a\\..\\b.yaml", "x" * 120 + "/model_weights.ckpt",
                "nested.tar", "vocab.txt", "é.yaml", "", "storages", "tensors", "pickle")
# torch.load's legacy tar checkpoint: these members are unpickled whatever their bytes.
TORCH_MEMBERS = ("storages", "tensors", "pickle")
# Spellings of an octal number that tarfile's nti reads (int(text.strip(), 8)).
SPELLINGS = (b"%o", b"0o%o", b"0O%o", b"+%o", b" %o ", b"\x1c%o", b"0o_%o", b"%07o\x00")
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
        first = draw.choice((["model_config.yaml", "model_weights.ckpt"],
                             list(TORCH_MEMBERS)))
        names = list(first) if draw.chance(0.6) else []
        names += [draw.choice(MEMBER_NAMES) for _ in range(draw.integer(0, 3))]
        for name in names:
            info = tarfile.TarInfo(name)
            info.type = tarfile.REGTYPE if name in ("model_config.yaml", "model_weights.ckpt",
                                                    *TORCH_MEMBERS) else draw.choice(TYPES)
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


def _respell(draw: Draw, data: bytes) -> bytes:
    """Rewrite the first header as tarfile still reads it: the checksum (and maybe the
    size) in another spelling ``int(x, 8)`` accepts, or a v7 header with an empty name and
    no magic (the red team's M3/M4 shapes)."""
    if len(data) < 512:
        return data
    header = bytearray(data[:512])
    if draw.chance(0.3):
        header[0:100] = bytes(100)
        header[257:265] = bytes(8)
    if draw.chance(0.3):
        size = tarfile.nti(bytes(header[124:136]))  # type: ignore[attr-defined]
        text = draw.choice(SPELLINGS) % size
        if len(text) <= 12:
            header[124:136] = text.ljust(12, b"\x00")
    header[148:156] = b" " * 8
    text = draw.choice(SPELLINGS) % sum(header)
    if len(text) <= 8:
        header[148:156] = text.ljust(8, b"\x00")
    return bytes(header) + data[512:]


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
    elif not compress and draw.chance(0.3):
        data = _respell(draw, data)
    if draw.chance(0.5):
        data = mutate(draw, data, TOKENS)
    return Case(name, data, "gen:tar")
