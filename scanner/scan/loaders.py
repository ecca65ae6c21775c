"""Loader-aware verdicts: a file is judged as every loader that may read it, not only as
the one format its bytes sniffed as.

Loaders pick by file name, then parse: transformers hands ``pytorch_model.bin`` to
``torch.load`` whatever its bytes are, and ``torch.load`` reads anything that is not a zip
(or a legacy tar) as a pickle from offset 0. A file whose bytes are a valid safetensors
file *and*, from offset 0, a pickle that reaches ``os.system`` (promptfoo/modelaudit issue
1612) sniffs as safetensors and is clean as safetensors; named ``pytorch_model.bin`` it runs
code. So, for every blob (top-level files and container members alike):

- ``LOADERS`` (one row per loader): the name patterns it is handed (``fnmatch`` on the
  lower-case base name), the formats it parses (``accepts``), the format it reads any
  other content as (``reads_as``, ``None``: it refuses other content, which
  ``format.extension_mismatch`` reports) and the formats it tries before anything else
  (``tries_first``). When a file's name matches a loader and its sniffed format is not
  one the loader accepts, the file is also analysed as ``reads_as``; whatever it was
  sniffed as, it is also analysed as each ``tries_first`` format whose gate passes.
  ``torch.load``'s ``_legacy_load`` (torch/serialization.py) calls
  ``tarfile.open(f, "r:")`` before ``pickle.load`` and, when that opens, unpickles the
  ``storages``, ``tensors`` and ``pickle`` members: a safetensors file whose JSON header
  hides a v7 tar header (empty name, no magic) and whose data holds a ``storages`` member
  is clean as safetensors and runs code as ``pytorch_model.bin``. NeMo's
  ``restore_from`` opens ``.nemo`` files the same way (``"r:"`` first). The gate is
  ``scanner.formats.tar.is_tar_header``, exactly ``tarfile.TarInfo.frombuf``'s rules.
- ``ALSO`` (one row per polyglot class): content that is valid as one format and, read
  from offset 0, also as another (safetensors whose length prefix and JSON header also
  form a pickle opcode stream; any other container or weight format whose head
  ``pickle.load`` would start running, e.g. a tar whose first member name is a pickle).
  A cheap test on the head decides whether the second analysis runs at all, so the
  common file pays one byte comparison (its first byte is no pickle opcode) or a few
  opcodes parsed.

What an extra reading contributes (``extra_findings``): its ``malicious`` findings
(evidence that this loader would run code), its ``policy`` findings other than the
reading's own format policy (``format.*``: the file is not refused for being "a pickle"
when no loader reads it as one successfully), and crashes and limit hits (fail closed).
Its ``malformed`` findings are dropped where the loader fails on the same bytes before
running anything more: the pickle analyzer reports what the opcodes before an invalid one
reach and ``pickle.load`` raises at that opcode (``torch.load`` of a plain safetensors
file: "invalid load key"); the YAML analyzer's parser is PyYAML's own. A reading whose
gate is exact (``PROVEN``: tar, whose gate is what ``tarfile.open`` accepts) keeps every
finding: the loader opened the content, so a walk of ours that stops early, or the
archive policy itself, is no pass. Each kept finding's message names the reading:
``read by torch.load as pickle: ...``.

The common case gets no second analysis: ``model.safetensors`` sniffed as safetensors,
``pytorch_model.bin`` sniffed as a pickle or torch zip (one tar-header test on its first
512 bytes, about 7 us a file with the head read), ``config.json``, ``*.yaml``. A new loader
is one ``Loader`` line; its formats must be registered and its ``tries_first`` formats
gated (checked at import).
"""

from __future__ import annotations

import fnmatch
import io
import pickletools
from collections.abc import Callable
from dataclasses import replace
from typing import NamedTuple

