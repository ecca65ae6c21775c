"""Content-addressed memo of per-file analyses, for fleets that hold the same file many
times (copies of a model, shared tokenizers and configs).

A file's analysis depends only on its bytes, its base name (sniffing tie-breaks, names
such as ``keras_metadata.pb``) and the limits, so a small file (``MAX_BYTES``) is keyed
by (base name, limits, SHA-256 digest; OpenSSL's, with the CPU's SHA instructions where
there are any: 2-3x BLAKE2b's speed here). A hit replays the findings under the new path,
the ``auto_map`` references it recorded and the decompressed bytes it charged. Results
holding ``scanner.limit_exceeded`` or ``scanner.internal_error`` (deadline, crashes)
are never stored. Per process; ``MAX_ENTRIES`` entries, oldest dropped first. A file with
several hard links is also keyed by its inode (any size), so its other names are not read
again.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

from scanner.core.context import Limits, ScanContext
from scanner.core.model import Blob, BytesBlob, Finding
from scanner.core.spec import Format
from scanner.scan.dispatch import analyze_blob

MAX_BYTES = 1 << 20
MAX_ENTRIES = 8192
_NEVER_STORED = frozenset({"scanner.limit_exceeded", "scanner.internal_error"})


class _Result(NamedTuple):  # a NamedTuple: created at import for a fraction of a dataclass
    name: str  # the path the findings were produced under
    fmt: Format | None
    findings: tuple[Finding, ...]
    auto_map: tuple[str, ...]
    decompressed: int


_Key = tuple[str, int, object]  # (base name, limits token, content digest or inode identity)
_MEMO: dict[_Key, _Result] = {}
_INODES: dict[_Key, _Result] = {}  # hard-linked files by inode (analyze_file)
_TOKENS: dict[Limits, int] = {}  # equal limits -> one small int (hashing Limits is Python code)
_last: tuple[Limits | None, int] = (None, 0)  # the limits met last (held: ``is`` is safe)


def _token(limits: Limits) -> int:
    global _last
    if limits is _last[0]:
        return _last[1]
    token = _TOKENS.setdefault(limits, len(_TOKENS))
    _last = (limits, token)
    return token


def _base(name: str) -> str:
    return name[name.rfind("/") + 1:]


def _repath(f: Finding, old: str, new: str) -> Finding:
    path = f.path
    if path == old:
        return f.moved(new)
    if path.startswith((old + "!", old + "#")):
        return f.moved(new + path[len(old):])
    return f


def _replay(ctx: ScanContext, hit: _Result, name: str) -> list[Finding]:
    if hit.auto_map:
        ctx.auto_map.extend((name, ref) for ref in hit.auto_map)
    if hit.decompressed:
        ctx.charge_decompressed(hit.decompressed)
    return [_repath(f, hit.name, name) for f in hit.findings]


def _store(memo: dict[_Key, _Result], key: _Key, ctx: ScanContext, marks: tuple[int, int],
           name: str, fmt: Format | None, findings: list[Finding]) -> None:
    if any(f.rule_id in _NEVER_STORED for f in findings):
        return
    if len(memo) >= MAX_ENTRIES:
        memo.pop(next(iter(memo)))
    refs = tuple(ref for path, ref in ctx.auto_map[marks[0]:] if path == name)
    memo[key] = _Result(name, fmt, tuple(findings), refs, ctx.decompressed - marks[1])


def analyze_linked(ctx: ScanContext, blob: Blob, sniff: object,
                   inode: tuple[int, ...]) -> tuple[Format | None, list[Finding], Blob]:
    """``analyze_file`` for a file with more than one hard link, ``inode`` its (st_dev,
    st_ino, st_size, st_mtime_ns, st_ctime_ns): another name of the same inode met later
    in the scan (any size) replays this analysis without reading the bytes again (a
    changed file has another ctime). Hard links are refused anyway (``fs.hardlink``,
    policy)."""
    key = (_base(blob.name), _token(ctx.limits), inode)
    hit = _INODES.get(key)
    if hit is not None:
        return hit.fmt, _replay(ctx, hit, blob.name), blob
    marks = (len(ctx.auto_map), ctx.decompressed)
    fmt, findings, used = analyze_file(ctx, blob, sniff)
    _store(_INODES, key, ctx, marks, blob.name, fmt, findings)
    return fmt, findings, used


def analyze_file(ctx: ScanContext, blob: Blob, sniff: object) -> tuple[Format | None,
                                                                        list[Finding], Blob]:
    """(format, findings, blob to use for name checks) for one regular file; ``sniff`` is
    the caller's quiet sniffer (``Blob -> Format | None``). A file of at most
    ``MAX_BYTES`` is read once and memoised by content."""
    sniffer = sniff  # typed loosely to avoid importing api here
    size = blob.size
    if size > MAX_BYTES or size == 0:
        fmt = sniffer(blob)  # type: ignore[operator]
        return fmt, analyze_blob(ctx, blob, fmt), blob
    data = blob.read_at(0, size)
    name = blob.name
    mem = BytesBlob(name, data)
    if len(data) != size:  # file changed while scanned: no memo
        fmt = sniffer(mem)  # type: ignore[operator]
        return fmt, analyze_blob(ctx, mem, fmt), mem
    key = (_base(name), _token(ctx.limits), hashlib.sha256(data).digest())
    hit = _MEMO.get(key)
    if hit is not None:
        return hit.fmt, _replay(ctx, hit, name), mem
    marks = (len(ctx.auto_map), ctx.decompressed)
    fmt = sniffer(mem)  # type: ignore[operator]
    findings = analyze_blob(ctx, mem, fmt)
    _store(_MEMO, key, ctx, marks, name, fmt, findings)
    return fmt, findings, mem
