"""One conversion, start to end: gate, read, plan, write into a temporary folder beside
OUT_DIR, scan it, rename it into place. Any refusal or error before the rename removes
the temporary folder: OUT_DIR is never left half written.

Order: (1) each source file is opened, then scanned (``scanner.api.scan_target``, the path
every model takes; the path must still name the opened file afterwards) and must be at worst
``policy`` (pickle weights are policy; anything malformed or
malicious is refused with the scanner's findings); (2) each pickle is read by
``appliance.convert._symbolic.Recorder`` with the converter's allowlist; (3) every tensor
is bounds-checked against its storage and the total output against the source size and
the free disk; (4) shards, index, copied tokenizer/config files and ``conversion.json``
are written and fsynced; (5) the folder is scanned and must be ``clean``; (6) rename.
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from appliance.atomic_file import sync_folder, write_new_file
from appliance.convert import _provenance
from appliance.convert._dtypes import TARGETS
from appliance.convert._errors import ConvertError, refused
from appliance.convert._files import (
    checkpoint_kind,
    dumps,
    hashed,
    read_small,
    sha_path,
)
from appliance.convert._plan import Limits, TensorPlan, flatten, plan
from appliance.convert._sources import (
    INDEX_NAME,
    SINGLE_NAMES,
    Checkpoint,
    open_file,
    read_checkpoint,
    read_index,
)
from appliance.convert._write import file_sha256, shard_names, split_shards, write_shard
from scanner.api import scan_target
from scanner.readers import Finding, ScanContext, Severity, Verdict
from scanner.readers import Limits as ScanLimits

DEFAULT_SHARD_BYTES = 4 << 30
OUT_INDEX = "model.safetensors.index.json"
# Files of a model folder that are copied as they are (then scanned with the output).
COPIED = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
          "special_tokens_map.json", "added_tokens.json", "vocab.json", "vocab.txt",
          "merges.txt", "tokenizer.model", "chat_template.jinja", "chat_template.json",
          "preprocessor_config.json")
# Scanner limits for the pickles read here: generous time (a large checkpoint's pickle).
SCAN_LIMITS = ScanLimits(seconds_per_target=600.0)


@dataclass
class Result:
    """What a conversion wrote: the folder, shard files, tensor count and bytes, dropped
    non-tensor values, copied files, and seconds taken."""

    out_dir: Path
    shards: list[str]
    tensors: int
    nbytes: int
    dropped: list[tuple[str, str]] = field(default_factory=list)
    copied: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class _Inputs:
    files: list[tuple[Path, str]]  # (path, display name) of checkpoint files, in order
    weight_map: dict[str, str] | None
    copied: list[str]
    index: bool


def _inputs(src: Path) -> _Inputs:
    if src.is_symlink():
        raise ConvertError(f"{src} is a symbolic link", where=str(src),
                           fix="pass the checkpoint file or folder itself")
    if src.is_file():
        return _Inputs([(src, src.name)], None, [], False)
    if not src.is_dir():
        raise ConvertError(f"{src} does not exist", where=str(src),
                           fix="pass a torch checkpoint file or a model folder")
    copied = [n for n in COPIED if (src / n).is_file() and not (src / n).is_symlink()]
    shards = read_index(src)
    if shards is not None:
        return _Inputs([(src / f, f) for f in shards.files], shards.weight_map, copied, True)
    for name in SINGLE_NAMES:
        if (src / name).is_file():
            return _Inputs([(src / name, name)], None, copied, False)
    raise ConvertError(f"{src} holds neither {INDEX_NAME} nor one of {', '.join(SINGLE_NAMES)}",
                       where=str(src), fix="pass the checkpoint file itself")


def _gate(path: Path, display: str) -> list[Finding]:
    """The scanner's findings on one source file when its verdict is worse than policy."""
    result = scan_target(path)
    if result.verdict is None:
        return list(result.findings) or [Finding(
            "scanner.internal_error", Severity.HIGH, Verdict.MALFORMED, display,
            f"the scan gave no verdict: {result.error}")]
    if result.verdict > Verdict.POLICY:
        return [f for f in result.findings if f.verdict > Verdict.POLICY]
    return []


def _check_out(out: Path) -> None:
    if out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir()))):
        raise ConvertError(f"{out} exists and is not an empty folder",
                           code="convert_output_exists", where=str(out),
                           fix="choose a new output folder; nothing is overwritten")
    if not out.parent.is_dir():
        raise ConvertError(f"the parent of {out} is not a folder", code="convert_io",
                           where=str(out.parent), fix="create the parent folder first")