from scanner.core.model import Blob, Finding, Verdict
from scanner.core.rules import INTERNAL_ERROR, LIMIT_EXCEEDED
from scanner.core.spec import Format
from scanner.formats.pickle.sniff import looks_like_pickle
from scanner.formats.tar import is_tar_header
from scanner.scan.registry import BY_FORMAT, SPECS

# Formats named by the table (each declared by its format module; checked below).
PICKLE, TORCH_LEGACY, ZIP, TAR = (Format("pickle"), Format("torch-legacy"), Format("zip"),
                                  Format("tar"))
COMPRESSED, NPY, HDF5, GGUF = (Format("compressed"), Format("npy"), Format("hdf5"),
                               Format("gguf"))
SAFETENSORS, TORCH_MOBILE, YAML = (Format("safetensors"), Format("torch-mobile"),
                                   Format("yaml"))


class Loader(NamedTuple):
    """One loader: ``name`` as shown in findings; ``patterns``: lower-case ``fnmatch``
    patterns of the base names it is handed (a pattern holding ``!`` matches the whole
    member path instead, e.g. ``*!storages``: a member at an archive's root);
    ``accepts``: formats it parses; ``reads_as``: what it parses any other content as
    (``None``: refuses it); ``tries_first``: formats it tries on any content before
    looking at it otherwise (``torch.load`` and NeMo try ``tarfile.open`` first), each
    read when its ``GATES`` test passes and the content was not sniffed as it."""

    name: str
    patterns: tuple[str, ...]
    accepts: frozenset[Format]
    reads_as: Format | None
    tries_first: tuple[Format, ...] = ()


# Sources: torch.load (torch/serialization.py: a file starting with a zip local header ->
# torch zip; else ``_legacy_load``, which first tries ``tarfile.open(f, "r:")`` and, when
# that opens, unpickles the members ``storages``, ``tensors`` and ``pickle`` whatever their
# bytes; when it raises ``TarError``, pickle.load from offset 0; transformers loads
# pytorch_model*.bin, training_args.bin and *.pt/*.pth/*.ckpt checkpoints with it),
# pickle/joblib/dill load, numpy.load (zip -> npz, '\x93NUMPY' -> npy, else pickle.load
# with allow_pickle=True), paddle.load (.pdparams and .pdopt are pickles),
# keras.saving.load_model (.keras: zip; .h5: HDF5), the GGUF reader, NeMo restore_from
# (.nemo: tarfile "r:", then "r:gz"), safetensors.safe_open (a polyglot sniffed as
# another format is still a safetensors file to it: its tensor names still name the
# files converters write), and the YAML loaders
# (yaml.safe_load, OmegaConf.load, Hydra: a *.yaml/*.yml file is parsed as YAML whatever
# its first bytes, so a file whose first key spells a binary magic, ``GGUF: 1``, is
# still a config).
LOADERS: tuple[Loader, ...] = (
    Loader("torch.load", ("*.bin", "*.pt", "*.pth", "*.ckpt"),
           frozenset({ZIP, TORCH_LEGACY, PICKLE, TAR, TORCH_MOBILE}), PICKLE, (TAR,)),
    Loader("torch.load (legacy tar member)", ("*!storages", "*!tensors", "*!pickle"),
           frozenset({PICKLE, TORCH_LEGACY}), PICKLE),
    Loader("pickle.load", ("*.pkl", "*.pickle", "*.dill", "*.joblib"),
           frozenset({PICKLE, TORCH_LEGACY, COMPRESSED, ZIP}), PICKLE),
    Loader("numpy.load", ("*.npy", "*.npz"), frozenset({NPY, ZIP}), PICKLE),
    Loader("paddle.load", ("*.pdparams", "*.pdopt"), frozenset({PICKLE}), PICKLE),
    Loader("keras.saving.load_model", ("*.keras", "*.h5", "*.hdf5"),
           frozenset({ZIP, HDF5}), None),
    Loader("gguf reader", ("*.gguf",), frozenset({GGUF}), None),
    Loader("nemo restore_from", ("*.nemo",), frozenset({TAR, COMPRESSED}), None, (TAR,)),
    Loader("safetensors.safe_open", ("*.safetensors",), frozenset({SAFETENSORS}),
           SAFETENSORS),
    Loader("yaml loader (yaml.safe_load, OmegaConf.load)", ("*.yaml", "*.yml"),
           frozenset({YAML}), YAML),
)

