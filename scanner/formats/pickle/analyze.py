"""Pickle analyzer: raw pickle streams, legacy (pre-1.6) ``torch.save`` files, and single
pickles embedded in other formats (npy object arrays, joblib).

Nothing is unpickled: ``scanner.formats.pickle.vm`` interprets the opcodes symbolically and
classifies every global against ``scanner.core.allowlist`` (default deny). Every pickle gets
at least ``format.pickle_not_allowed`` (pickle weights are never served); any global
outside the allowlist, any call on something else than an allowlisted global, BUILD on
an imported global and any EXT opcode make it malicious. picklescan gives a second
opinion that can only add findings (``scanner.formats.pickle.second``).

Sources: CPython ``Lib/pickle.py`` / ``Lib/pickletools.py`` (opcodes, protocols 0-5);
torch ``serialization.py`` (legacy layout, persistent ids); GHSA-97f8-7cmv-76j2 (legacy
magic number computed by eval); mmaitre314/picklescan#9 (several pickles per file),
#14 (memo tracked only through MEMOIZE); protectai/modelscan#330 (BUILD on allowlisted
module objects).
"""

from __future__ import annotations

from dataclasses import replace

from scanner.core.blobview import SliceBlob
from scanner.core.context import LimitHit, ScanContext
from scanner.core.model import Blob, BytesBlob, Finding, Verdict
from scanner.formats.pickle import rules as R
from scanner.formats.pickle.second import second_opinion
from scanner.formats.pickle.sniff import TORCH_MAGIC_NUMBER
from scanner.formats.pickle.values import Seq, describe
from scanner.formats.pickle.vm import Machine, NestedHook, StreamResult

__all__ = ["analyze_pickle", "analyze_pickle_at", "analyze_torch_legacy"]

PROTOCOL_VERSION = 1001


