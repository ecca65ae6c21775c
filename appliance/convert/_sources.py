"""Where a checkpoint's pickle and raw storages are: torch zip files, legacy files, and
sharded folders. Reads structure only (zip directory, headers, counts); tensor bytes are
read later, by offset, by ``appliance.convert._write``.

Layouts (torch ``serialization.py``):

- zip (``torch.save`` >= 1.6): ``<top>/data.pkl`` (the pickle, storages as persistent
  ids), ``<top>/data/<key>`` (one stored member per storage, exactly ``numel * itemsize``
  bytes), ``<top>/byteorder`` (``little`` / ``big``; absent: little). Read with the
  scanner's tolerant zip reader (the one that sees members the way torch's reader does).
- legacy (pre-1.6, ``_legacy_save``): five pickles (magic number, protocol version,
  sys_info, the main pickle, the storage-key list), then for each key in that list an
  8-byte element count and the raw storage. Torch >= 0.4 writes counts and data
  little-endian (``THPStorage_writeFileRaw``); earlier writers used the machine's order,
  which sys_info's ``little_endian`` records: a count that reads right only big-endian,
  from a writer that says it was big-endian, makes that storage big-endian.
- folder: ``pytorch_model.bin.index.json`` (``weight_map``: tensor name -> shard file
  in the folder) and its shards, each a zip or legacy file; or one ``pytorch_model.bin``.

Every count and size is checked against the file before it is used; a mismatch is a
``convert.bad_storage`` finding or a :class:`ConvertError`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from appliance.convert._errors import BAD_STORAGE, ConvertError, refused
from appliance.convert._symbolic import TensorRef, interpret
from scanner.readers import (
    TORCH_LEGACY_MAGIC,
    FileBlob,
    Finding,
    JSONProblem,
    ScanContext,
    Seq,
    SliceBlob,
    ZipUnreadable,
    loads_strict,
    read_zip,
)
from scanner.readers import PickleMachine as Machine

INDEX_NAME = "pytorch_model.bin.index.json"
SINGLE_NAMES = ("pytorch_model.bin", "model.pt", "model.pth")
MAX_INDEX_BYTES = 64 << 20
MAX_MEMBERS = 1_000_000


@dataclass(frozen=True)
class Storage:
    """Raw bytes of one storage: ``fd`` at ``offset``, ``nbytes`` long, element order."""

    fd: int
    offset: int
    nbytes: int
    big_endian: bool


@dataclass
class Checkpoint:
    """One checkpoint file: its display name, the pickle's root value, and its storages
    by key (``None`` when the pickle was refused: see ``findings``)."""

    name: str
    size: int
    root: object = None
    storages: dict[str, Storage] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)


def open_file(path: Path, display: str, opened: Callable[[int], None]) -> tuple[int, int]:
    """Open a regular file without following a symlink: (fd, size). ``opened`` gets the
    fd (the caller closes it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ConvertError(f"cannot open {display}: {exc.strerror}", code="convert_io",
                           where=display, fix="pass a readable regular file") from None
    opened(fd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise ConvertError(f"{display} is not a regular file", code="convert_source_invalid",
                           where=display, fix="pass a checkpoint file or a model folder")
    return fd, st.st_size



def read_bounded(path: Path, display: str, limit: int, fix: str) -> bytes:
    """The whole of a small file, opened like every source (:func:`open_file`); larger than
    ``limit`` bytes is ``convert_limit`` (with ``fix``), a file that changes size while it is
    read is ``convert_io``."""
    fds: list[int] = []
    try:
        fd, size = open_file(path, display, fds.append)
        if size > limit:
            raise ConvertError(f"{display} is {size} bytes (limit {limit})",
                               code="convert_limit", where=display, fix=fix)
        data = os.pread(fd, size, 0)
        if len(data) != size:
            raise ConvertError(f"{display} changed while it was read", code="convert_io",
                               where=display, fix="retry when the folder is not being written")
        return data
    finally:
        for fd in fds:
            os.close(fd)

def read_checkpoint(ctx: ScanContext, fd: int, size: int, name: str) -> Checkpoint:
    """The pickle tree and storages of one zip or legacy checkpoint."""
    blob = FileBlob(name, fd, size)
    head = blob.read_at(0, 4)
    if head == b"PK\x03\x04":
        return _read_zip(ctx, blob)
    if blob.read_at(0, len(TORCH_LEGACY_MAGIC)) == TORCH_LEGACY_MAGIC:
        return _read_legacy(ctx, blob)
    raise ConvertError(f"{name} is neither a torch zip checkpoint nor a legacy torch.save "
                       "file", code="convert_source_invalid", where=name,
                       fix="pass a file written by torch.save, or a model folder")


def _bad(cp: Checkpoint, message: str, offset: int | None = None) -> Checkpoint:
    cp.findings.append(BAD_STORAGE.finding(cp.name, message, "storage layout", offset))
    return cp


def _read_zip(ctx: ScanContext, blob: FileBlob) -> Checkpoint:
    cp = Checkpoint(blob.name, blob.size)
    try:
        listing = read_zip(blob, MAX_MEMBERS)
    except ZipUnreadable as exc:
        return _bad(cp, f"zip cannot be read: {exc}")
    entries = [e for e in listing.entries if e.in_central]
    names = [e.name for e in entries]
    pkl = [e for e in entries if e.name.endswith(b"/data.pkl") and e.name.count(b"/") == 1]
    if (listing.truncated or listing.problems or len(pkl) != 1 or len(set(names)) != len(names)
            or any(e.problems or not e.in_central for e in listing.entries)):
        return _bad(cp, "the zip is not a plain torch archive (one <top>/data.pkl, unique "
                    "member names, consistent headers, no hidden members)")
    top = pkl[0].name[: -len(b"/data.pkl")]
    by_name = {e.name: e for e in entries}
    for entry in entries:
        if entry.method != 0 and entry.name.startswith(top + b"/data"):
            raise ConvertError(f"{blob.name}: member {entry.display_name} is compressed "
                               f"(method {entry.method}); torch.save stores members",
                               code="convert_unsupported", where=blob.name,
                               fix="re-save the checkpoint with torch.save")
    big = False
    order = by_name.get(top + b"/byteorder")
    if order is not None and order.data_offset is not None:
        text = blob.read_at(order.data_offset, min(order.comp_size, 16))
        if text not in (b"little", b"big"):
            return _bad(cp, f"byteorder record is {text[:16]!r}, not 'little' or 'big'")
        big = text == b"big"
    entry = pkl[0]
    if entry.data_offset is None:  # pragma: no cover - a member without one has a problem
        return _bad(cp, "data.pkl has no local header")
    pickle_blob = SliceBlob(f"{blob.name}!{entry.display_name}", blob, entry.data_offset,
                            entry.comp_size)
    root, _, findings = interpret(ctx, pickle_blob, 0, legacy=False)
    cp.findings += findings
    cp.root = root
    prefix = top + b"/data/"
    for e in entries:
        if e.name.startswith(prefix) and e.data_offset is not None:
            key = e.name[len(prefix):].decode("utf-8", "replace")
            cp.storages[key] = Storage(blob.fd, e.data_offset, e.comp_size, big)
    return cp


def _literal(ctx: ScanContext, blob: FileBlob, start: int) -> tuple[object, int, list[Finding]]:
    res = Machine(ctx, blob, start, persistent_ids=False).run()
    return res.value, res.end, res.findings


def _read_legacy(ctx: ScanContext, blob: FileBlob) -> Checkpoint:
    cp = Checkpoint(blob.name, blob.size)
    pos = 0
    values: list[object] = []
    for index in range(5):
        if index == 3:
            value, pos, findings = interpret(ctx, blob, pos, legacy=True)
        else:
            value, pos, findings = _literal(ctx, blob, pos)
        cp.findings += findings
        if findings:
            return cp
        values.append(value)
    cp.root = values[3]
    info, keys = values[2], values[4]
    fields = (dict(zip(info.items[0::2], info.items[1::2], strict=False))
              if isinstance(info, Seq) and info.kind == "dict" and info.items else {})
    big_writer = fields.get("little_endian") is False
    items = keys.items if isinstance(keys, Seq) and keys.kind == "list" else None
    if items is None or not all(isinstance(k, str) for k in items):
        return _bad(cp, "the storage-key pickle is not a list of str", pos)
    sizes = _storage_sizes(cp.root)
    for item in items:
        key = str(item)
        head = blob.read_at(pos, 8)
        itemsize = sizes.get(key)
        if len(head) < 8 or itemsize is None:
            return _bad(cp, f"storage {key[:80]!r}: no count in the file, or no persistent "
                        "id names it", pos)
        numel, size = itemsize
        little = int.from_bytes(head, "little", signed=True)
        big = big_writer and little != numel and int.from_bytes(head, "big") == numel
        if little != numel and not big:
            return _bad(cp, f"storage {key[:80]!r} holds {little} elements, its persistent "
                        f"id says {numel}", pos)
        nbytes = numel * size
        if pos + 8 + nbytes > blob.size:
            return _bad(cp, f"storage {key[:80]!r} runs past the end of the file", pos)
        cp.storages[key] = Storage(blob.fd, pos + 8, nbytes, big)
        pos += 8 + nbytes
    if pos != blob.size:
        return _bad(cp, f"{blob.size - pos} bytes after the last storage", pos)
    return cp


def _storage_sizes(root: object) -> dict[str, tuple[int, int]]:
    """key -> (numel, itemsize) of every storage the tree's tensors reference."""
    out: dict[str, tuple[int, int]] = {}
    stack, seen = [root], set()
    while stack:
        value = stack.pop()
        if isinstance(value, TensorRef):
            out.setdefault(value.storage.key, (value.storage.numel, value.storage.dtype.size))
        elif isinstance(value, Seq) and value.items is not None and id(value) not in seen:
            seen.add(id(value))
            stack.extend(value.items)
    return out


@dataclass(frozen=True)
class Shards:
    """A sharded folder: shard file names in index order, and the index's weight map."""

    files: list[str]
    weight_map: dict[str, str]


def read_index(folder: Path) -> Shards | None:
    """The folder's ``pytorch_model.bin.index.json`` (``None`` when absent)."""
    path = folder / INDEX_NAME
    if not path.exists() and not path.is_symlink():
        return None
    data = read_bounded(path, INDEX_NAME, MAX_INDEX_BYTES,
                        "an index of this size is not a model index")
    try:
        doc = loads_strict(data)
    except JSONProblem as exc:
        raise ConvertError(f"{INDEX_NAME} is not valid JSON: {exc}", where=INDEX_NAME,
                           fix="regenerate the index") from None
    wmap = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(wmap, dict) or not wmap or not all(
            isinstance(v, str) and _plain_name(v) for v in wmap.values()):
        raise ConvertError(f"{INDEX_NAME}: weight_map is not a map of tensor names to shard "
                           "files in this folder", where=f"{INDEX_NAME}#/weight_map",
                           fix="each value must be a file name in the folder (no '/')")
    files = list(dict.fromkeys(wmap.values()))
    return Shards(files, wmap)


def _plain_name(name: str) -> bool:
    return bool(name) and "/" not in name and "\\" not in name and name not in (".", "..") \
        and name.isprintable()


def require_consistent(refusals: list[Finding], source: str) -> None:
    """Raise the refusal when there are findings."""
    if refusals:
        raise refused(source, refusals)