def convert(src: str | os.PathLike[str], out_dir: str | os.PathLike[str], *,
            dtype: str = "keep", max_shard_bytes: int = DEFAULT_SHARD_BYTES,
            limits: Limits | None = None,
            progress: Callable[[int, int], None] | None = None) -> Result:
    """Convert ``src`` into a new safetensors folder ``out_dir``; see the module doc.
    Raises :class:`ConvertError` for every refusal and failure (an ``OSError`` becomes
    ``convert_io``); nothing is left behind unless it returns."""
    try:
        return _convert(src, out_dir, dtype, max_shard_bytes, limits, progress)
    except OSError as exc:
        where = exc.filename if isinstance(exc.filename, str) else str(out_dir)
        raise ConvertError(f"{exc.strerror or exc}", code="convert_io", where=where,
                           fix="check the path, permissions and free disk space") from None


def _convert(src: str | os.PathLike[str], out_dir: str | os.PathLike[str], dtype: str,
             max_shard_bytes: int, limits: Limits | None,
             progress: Callable[[int, int], None] | None) -> Result:
    started = time.monotonic()
    source, out = Path(src), Path(out_dir)
    if dtype not in TARGETS:
        raise ConvertError(f"--dtype {dtype!r} is not one of {', '.join(TARGETS)}",
                           code="convert_unsupported", where="--dtype",
                           fix=f"use one of {', '.join(TARGETS)}")
    if max_shard_bytes < 1:
        raise ConvertError("the shard size must be positive", code="convert_unsupported",
                           where="--max-shard-size", fix="pass a size such as 4GiB")
    limits = limits or Limits()
    _check_out(out)
    inputs = _inputs(source)
    with ExitStack() as stack:
        opened: list[int] = []
        stack.callback(_close_all, opened)
        files = [open_file(path, display, opened.append) for path, display in inputs.files]
        gate: list[Finding] = []
        for path, display in inputs.files:
            gate += [_renamed(f, display) for f in _gate(path, display)]
        if gate:
            raise refused(str(source), gate)
        _same_files(inputs, [fd for fd, _ in files])  # what was scanned is what is read
        return _convert_open(source, out, inputs, dtype, max_shard_bytes, limits, files,
                             progress, started)


def _same_files(inputs: _Inputs, fds: list[int]) -> None:
    """Each path still names the file opened before the scan, unchanged (no swap between
    the scanner's look and the converter's read)."""
    for (path, display), fd in zip(inputs.files, fds, strict=True):
        st, now = os.fstat(fd), os.lstat(path)
        if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != (
                now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns):
            raise ConvertError(f"{display} changed while it was scanned", code="convert_io",
                               where=display, fix="convert a copy nobody writes to")


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def _renamed(finding: Finding, display: str) -> Finding:
    """A finding of a single-file scan shown under the file's display name."""
    return finding if finding.path.startswith(display) else finding.moved(
        f"{display}!{finding.path}" if finding.path not in ("", ".") else display)


