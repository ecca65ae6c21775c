"""Whole-folder checks for Hugging Face style model folders.

The per-blob analyzers judge content; this module adds what needs file names or the whole
inventory of the folder:

- name versus content: a ``*.json`` that did not sniff as JSON is still parsed as JSON (so
  ``auto_map`` in it is found), a ``*.jinja`` that did not sniff as a template is still
  checked as one, every ``*.py`` is ``code.python_file_present``, and a weight file whose
  content is another format (``model.safetensors`` holding a pickle) is
  ``format.extension_mismatch``;
- never clean unless analysed: a file that sniffed as plain text (no analyser claims it)
  and is not read as a named text format is ``format.not_analysed`` (policy), except the
  inert names of ``INERT_TEXT`` (README, LICENSE, NOTICE, ``*.md``, ``.gitattributes``,
  tokenizer word lists);
- ``custom_generate/`` (transformers runs ``custom_generate/generate.py`` from a local
  folder without ``trust_remote_code``, transformers PR #46483) and ``requirements.txt``;
- sharded-index references (``*.index.json`` ``weight_map``): each file named must stay
  inside the index's own folder (``path.escape``; the loader opens the model from there,
  so ``../x`` escapes the model even when a scan of a parent folder holds ``x``) and be a
  regular file present in it (``path.missing``), judged by
  ``scanner.core.pathnames.reference_escapes`` on the unescaped JSON string; a tensor
  name (``weight_map`` key) that is a path out of its folder is ``name.path_escape``.

Each finding is produced in exactly one place: a name-based check runs only when the
content-based analyzer for that format did not run on the file.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import posixpath
import re
import stat

from scanner.core.context import ScanContext
from scanner.core.model import Blob, Finding, Severity, Verdict
from scanner.core.pathnames import NAME_PATH_ESCAPE, escapes, reference_escapes
from scanner.core.pathnames import PATH_ESCAPE as PATH_ESCAPE  # re-exported
from scanner.core.rules import rule
from scanner.core.spec import TEXT, Format
from scanner.formats import text as _text
from scanner.formats.keras import keras_folder_config
from scanner.scan.dispatch import analyzer_for
from scanner.scan.hfcache import layout_text
from scanner.scan.registry import BINARY_FORMATS as REGISTRY_BINARY
from scanner.scan.registry import CLAIMS, NAMED_TEXT

V, S = Verdict, Severity

EXTENSION_MISMATCH = rule(
    "format.extension_mismatch", V.MALFORMED, S.MEDIUM,
    "File content is not the format its extension names (e.g. a pickle named .safetensors)",
    "Rename the file after its real format or replace it with a file of the named format.",
)
CUSTOM_GENERATE = rule(
    "code.custom_generate", V.MALICIOUS, S.CRITICAL,
    "custom_generate/ folder: transformers runs its generate.py without trust_remote_code",
    "Remove the custom_generate/ folder from the model.",
)
REQUIREMENTS = rule(
    "code.requirements_file", V.POLICY, S.MEDIUM,
    "requirements.txt ships with the model (installs third-party code)",
    "Remove requirements.txt; the serving environment is fixed and never pip-installs "
    "what a model asks for.",
)
PATH_MISSING = rule(
    "path.missing", V.MALFORMED, S.HIGH,
    "A file reference in the model names a file that is missing or not a regular file",
    "Ship every file the index names, as a regular file in the model folder.",
)
NOT_ANALYSED = rule(
    "format.not_analysed", V.POLICY, S.LOW,
    "Text file that no analyser understands: it was not judged, so it is not clean "
    "(inert documentation and tokenizer word lists excepted, see docs/scanner.md)",
    "Remove the file from the model folder, or convert it to a format the scanner reads "
    "(JSON for configs).",
)
# Base names (lower case, fnmatch) of text files that no loader reads as code or config:
# documentation, licences, git metadata, tokenizer word lists (vocab.txt, merges.txt,
# vocab.bpe, sentencepiece .vocab, tiktoken ranks: read as data only). Everything else
# that sniffed as plain text and is not read as a named text format (.json, .py, .jinja)
# is format.not_analysed.
INERT_TEXT: tuple[str, ...] = (
    "readme", "readme.*", "license", "license.*", "license-*", "licence", "licence.*",
    "copying", "copying.*", "notice", "notice.*", "authors", "authors.*",
    "*.md", "*.markdown", "*.rst", ".gitattributes", ".gitignore",
    "vocab.txt", "merges.txt", "vocab.bpe", "*.vocab", "tokenizer.model", "*.tiktoken",
)
_INERT = re.compile("|".join(fnmatch.translate(p) for p in INERT_TEXT))
INVALID_INDEX = rule(
    "config.invalid_index", V.MALFORMED, S.MEDIUM,
    "Sharded checkpoint index is not {\"weight_map\": {tensor: file name}}",
    "Regenerate the index with save_pretrained (huggingface_hub split_torch_state_dict).",
)

MAX_CLASS_MEMO = 256  # (source digest, class names) -> findings, per process (fleets)
_CLASS_MEMO: dict[tuple[bytes, tuple[str, ...]], tuple[Finding, ...]] = {}
MAX_PYTHON_KEPT = 1 << 20  # one .py file kept for the auto_map class analysis
MAX_PYTHON_TOTAL = 16 << 20  # all kept .py files of one target
# From the format registry: container/weight formats (judged by their analyzer), the
# formats each claimed suffix may hold, the text format a suffix names.
BINARY_FORMATS = REGISTRY_BINARY
EXPECTED: dict[str, frozenset[Format]] = CLAIMS


def _extension(rel: str) -> str:
    """``posixpath.splitext(rel)[1].lower()``, without its generic path handling."""
    base = rel[rel.rfind("/") + 1:]
    dot = base.rfind(".")
    return base[dot:].lower() if dot > 0 and base[:dot].lstrip(".") else ""


def _inert(rel: str) -> bool:
    """An inert text name (``INERT_TEXT``), or a text file of the Hugging Face cache
    layout (``scanner.scan.hfcache.layout_text``)."""
    base = rel[rel.rfind("/") + 1:].lower()
    return _INERT.match(base) is not None or layout_text(rel)


class FolderChecks:
    """Collects the folder inventory and runs name- and folder-level checks.

    Call ``entry`` for every walked entry, ``file`` for every regular file after its
    content analysis, and ``finish`` once at the end. With ``folder=False`` (a single-file
    target) the inventory is unknown, so index references are only checked for escapes.
    """

    def __init__(self, ctx: ScanContext, *, folder: bool) -> None:
        self.ctx = ctx
        self.folder = folder
        self.inventory: dict[str, int] = {}  # rel path -> st_mode (lstat)
        self.indexes: dict[str, object] = {}  # rel path of *.index.json -> parsed document
        self.python: dict[str, bytes] = {}  # rel path of *.py -> source (bounded)
        self.python_bytes = 0

    def entry(self, rel: str, st: os.stat_result) -> list[Finding]:
        """Record an entry; ``code.custom_generate`` for a ``custom_generate`` directory."""
        self.inventory[rel] = st.st_mode
        if stat.S_ISDIR(st.st_mode) and posixpath.basename(rel) == "custom_generate":
            return [CUSTOM_GENERATE.finding(
                rel, "custom_generate/ folder (generate.py runs at model.generate())",
                "custom_generate/",
            )]
        return []

    def file(self, rel: str, fmt: Format | None, blob: Blob) -> list[Finding]:
        """Name-based checks for one regular file whose content sniffed as ``fmt``
        (None when sniffing failed; the dispatcher reported that already)."""
        out: list[Finding] = []
        ext = _extension(rel)
        expected = EXPECTED.get(ext)
        if ext == ".txt" and rel[rel.rfind("/") + 1:].lower() == "requirements.txt":
            out.append(REQUIREMENTS.finding(rel, "requirements.txt in the model folder"))
        if expected is not None and fmt not in expected:
            if ext in NAMED_TEXT and fmt not in BINARY_FORMATS:
                out.extend(self._as_named(rel, ext, blob))
            elif fmt is not None:
                out.append(EXTENSION_MISMATCH.finding(
                    rel, f"{ext} file holds {fmt.value} content",
                    f"expected {'/'.join(sorted(f.value for f in expected))}, "
                    f"sniffed {fmt.value}",
                ))
        elif fmt is TEXT and ext not in NAMED_TEXT and not out and not _inert(rel):
            out.append(NOT_ANALYSED.finding(
                rel, "plain text that no analyser reads: not judged, so not clean",
                f"sniffed {fmt.value}; not an inert name"))
        if ext == ".json":  # Keras model folders (every name Keras loads is .json)
            out.extend(keras_folder_config(self.ctx, rel, blob))
        if rel.endswith(".index.json"):
            self._remember_index(rel, blob)
        if (ext == ".py" and blob.size <= MAX_PYTHON_KEPT
                and self.python_bytes + blob.size <= MAX_PYTHON_TOTAL):
            self.python[rel] = blob.read_at(0, blob.size)
            self.python_bytes += blob.size
        return out

    def _as_named(self, rel: str, ext: str, blob: Blob) -> list[Finding]:
        """Analyze a text file as the format its name says (content did not say so)."""
        return analyzer_for(NAMED_TEXT[ext])(self.ctx, blob)

    def _remember_index(self, rel: str, blob: Blob) -> None:
        doc, problems = _text.parse_json(self.ctx, blob)
        if not problems:  # else reported as json.invalid by the JSON analysis of the file
            self.indexes[rel] = doc

    def finish(self) -> list[Finding]:
        """Folder-level findings once every entry has been seen: index references."""
        out: list[Finding] = []
        for rel, doc in sorted(self.indexes.items()):
            out.extend(self._check_index(rel, doc))
        out.extend(self._auto_map_classes())
        return out

    def _auto_map_classes(self) -> list[Finding]:
        """Dangerous calls in the classes an ``auto_map`` names (``module.Class`` beside
        the JSON file that holds it): ``from_pretrained`` instantiates them, so their
        methods run. The modules' import-time code was judged by the Python analyzer."""
        from scanner.formats import pysource as _pysource

        wanted: dict[str, set[str]] = {}
        for json_path, ref in self.ctx.auto_map:
            if "!" in json_path or "--" in ref or ref.count(".") != 1:
                continue
            module, cls = ref.split(".")
            rel = posixpath.join(posixpath.dirname(json_path), module + ".py")
            if rel in self.python:
                wanted.setdefault(rel, set()).add(cls)
        out: list[Finding] = []
        for rel, classes in sorted(wanted.items()):
            self.ctx.check_deadline()
            key = (hashlib.sha256(self.python[rel]).digest(),
                   tuple(sorted(classes)))
            found = _CLASS_MEMO.get(key)
            if found is None:
                src, problems = _pysource.parse(rel, self.python[rel])
                if src is None:
                    continue  # code.unparseable reported by the file's own analysis
                already = {f.evidence for f in _pysource.module_findings(src)}
                found = tuple(_pysource.classes_findings(src, key[1], already))
                if len(_CLASS_MEMO) >= MAX_CLASS_MEMO:
                    _CLASS_MEMO.pop(next(iter(_CLASS_MEMO)))
                _CLASS_MEMO[key] = found
            out.extend(Finding(f.rule_id, f.severity, f.verdict, rel, f.message, f.evidence,
                               f.offset) for f in found)
        return out

    def _check_index(self, rel: str, doc: object) -> list[Finding]:
        weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
        if not isinstance(weight_map, dict) or not all(
            isinstance(v, str) for v in weight_map.values()
        ):
            return [INVALID_INDEX.finding(rel, "index has no weight_map of file names",
                                          "/weight_map")]
        out: list[Finding] = []
        tensors_by_file: dict[str, list[str]] = {}
        for tensor, name in weight_map.items():
            tensors_by_file.setdefault(name, []).append(tensor)
        out.extend(NAME_PATH_ESCAPE.finding(
            rel, f"index names a tensor that is a path leaving its folder ({why})",
            f"/weight_map key {tensor!r}"[:300])
            for tensor, why in ((t, escapes(t, nul=False)) for t in weight_map) if why is not None)
        base = posixpath.dirname(rel)
        for name, tensors in sorted(tensors_by_file.items()):
            evidence = f"/weight_map/{tensors[0]}: {name}" + (
                f" (+{len(tensors) - 1} tensors)" if len(tensors) > 1 else "")
            out.extend(self._check_reference(rel, base, name, evidence[:300]))
        return out

    def _check_reference(self, rel: str, base: str, name: str, evidence: str) -> list[Finding]:
        """One file name referenced from ``rel`` (relative to directory ``base``)."""
        posix = name.replace("\\", "/")
        # Judged against the index's own folder (the model folder the loader opens), not
        # against the scan target, which may be a parent folder holding several models.
        why = reference_escapes(name.replace("\x00", ""))  # NUL: path.missing below
        if why is not None:
            return [PATH_ESCAPE.finding(
                rel, f"index references a file outside its own folder ({why})", evidence)]
        joined = posixpath.normpath(posixpath.join(base, posix))
        if "\x00" in name or not name:
            return [PATH_MISSING.finding(rel, "index references an invalid file name",
                                         evidence)]
        if not self.folder:
            return []
        mode = self.inventory.get(joined)
        if mode is None:
            return [PATH_MISSING.finding(rel, f"index references missing file {joined!r}",
                                         evidence)]
        if not stat.S_ISREG(mode):
            return [PATH_MISSING.finding(
                rel, f"index references {joined!r}, which is not a regular file", evidence)]
        return []