_PICKLE_OPCODES = frozenset(ord(op.code) for op in pickletools.opcodes)
_SAFETENSORS_JSON_AT = 8  # the header's '{' (not a pickle opcode)


def _pickle_past_length_prefix(head: bytes) -> bool:
    """Whether ``head`` (a safetensors file's first bytes) read as pickle opcodes from
    offset 0 gets past byte 8 (the header's ``{``, which is no opcode): only then can
    ``pickle.load`` reach anything the header or data hold. Parsing only
    (``pickletools.genops``); an argument running past the head counts as getting past."""
    if not head or head[0] not in _PICKLE_OPCODES:
        return False
    stream = io.BytesIO(head)
    try:
        for op, _, pos in pickletools.genops(stream):
            if (pos or 0) > _SAFETENSORS_JSON_AT:
                return True
            if op.name == "STOP":
                return False
    except ValueError as exc:  # an unknown opcode stops pickle.load too
        return "unknown" not in str(exc) and stream.tell() > _SAFETENSORS_JSON_AT
    except Exception:  # noqa: BLE001 - an argument genops cannot decode: let the VM judge
        return stream.tell() > _SAFETENSORS_JSON_AT
    return False


class Also(NamedTuple):
    """A polyglot class: content sniffed as ``sniffed`` whose head passes ``test`` is also
    analysed as ``reads_as`` (by ``reader``, named in findings)."""

    sniffed: Format
    test: Callable[[bytes], bool]
    reads_as: Format
    reader: str


# Formats whose analyzers already read a pickle at offset 0 (a zip's prefix is analysed).
_READ_FROM_ZERO = frozenset({PICKLE, TORCH_LEGACY, ZIP})
_ANY_PICKLE_LOADER = "any pickle loader (torch.load, pickle.load) from offset 0"

ALSO: tuple[Also, ...] = (
    Also(SAFETENSORS, _pickle_past_length_prefix, PICKLE, _ANY_PICKLE_LOADER),
    # every other container or weight format whose head pickle.load would start running
    *(Also(spec.format, looks_like_pickle, PICKLE, _ANY_PICKLE_LOADER) for spec in SPECS
      if spec.binary and spec.format not in _READ_FROM_ZERO | {SAFETENSORS}),
)
ALSO_HEAD = 4096
_ALSO_BY_FORMAT: dict[Format, tuple[Also, ...]] = {}
for _row in ALSO:
    _ALSO_BY_FORMAT[_row.sniffed] = (*_ALSO_BY_FORMAT.get(_row.sniffed, ()), _row)

for _fmt in {f for row in LOADERS for f in (*row.accepts, row.reads_as, *row.tries_first)
             if f is not None} | {f for row in ALSO for f in (row.sniffed, row.reads_as)}:
    if _fmt not in BY_FORMAT:  # a broken table never scans
        raise ValueError(f"loader table names unregistered format {_fmt!r}")


def _base(name: str) -> str:
    last = name.rsplit("!", 1)[-1]
    return last[last.rfind("/") + 1:].lower()


# suffix -> loaders, for the ``*.ext`` patterns; other patterns are matched with fnmatch
# (on the whole lower-case path when they hold ``!``, else on the base name).
_BY_SUFFIX: dict[str, tuple[Loader, ...]] = {}
_OTHER: list[tuple[str, Loader]] = []
for _loader in LOADERS:
    for _pattern in _loader.patterns:
        _ext = _pattern[1:]
        if _pattern.startswith("*.") and not any(c in _ext for c in "*?[]!"):
            _BY_SUFFIX[_ext] = (*_BY_SUFFIX.get(_ext, ()), _loader)
        else:
            _OTHER.append((_pattern, _loader))