def _convert_open(source: Path, out: Path, inputs: _Inputs, dtype: str, max_shard: int,
                  limits: Limits, files: list[tuple[int, int]],
                  progress: Callable[[int, int], None] | None, started: float) -> Result:
    target = TARGETS[dtype]
    checkpoints: list[tuple[Checkpoint, int, int]] = []
    findings: list[Finding] = []
    tensors: list[TensorPlan] = []
    dropped: list[tuple[str, str]] = []
    for (_, display), (fd, size) in zip(inputs.files, files, strict=True):
        cp = read_checkpoint(ScanContext(limits=SCAN_LIMITS), fd, size, display)
        checkpoints.append((cp, fd, size))
        findings += cp.findings
        if cp.findings:
            continue
        flat = flatten(cp, limits)
        findings += flat.findings
        planned, bad = plan(cp, flat, target)
        findings += bad
        tensors += planned
        dropped += flat.dropped
        if inputs.weight_map is not None:
            findings += _match_index(inputs.weight_map, display, flat.tensors)
    if findings:
        raise refused(str(source), findings)
    counts = Counter(t.name for t in tensors)
    if len(counts) != len(tensors):
        twice = sorted(n for n, c in counts.items() if c > 1)[:5]
        raise ConvertError(f"tensor names repeat across shards: {', '.join(twice)}",
                           code="convert_source_invalid", where=str(source),
                           fix="each tensor name may appear in one shard only")
    if not tensors:
        raise ConvertError("the checkpoint holds no tensors", code="convert_source_invalid",
                           where=str(source), fix="pass a state_dict checkpoint")
    total = sum(t.nbytes for t in tensors)
    source_bytes = sum(size for _, _, size in checkpoints)
    if total > limits.max_output_factor * source_bytes + (1 << 20):
        raise ConvertError(f"the output would be {total} bytes, over "
                           f"{limits.max_output_factor}x the source's {source_bytes}",
                           code="convert_limit", where=str(source),
                           fix="tensors reference the same storage many times; export a "
                               "plain state_dict")
    _check_space(out.parent, total)
    tmp = out.parent / f".{out.name}.convert-{secrets.token_hex(4)}"
    os.mkdir(tmp, 0o755)
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            digests = [pool.submit(file_sha256, fd, size) for _, fd, size in checkpoints]
            result = _write_all(tmp, source, inputs, dtype, max_shard, tensors, dropped,
                                checkpoints, digests, progress, total)
        _scan_output(tmp, out)
        if out.exists():
            out.rmdir()  # checked empty above
        os.rename(tmp, out)
        sync_folder(out.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    result.out_dir = out
    result.seconds = time.monotonic() - started
    return result


def _match_index(weight_map: dict[str, str], shard: str,
                 named: Sequence[tuple[str, object]]) -> list[Finding]:
    """Findings when a shard's tensors differ from what the index says it holds."""
    from appliance.convert._errors import BAD_STORAGE

    want = {n for n, f in weight_map.items() if f == shard}
    have = {n for n, _ in named}
    if want == have:
        return []
    extra, missing = sorted(have - want)[:3], sorted(want - have)[:3]
    return [BAD_STORAGE.finding(shard, f"{INDEX_NAME} and the shard disagree: in the shard "
                                f"only {extra}, in the index only {missing}", "index")]


def _check_space(folder: Path, need: int) -> None:
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    if free < need + (64 << 20):
        raise ConvertError(f"{folder} has {free} bytes free, the output needs {need}",
                           code="convert_io", where=str(folder), fix="free disk space")


def _write_all(tmp: Path, source: Path, inputs: _Inputs, dtype: str, max_shard: int,
               tensors: list[TensorPlan], dropped: list[tuple[str, str]],
               checkpoints: list[tuple[Checkpoint, int, int]], digests: list[Future[str]],
               progress: Callable[[int, int], None] | None, total: int) -> Result:
    shards = split_shards(tensors, max_shard)
    names = shard_names(len(shards))
    done = 0

    def step(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    written = []
    for shard, name in zip(shards, names, strict=True):
        written += write_shard(str(tmp / name), shard, name, step)
    by_name = {w.name: w for w in written}
    files: list[dict[str, object]] = []
    index = {"metadata": {"total_size": total},
             "weight_map": {t.name: by_name[t.name].file for t in tensors}}
    write_new_file(tmp / OUT_INDEX, (dumps(index) + "\n").encode(), 0o644)
    copied = []
    for name in inputs.copied:
        data = read_small(source / name, name)
        write_new_file(tmp / name, data, 0o644)
        copied.append(name)
    sources = [_provenance.SourceFile(display, checkpoint_kind(fd), size, digest.result())
               for (_, display), (_, fd, size), digest in zip(
                   inputs.files, checkpoints, digests, strict=True)]
    if inputs.index:
        sources.append(hashed(source / INDEX_NAME, INDEX_NAME, "index"))
    sources += [hashed(source / n, n, "copied") for n in copied]
    for name in names:  # each tensor's SHA-256 is listed; the shard's own is not re-read
        files.append({"path": name, "size": (tmp / name).stat().st_size})
    for name in [OUT_INDEX, *copied]:
        files.append({"path": name, "size": (tmp / name).stat().st_size,
                      "sha256": sha_path(tmp / name)})
    entries: list[dict[str, object]] = [
        {"name": t.name, "shape": list(t.shape), "dtype": t.out.name,
         "source_dtype": t.dtype.name, "file": by_name[t.name].file,
         "sha256": by_name[t.name].sha256} for t in tensors]
    _provenance.write(str(tmp), _provenance.record(dtype, sources, entries, dropped, files))
    sync_folder(tmp)
    return Result(tmp, names, len(tensors), total, dropped, copied)


def _scan_output(tmp: Path, out: Path) -> None:
    """The written folder must scan clean (the files copied from the source included)."""
    result = scan_target(tmp)
    if result.verdict is Verdict.CLEAN:
        return
    findings = list(result.findings) or [Finding(
        "scanner.internal_error", Severity.HIGH, Verdict.MALFORMED, ".",
        f"the scan gave no verdict: {result.error}")]
    raise ConvertError(f"the converted folder does not scan clean (verdict "
                       f"{result.verdict or 'none'}); nothing was written",
                       code="convert_output_not_clean",
                       where=str(out), fix="read the findings: a copied config or tokenizer "
                       "file may be the cause", findings=findings)