def analyze_pickle(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Analyze a blob that is one or more consecutive raw pickle streams (protocols 0-5).

    Every stream in the file is interpreted (bytes after a STOP that start a new pickle
    are a second pickle: some loaders read several). Torch storage persistent ids are
    accepted (a ``data.pkl`` of a torch zip is a raw pickle). A first pickle that is the
    literal torch magic number means a legacy ``torch.save`` file: handed over to
    ``analyze_torch_legacy`` so its raw storage bytes are not read as pickles.

    Returns findings: at least ``format.pickle_not_allowed``. Never raises for bad input
    (limit hits, truncation and invalid opcodes are findings, and dangerous globals seen
    before them are kept).
    """
    findings = [R.PICKLE_NOT_ALLOWED.finding(
        blob.name, "raw pickle stream: pickle-based weights are never served", offset=0)]
    offset, seen = 0, {}
    streams: list[tuple[int, list[Finding]]] = []  # (start offset, findings) per stream
    while True:
        res = _stream(ctx, blob, offset, persistent_ids=True)
        if offset == 0 and _is_legacy_magic(res):  # raw storages follow: not pickles
            return analyze_torch_legacy(ctx, blob)
        if offset > 0 and res.stopped_at_first_op:
            head = blob.read_at(offset, min(16, blob.size - offset))
            findings.append(R.TRAILING_DATA.finding(
                blob.name, f"{blob.size - offset} bytes after the STOP at offset {offset - 1} "
                "are not a pickle", evidence=head.hex(), offset=offset))
            break
        streams.append((offset, res.findings))
        seen.update(res.seen)
        if not res.ok or res.end >= blob.size:
            break
        if len(streams) % 1024 == 0:
            ctx.check_deadline()
        offset = res.end
    end = res.end if not res.stopped_at_first_op else offset
    findings[1:1] = labelled(streams)
    return _with_second_opinion(findings, blob, 0, end, seen)


def labelled(streams: list[tuple[int, list[Finding]]]) -> list[Finding]:
    """The findings of consecutive pickle streams; when there are several, each message
    says which stream (1-based index of all, start offset) it comes from: loaders that
    call ``load()`` again (legacy torch, joblib, custom readers) run every one."""
    if len(streams) == 1:
        return streams[0][1]
    out: list[Finding] = []
    for index, (start, found) in enumerate(streams, 1):
        where = f"pickle stream {index} of {len(streams)} (starts at offset {start}): "
        out += [replace(f, message=where + f.message) for f in found]
    return out


def _with_second_opinion(findings: list[Finding], blob: Blob, start: int, end: int,
                         seen: dict[str, bool]) -> list[Finding]:
    """Add picklescan's view, unless our verdict is already the worst (it cannot help)."""
    if any(f.verdict is Verdict.MALICIOUS for f in findings):
        return findings
    return findings + second_opinion(blob, start, end, seen)


def analyze_pickle_at(
    ctx: ScanContext, blob: Blob, offset: int, *, persistent_ids: bool = False
) -> tuple[list[Finding], int]:
    """Analyze the single pickle that starts at byte ``offset`` of ``blob``.

    For formats that embed a pickle (npy/npz object arrays, joblib). Returns (findings,
    end offset just after its STOP, or where interpretation stopped). Does not add
    ``format.pickle_not_allowed``: the caller decides the policy of its format.
    ``persistent_ids``: whether the embedding loader resolves PERSID/BINPERSID as torch
    storages (``False``: any persistent id is ``pickle.persistent_id``).
    """
    res = _stream(ctx, blob, offset, persistent_ids=persistent_ids)
    return _with_second_opinion(res.findings, blob, offset, res.end, res.seen), res.end


def analyze_torch_legacy(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Analyze a legacy (pre-1.6, non-zip) ``torch.save`` file.

    Layout (torch ``_legacy_save``): magic-number pickle, protocol-version pickle,
    sys_info pickle, the main pickle (storages as persistent ids), the storage-keys
    pickle, then raw storage bytes (per key: int64 element count, data), which are
    checked for size but never parsed as pickles. All five pickles are interpreted: the
    loader unpickles the header pickles too (GHSA-97f8-7cmv-76j2: a magic number
    computed by ``eval``). Header values must be the literals torch writes.
    """
    findings = [R.PICKLE_NOT_ALLOWED.finding(
        blob.name, "legacy torch.save checkpoint (pickle): pickle-based weights are never "
        "served", offset=0)]
    results: list[StreamResult] = []
    offset, seen = 0, {}
    stages = ("magic number", "protocol version", "sys_info", "main", "storage keys")
    for index in range(len(stages)):
        res = _stream(ctx, blob, offset, persistent_ids=index == 3)
        findings += res.findings
        seen.update(res.seen)
        offset = res.end
        if not res.ok:
            break
        results.append(res)
    findings = _with_second_opinion(findings, blob, 0, offset, seen)
    findings += _legacy_header(blob.name, results)
    if len(results) == len(stages) and not any(f.verdict > Verdict.POLICY for f in findings):
        try:
            findings += _legacy_layout(ctx, blob, offset, results[3], results[4], results[2])
        except LimitHit as hit:
            findings.append(hit.finding(blob.name))
    return findings


# -- internals -------------------------------------------------------------------------


def _stream(ctx: ScanContext, blob: Blob, offset: int, *, persistent_ids: bool) -> StreamResult:
    """Interpret one stream; when its frames make CPython's readers disagree, interpret
    it a second time the way the old C unpickler reads a file (``drop_frames``) and add
    that reading's findings: both are what some loader runs (fickling#317)."""
    res = Machine(ctx, blob, offset, persistent_ids=persistent_ids,
                  nested=_nested_hook(ctx, blob)).run()
    if res.straddled is None:
        return res
    res.findings.append(R.FRAME_DIVERGENCE.finding(
        blob.name, f"an opcode crosses the end of its FRAME at offset {res.straddled}: "
        "CPython's readers disagree on what this pickle runs (file-object loads skip the "
        "rest of the frame); both readings are analysed", evidence=f"frame straddle at "
        f"{res.straddled}", offset=res.straddled))
    other = Machine(ctx, blob, offset, persistent_ids=persistent_ids,
                    nested=_nested_hook(ctx, blob), drop_frames=True).run()
    have = {(f.rule_id, f.evidence) for f in res.findings}
    for finding in other.findings:
        if finding.verdict >= Verdict.MALFORMED and (finding.rule_id, finding.evidence) not in have:
            res.findings.append(finding)
    res.seen.update(other.seen)
    return res


def _nested_hook(ctx: ScanContext, blob: Blob) -> NestedHook:
    """Analyze a string/bytes constant that looks like a pickle, one nesting level down.

    Reported only when it is a whole pickle (reaches STOP): ``pickle.nested_pickle`` plus
    its malicious findings; limit hits are always kept (fail closed). Its format errors
    are dropped, and so is a constant that does not parse to STOP: it is data until
    something loads it, and loading it needs a call the outer pickle makes (which is
    judged there), so random bytes must not turn into findings."""

    def hook(offset: int, length: int, data: bytes | None) -> list[Finding]:
        name = f"{blob.name}#nested@{offset}"
        if ctx.depth + 1 > ctx.limits.max_nesting_depth:
            return [LimitHit("max_nesting_depth", ctx.limits.max_nesting_depth).finding(name)]
        sub: Blob = BytesBlob(name, data) if data is not None else SliceBlob(
            name, blob, offset, length)
        ctx.depth += 1
        try:
            res = _stream(ctx, sub, 0, persistent_ids=False)
        finally:
            ctx.depth -= 1
        kept = [f for f in res.findings
                if f.verdict is Verdict.MALICIOUS or f.rule_id == "scanner.limit_exceeded"]
        if res.limited:
            return kept
        if not res.ok:
            return []
        note = R.NESTED_PICKLE.finding(
            blob.name, f"{length}-byte constant at offset {offset} is a pickle "
            f"({len(kept)} finding(s) inside)", evidence=name, offset=offset)
        return [note, *kept]

    return hook


def _literal(res: StreamResult) -> bool:
    return res.ok and res.n_globals == 0 and res.n_calls == 0 and res.n_pids == 0


def _is_legacy_magic(res: StreamResult) -> bool:
    return _literal(res) and type(res.value) is int and res.value == TORCH_MAGIC_NUMBER


def _legacy_header(path: str, results: list[StreamResult]) -> list[Finding]:
    out: list[Finding] = []
    if results:
        magic = results[0]
        if not _is_legacy_magic(magic):
            out.append(R.TORCH_LEGACY_HEADER.finding(
                path, "the magic-number pickle is not the literal torch magic number "
                f"(it yields {describe(magic.value)})", evidence="magic number", offset=0))
    if len(results) > 1:
        ver = results[1]
        if not (_literal(ver) and type(ver.value) is int and ver.value == PROTOCOL_VERSION):
            out.append(R.TORCH_LEGACY_HEADER.finding(
                path, f"the protocol-version pickle is not the literal {PROTOCOL_VERSION} "
                f"(it yields {describe(ver.value)})", evidence="protocol version",
                offset=ver.start))
    if len(results) > 2:
        info = results[2]
        if not (_literal(info) and isinstance(info.value, Seq) and info.value.kind == "dict"):
            out.append(R.TORCH_LEGACY_HEADER.finding(
                path, "the sys_info pickle is not a literal dict "
                f"(it yields {describe(info.value)})", evidence="sys_info", offset=info.start))
    return out


def _big_endian_writer(info: StreamResult) -> bool:
    """Whether the sys_info pickle says the writer was big-endian (``little_endian``
    False): torch before 0.4 then wrote storage counts and data in that byte order."""
    value = info.value
    if not (isinstance(value, Seq) and value.kind == "dict" and value.items is not None):
        return False
    fields = dict(zip(value.items[0::2], value.items[1::2], strict=False))
    return fields.get("little_endian") is False


def _legacy_layout(
    ctx: ScanContext, blob: Blob, offset: int, main: StreamResult, keys_res: StreamResult,
    info: StreamResult,
) -> list[Finding]:
    """Check that the raw storage section is exactly the storages the keys list names
    (element counts little-endian, or big-endian when sys_info names a big-endian writer)."""

    def bad(message: str, at: int) -> list[Finding]:
        return [R.TORCH_LEGACY_LAYOUT.finding(blob.name, message, evidence="storage layout",
                                              offset=at)]

    keys = keys_res.value
    items = keys.items if isinstance(keys, Seq) and keys.kind == "list" else None
    names = [k for k in items if isinstance(k, str)] if items is not None else []
    if items is None or len(names) != len(items):
        return bad(f"the storage-keys pickle is not a list of str (it yields "
                   f"{describe(keys)})", keys_res.start)
    big_endian = _big_endian_writer(info)
    pos = offset
    for index, key in enumerate(names):
        if index % 4096 == 0:
            ctx.check_deadline()
        storage = main.storages.get(key)
        if storage is None:
            return bad(f"storage key {key[:80]!r} has no persistent id in the main pickle", pos)
        entry, numel = storage
        head = blob.read_at(pos, 8) if pos + 8 <= blob.size else b""
        if len(head) < 8:
            return bad(f"raw storage data ends before storage {key[:80]!r}", pos)
        count = int.from_bytes(head, "little", signed=True)
        if count != numel and big_endian:  # torch < 0.4 wrote the writer's byte order
            count = int.from_bytes(head, "big", signed=True)
        if count != numel:
            return bad(f"storage {key[:80]!r} holds {count} elements, its persistent id "
                       f"says {numel}", pos)
        pos += 8 + count * (entry.storage_bytes or 1)
        if pos > blob.size:
            return bad(f"storage {key[:80]!r} runs past the end of the file", pos)
    missing = set(main.storages) - set(names)
    if missing:
        return bad(f"{len(missing)} storage(s) referenced by persistent ids have no data "
                   "(not in the storage keys)", offset)
    if pos != blob.size:
        return bad(f"{blob.size - pos} bytes after the last storage are not explained by "
                   "the storage keys", pos)
    return []