def loaders_for(name: str) -> tuple[Loader, ...]:
    """The loaders a file of this (finding) path is handed, by its base name (and, for
    ``!`` patterns, its member path)."""
    base = _base(name)
    dot = base.rfind(".")
    found = _BY_SUFFIX.get(base[dot:], ()) if dot >= 0 else ()
    if _OTHER:
        lower = name.lower()
        found += tuple(row for pattern, row in _OTHER if row not in found and (
            fnmatch.fnmatchcase(lower if "!" in pattern else base, pattern)))
    return found


def _may_unpickle(head: bytes) -> bool:
    """Whether ``pickle.load`` would start executing ``head``: the sniffer's own test
    (``looks_like_pickle``), or a safetensors-shaped head whose opcodes get past byte 8."""
    return looks_like_pickle(head) or _pickle_past_length_prefix(head)


# reads_as -> a test on the head that must pass for the reading to run at all (a GGML
# ``.bin`` is not walked as a pickle: ``torch.load`` stops at its first byte). The tar
# test is exactly what ``tarfile.open(f, "r:")`` accepts as a first header
# (``scanner.formats.tar.is_tar_header``; tests check it against tarfile itself).
GATES: dict[Format, Callable[[bytes], bool]] = {PICKLE: _may_unpickle, TAR: is_tar_header}
# Formats whose gate is exact: when it passes, the loader parses the content as that
# format and goes on, so everything the reading finds counts (its malformed findings
# and its format policy too: our walk failing where the loader goes on is no pass).
PROVEN: frozenset[Format] = frozenset({TAR})
if any(f not in GATES for row in LOADERS for f in row.tries_first):  # checked at import
    raise ValueError("a loader tries a format first that has no gate")


def readings(blob: Blob, fmt: Format) -> list[tuple[Format, str]]:
    """(format, who reads it so) for each extra reading of ``blob`` sniffed as ``fmt``:
    by name (``LOADERS``, gated by ``GATES``) and by content (``ALSO``), each format
    once. Reads at most the first ``ALSO_HEAD`` bytes, once, and only when a row asks."""
    out: dict[Format, str] = {}
    head: bytes | None = None

    def first_bytes() -> bytes:
        nonlocal head
        if head is None:
            head = blob.read_at(0, min(ALSO_HEAD, blob.size)) if blob.size > 0 else b""
        return head

    for row in loaders_for(blob.name):
        for first in row.tries_first:
            if first != fmt and first not in out and GATES[first](first_bytes()):
                out[first] = row.name
        if row.reads_as is None or fmt in row.accepts or row.reads_as == fmt:
            continue
        gate = GATES.get(row.reads_as)
        if gate is None or gate(first_bytes()):
            out.setdefault(row.reads_as, row.name)
    for also in _ALSO_BY_FORMAT.get(fmt, ()):
        if also.reads_as not in out and also.test(first_bytes()):
            out[also.reads_as] = also.reader
    return list(out.items())


_FAIL_CLOSED = frozenset({INTERNAL_ERROR.id, LIMIT_EXCEEDED.id})


def extra_findings(found: list[Finding], fmt: Format, reader: str) -> list[Finding]:
    """What one extra reading contributes (module docstring), each message prefixed with
    ``read by <reader> as <format>: ``."""
    out: list[Finding] = []
    for f in found:
        keep = fmt in PROVEN or f.verdict is Verdict.MALICIOUS or f.rule_id in _FAIL_CLOSED or (
            f.verdict is Verdict.POLICY and not f.rule_id.startswith("format."))
        if keep:
            out.append(replace(f, message=f"read by {reader} as {fmt}: {f.message}"))
    return out
