"""Safetensors validator: every rule of the format, checked from the header alone.

Source: the format section of https://github.com/huggingface/safetensors and the reference
reader ``safetensors`` 0.8.0 (``SafeTensors::read_metadata`` / ``Metadata::validate``).
Layout: an 8-byte little-endian u64 header length ``N``, ``N`` bytes of UTF-8 JSON (first
byte ``{``, optionally padded with spaces 0x20), then the data section. The JSON maps each
tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative to the
data section) plus an optional ``"__metadata__"`` string-to-string map. The tensors' byte
ranges must tile the data section exactly: no hole, no overlap, nothing past its end.

This module is stricter than the reference reader where parsers disagree (duplicate keys,
unknown fields, BOM or leading whitespace, non-space padding, ``null`` metadata) and where the
frameworks that build the tensors disagree with it (a dimension at or above 2**63, which
torch and numpy refuse; more than 64 dimensions, which numpy refuses and torch reads): a file
it accepts is read the same way by every conforming reader. Only the header is read unless
``Limits.deep`` is set; memory use is bounded by the header cap, not by the file size.
"""

from __future__ import annotations

import json
import re
import reprlib
import struct
from collections import Counter
from collections.abc import Callable
from typing import Any, Final, NamedTuple

from scanner.core.confusable import collisions
from scanner.core.context import Limits, ScanContext
from scanner.core.diagnostic import Diagnostic
from scanner.core.model import Blob, Finding, Severity, Verdict
from scanner.core.pathnames import MAY_ESCAPE, NAME_PATH_ESCAPE, escapes
from scanner.core.rules import Rule, rule
from scanner.core.spec import Format, FormatSpec, Head, Probe
from scanner.core.strict_json import JSONProblem, loads_strict

# Element sizes in bits of every dtype the reference 0.8.0 reader accepts.
DTYPE_BITS: Final[dict[str, int]] = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8,
    "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
    "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}
METADATA_KEY: Final = "__metadata__"
_FIELDS: Final = frozenset({"dtype", "shape", "data_offsets"})
_U64: Final = 1 << 64
# Framework shapes are signed 64-bit (torch, numpy): a dimension at or above 2**63 passes the
# reference reader's u64 checks (with a zero dimension beside it the tensor is empty), then
# torch refuses it ("Overflow when unpacking long") and numpy too ("Maximum allowed dimension
# exceeded"). numpy (safetensors.numpy, and the JAX/Flax readers built on it) holds at most
# 64 dimensions where torch reads more. Both load in one reader and fail in another.
_I64: Final = 1 << 63
_MAX_RANK: Final = 64
_MAX_DEPTH: Final = 8  # a valid header nests 3 deep; deeper is refused as not strict JSON
_PER_RULE: Final = 20  # problems listed per rule; the rest are counted in one summary
_FIND_BUDGET: Final = 256 << 20  # header bytes searched to locate names for offsets
_CHUNK: Final = 1 << 20  # deep-mode read size

_REEXPORT = "Re-export the weights with the safetensors library (save_file / save_model)."


def _rule(name: str, severity: Severity, title: str, fix: str) -> Rule:
    return rule(f"safetensors.{name}", Verdict.MALFORMED, severity, title, f"{fix} {_REEXPORT}")


HIGH, MEDIUM = Severity.HIGH, Severity.MEDIUM
HEADER_LENGTH = _rule("header_length", HIGH, "Header length prefix is zero, past the end of "
                      "the file or above the cap", "The first 8 bytes must be the little-endian "
                      "u64 size of the JSON header.")
HEADER_ENCODING = _rule("header_encoding", HIGH, "Header is not strict UTF-8 JSON starting with "
                        "'{' (BOM, bad bytes, syntax, depth, padding)", "Write the header as "
                        "UTF-8 JSON starting with '{', padded only with spaces.")
DUPLICATE_NAME = _rule("duplicate_name", HIGH, "A JSON key appears twice (readers disagree on "
                       "which entry wins)", "Give every tensor a unique name.")
TENSOR_INFO = _rule("tensor_info", MEDIUM, "Tensor entry is not exactly {dtype, shape, "
                    "data_offsets}", "Remove unknown fields and add missing ones.")
DTYPE = _rule("dtype", MEDIUM, "Unknown or non-string dtype",
              "Use a dtype of the safetensors spec (F32, BF16, I64, ...).")
SHAPE = _rule("shape", HIGH, "Shape is not a list of at most 64 non-negative integers below "
              "2**63, or its byte size overflows u64", "Write the shape as a list of at most 64 "
              "non-negative integers below 2**63.")
OFFSETS_MALFORMED = _rule("offsets_malformed", HIGH, "data_offsets is not [begin, end] of "
                          "non-negative integers with begin <= end", "Write data_offsets as "
                          "[begin, end] relative to the data section.")
OFFSET_SHAPE_MISMATCH = _rule("offset_shape_mismatch", HIGH, "data_offsets span differs from "
                              "shape x dtype size", "Make end - begin the tensor's byte size.")
OFFSET_OUT_OF_BOUNDS = _rule("offset_out_of_bounds", HIGH, "Tensor bytes lie past the end of "
                             "the file", "The file is truncated or forged: re-download it.")
OVERLAP = _rule("overlap", HIGH, "Two tensors share bytes (aliased weights)",
                "Give every tensor its own byte range.")
COVERAGE_GAP = _rule("coverage_gap", MEDIUM, "Bytes of the data section belong to no tensor "
                     "(hidden payload)", "Remove the unreferenced bytes.")
TRAILING_BYTES = _rule("trailing_bytes", MEDIUM, "Bytes after the last tensor (appended "
                       "payload)", "Truncate the file after the last tensor.")
METADATA_TYPE = _rule("metadata_type", MEDIUM, "__metadata__ is not a string-to-string map",
                      "Store metadata values as JSON strings.")
AMBIGUOUS_NAMES = rule(
    "safetensors.ambiguous_names", Verdict.POLICY, Severity.MEDIUM,
    "Two tensor names differ only in characters some readers drop or fold (NUL, control "
    "or format characters, Unicode compatibility forms): the file loads differently in "
    "different readers", f"Give every tensor a plain, distinct name. {_REEXPORT}")
BOOL_VALUE = _rule("bool_value", MEDIUM, "A BOOL tensor holds a byte other than 0 or 1 (deep "
                   "scan)", "Store BOOL tensors as bytes 0/1.")

_repr = reprlib.Repr()
_repr.maxlevel, _repr.maxlist, _repr.maxdict, _repr.maxstring = 2, 6, 6, 80
_repr.maxlong, _repr.maxother = 40, 80
_NOT_BOOL = re.compile(rb"[^\x00\x01]")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
# A JSON string, or the number -0 (Python reads it as the int 0; the reference reader sees a
# float and refuses it). Only numbers are matched outside strings.
_MINUS_ZERO = re.compile(rb'"(?:[^"\\]|\\.)*"|-0(?![.eE0-9])')


def _show(value: object) -> str:
    """Bounded rendering of an untrusted value for messages and evidence."""
    return _repr.repr(value)[:200]


class TensorInfo(NamedTuple):
    """One tensor: dtype code, shape, and [begin, end) byte range in the data section."""

    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


class SafetensorsHeader(NamedTuple):
    """A fully validated header.

    ``tensors`` keeps header order; offsets are relative to the data section, which starts
    at byte ``data_start`` (= 8 + ``header_len``) of the file and ends at its end.
    """

    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]
    header_len: int
    data_start: int


class Problem(NamedTuple):
    """One rule violation: ``offset`` is a byte offset in the file when known."""

    rule: Rule
    message: str
    evidence: str = ""
    offset: int | None = None

    def finding(self, path: str) -> Finding:
        return self.rule.finding(path, self.message, self.evidence, self.offset)

    def diagnostic(self, path: str) -> Diagnostic:
        """The problem as a :class:`~scanner.diagnostic.Diagnostic`: ``code`` = rule id,
        ``at`` = ``path`` (``path@offset`` when the byte offset is known), the rule's fix."""
        at = path if self.offset is None else f"{path}@{self.offset}"
        return Diagnostic(self.rule.id, self.message, at, self.rule.fix)


class SafetensorsError(ValueError):
    """The file breaks the safetensors format. ``rule_id``/``offset``/``evidence`` describe
    the first problem; ``problems`` lists all of them (capped per rule)."""

    def __init__(self, problems: list[Problem]) -> None:
        first = problems[0]
        super().__init__(f"{first.rule.id}: {first.message}")
        self.rule_id = first.rule.id
        self.offset = first.offset
        self.evidence = first.evidence
        self.problems = tuple(problems)


class _Checker:
    """One file's check: its header bytes, problems and per-rule counts (a plain class:
    a dataclass is created at import for several times the cost, on a fleet scan's
    critical path)."""

    def __init__(self, blob: Blob, limits: Limits,
                 tick: Callable[[], None] | None = None) -> None:
        self.blob, self.limits, self.tick = blob, limits, tick
        self.header = b""
        self.data_start = 0
        self.problems: list[Problem] = []
        self.counts: Counter[str] = Counter()
        self.find_budget = _FIND_BUDGET

    def add(self, rule_: Rule, message: str, value: object = "", offset: int | None = None,
            name: str | None = None) -> None:
        """Record a problem; with ``name``, the message names the tensor and the offset
        defaults to where that name appears in the header. Capped per rule."""
        self.counts[rule_.id] += 1
        if self.counts[rule_.id] > _PER_RULE:
            return
        evidence = value if isinstance(value, str) and value.isprintable() else _show(value)
        if name is not None:
            message = f"tensor {_show(name)}: {message}"
            offset = self.where(name) if offset is None else offset
        self.problems.append(Problem(rule_, message, evidence[:200], offset))

    def where(self, name: str) -> int | None:
        """Byte offset of ``"name"`` in the file's header (best effort, bounded work)."""
        if self.find_budget <= 0 or not _utf8(name):
            return None
        self.find_budget -= len(self.header)
        pos = self.header.find(json.dumps(name, ensure_ascii=False).encode("utf-8"))
        return None if pos < 0 else 8 + pos

    # -- framing -----------------------------------------------------------------------
    def read_json(self) -> dict[str, Any] | None:
        """Length prefix and JSON parse; ``None`` after a fatal problem."""
        size = self.blob.size
        prefix = self.blob.read_at(0, min(8, size))
        if len(prefix) < 8:
            self.add(HEADER_LENGTH, f"file is {size} bytes, shorter than the 8-byte header "
                     "length prefix", prefix.hex(), 0)
            return None
        (n,) = struct.unpack("<Q", prefix)
        cap = self.limits.max_safetensors_header
        if n == 0 or n > size - 8 or n > cap:
            why = ("is zero" if n == 0 else f"exceeds the {size - 8} bytes after the prefix"
                   if n > size - 8 else f"exceeds the {cap}-byte header cap")
            self.add(HEADER_LENGTH, f"header length {n} {why}; the prefix must be the "
                     "u64 little-endian byte size of the JSON header", str(n), 0)
            return None
        header = self.blob.read_at(8, n)
        if len(header) != n:
            self.add(HEADER_LENGTH, f"header length {n} but only {len(header)} bytes could "
                     "be read (file changed during the scan?)", str(n), 0)
            return None
        self.header, self.data_start = header, 8 + n
        if header[:1] != b"{":
            what = "a UTF-8 byte order mark" if header.startswith(b"\xef\xbb\xbf") else \
                f"byte {header[:1]!r}"
            self.add(HEADER_ENCODING, f"header starts with {what}, not '{{'; the spec requires "
                     "the JSON object to start at byte 8", header[:16].hex(), 8)
            return None
        try:
            doc = loads_strict(header, max_depth=_MAX_DEPTH)
        except JSONProblem as exc:
            offset = None if exc.offset is None else 8 + exc.offset
            if exc.kind == "duplicate_key":
                self.add(DUPLICATE_NAME, f"header has a {exc}; readers disagree on which "
                         "entry wins: give every tensor a unique name", str(exc), offset)
            else:
                self.add(HEADER_ENCODING, f"header is not strict JSON ({exc.kind}): {exc}",
                         str(exc), offset)
            return None
        if not isinstance(doc, dict):  # unreachable after the '{' check; kept fail-closed
            self.add(HEADER_ENCODING, "header JSON is not an object", doc, 8)
            return None
        # The reference reader (serde_json::from_str after the '{' check) accepts JSON
        # whitespace after the object -- space, tab, LF, CR -- and nothing else.
        body = header.rstrip(b" \t\n\r")
        if not body.endswith(b"}"):
            self.add(HEADER_ENCODING, "header is padded with bytes other than JSON "
                     "whitespace (space, tab, LF, CR) after the JSON object",
                     body[-8:].hex(), 8 + len(body) - 1)
        return doc

    # -- one entry ---------------------------------------------------------------------
    def tensor(self, name: str, entry: object) -> tuple[TensorInfo | None, tuple[int, int] | None]:
        """Check one tensor entry: (info if fully valid, well-formed offsets or None)."""
        if not isinstance(entry, dict):
            self.add(TENSOR_INFO, f"entry is {type(entry).__name__}, not an object "
                     "{dtype, shape, data_offsets}", entry, name=name)
            return None, None
        missing: list[str] = []
        extra: list[str] = []
        if entry.keys() != _FIELDS:
            missing, extra = sorted(_FIELDS - entry.keys()), sorted(entry.keys() - _FIELDS)
            parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
                [f"unknown field(s) {_show(extra)}"] if extra else [])
            self.add(TENSOR_INFO, f"{'; '.join(parts)}; an entry holds exactly dtype, shape "
                     "and data_offsets", extra or missing, name=name)
        bits = self.dtype(name, entry["dtype"]) if "dtype" in entry else None
        shape = self.shape(name, entry["shape"]) if "shape" in entry else None
        offs = self.offsets(name, entry["data_offsets"]) if "data_offsets" in entry else None
        if bits is None or shape is None:
            return None, offs
        nelem = 1
        for dim in shape:  # checked_mul fold, as the reference reader does
            nelem *= dim
            if nelem >= _U64:
                break
        nbits = nelem * bits
        if nbits >= _U64:
            self.add(SHAPE, f"shape {_show(list(shape))} x {bits} bits overflows u64 (a reader "
                     "that wraps would see a tiny tensor)", list(shape), name=name)
            return None, offs
        if nbits % 8:
            self.add(SHAPE, f"{nelem} elements of {entry['dtype']} are {nbits} bits, not a "
                     "whole number of bytes", list(shape), name=name)
            return None, offs
        if offs is None:
            return None, None
        if offs[1] - offs[0] != nbits // 8:
            self.add(OFFSET_SHAPE_MISMATCH, f"data_offsets {list(offs)} span "
                     f"{offs[1] - offs[0]} bytes but shape {_show(list(shape))} of "
                     f"{entry['dtype']} needs {nbits // 8}", list(offs),
                     self.data_start + offs[0], name)
            return None, offs
        if missing or extra:
            return None, offs
        return TensorInfo(entry["dtype"], shape, *offs), offs

    def dtype(self, name: str, value: object) -> int | None:
        if isinstance(value, str) and value in DTYPE_BITS:
            return DTYPE_BITS[value]
        self.add(DTYPE, f"unknown dtype {_show(value)}; known: {', '.join(DTYPE_BITS)}",
                 value, name=name)
        return None

    def shape(self, name: str, value: object) -> tuple[int, ...] | None:
        if type(value) is list and all(type(d) is int and 0 <= d < _I64 for d in value):
            if len(value) <= _MAX_RANK:
                return tuple(value)
            self.add(SHAPE, f"shape has {len(value)} dimensions; numpy-based readers hold at "
                     f"most {_MAX_RANK} (torch reads more): the file loads in one reader and "
                     "not in another", f"{len(value)} dimensions", name=name)
            return None
        big = type(value) is list and all(type(d) is int and 0 <= d < _U64 for d in value)
        self.add(SHAPE, f"shape {_show(value)} is not a list of non-negative integers below "
                 "2**63" + (" (torch and numpy shapes are signed 64-bit: they refuse a "
                            "dimension the reference reader's u64 accepts)" if big else ""),
                 value, name=name)
        return None

    def offsets(self, name: str, value: object) -> tuple[int, int] | None:
        if (type(value) is list and len(value) == 2 and _is_u64(value[0])
                and _is_u64(value[1]) and value[0] <= value[1]):
            return value[0], value[1]
        self.add(OFFSETS_MALFORMED, f"data_offsets {_show(value)} is not [begin, end] of "
                 "non-negative integers with begin <= end", value, name=name)
        return None

    def metadata(self, value: object) -> dict[str, str]:
        if not isinstance(value, dict):
            self.add(METADATA_TYPE, f"__metadata__ is {type(value).__name__}, not an object "
                     "of strings", value, self.where(METADATA_KEY))
            return {}
        for key, item in value.items():
            if not isinstance(item, str):
                self.add(METADATA_TYPE, f"__metadata__[{_show(key)}] is "
                         f"{type(item).__name__}, not a string; encode it as a JSON string",
                         item, self.where(METADATA_KEY))
            elif not (_utf8(key) and _utf8(item)):
                self.add(HEADER_ENCODING, f"__metadata__[{_show(key)}] holds a lone UTF-16 "
                         "surrogate escape (not valid Unicode)", key, self.where(METADATA_KEY))
        return {k: v for k, v in value.items() if isinstance(v, str)}

    # -- whole file --------------------------------------------------------------------
    def run(self) -> SafetensorsHeader | None:
        doc = self.read_json()
        if doc is None:
            return None
        metadata: dict[str, str] = {}
        tensors: dict[str, TensorInfo] = {}
        ranges: list[tuple[int, int, str]] = []
        complete = True  # every tensor has well-formed offsets
        # lone surrogates can only come from \uD800-\uDFFF escapes (UTF-8 decoding refuses them)
        surrogates = _SURROGATE_ESCAPE.search(self.header) is not None
        for index, (name, entry) in enumerate(doc.items()):
            if self.tick is not None and index % 4096 == 4095:
                self.tick()
            if name == METADATA_KEY:
                metadata = self.metadata(entry)
                continue
            if surrogates and not _utf8(name):
                self.add(HEADER_ENCODING, "the name holds a lone UTF-16 surrogate escape (not "
                         "valid Unicode)", name, name=name)
            info, offs = self.tensor(name, entry)
            if info is not None:
                tensors[name] = info
            if offs is None:
                complete = False
            else:
                ranges.append((offs[0], offs[1], name))
        self.minus_zero()
        self.path_names(doc)
        self.coverage(ranges, complete)
        self.ambiguous(doc)
        return SafetensorsHeader(tensors, metadata, len(self.header), self.data_start)

    def ambiguous(self, doc: dict[str, Any]) -> None:
        """Names that differ only in characters other readers drop or fold (written as
        ``\\u`` escapes or raw): ``scanner.core.confusable``. Policy, not malformed: each
        name is valid JSON and valid safetensors."""
        if self.header.isascii() and b"\\u" not in self.header:
            return  # plain ASCII names without escapes are their own reader keys
        for first, other in collisions(n for n in doc if n != METADATA_KEY):
            self.add(AMBIGUOUS_NAMES, f"tensor names {_show(first)} and {_show(other)} "
                     "differ only in characters other readers drop or fold (a C reader "
                     "stops at NUL; NFKC and format-character stripping make them equal)",
                     f"{first!r} / {other!r}", name=other)

    def path_names(self, doc: dict[str, Any]) -> None:
        """Tensor names that leave a folder when a converter writes a file after them
        (``name.path_escape``; ``scanner.core.pathnames``), judged after the JSON parser
        undid ``\\u`` escapes. Skipped when the header holds none of the bytes an escape
        needs (``MAY_ESCAPE``)."""
        if MAY_ESCAPE.search(self.header) is None:
            return
        for name in doc:
            why = escapes(name, nul=False) if name != METADATA_KEY else None
            if why is not None:
                self.add(NAME_PATH_ESCAPE, f"the name is a path that leaves its folder "
                         f"({why}): converters write tensors to files named after them",
                         name, name=name)

    def minus_zero(self) -> None:
        """Refuse ``-0`` in shape / data_offsets (read as 0 here, as a float elsewhere)."""
        if b"-0" not in self.header:
            return
        for match in _MINUS_ZERO.finditer(self.header):
            if match.group() == b"-0":
                pos = match.start()
                near_offsets = self.header.rfind(b'"data_offsets"', 0, pos) > max(
                    self.header.rfind(b'"shape"', 0, pos), self.header.rfind(b"}", 0, pos))
                self.add(OFFSETS_MALFORMED if near_offsets else SHAPE, "number -0 in the "
                         "header: shape and data_offsets hold unsigned integers written "
                         "without a sign (other readers parse -0 as a float)", "-0", 8 + pos)

    def coverage(self, ranges: list[tuple[int, int, str]], complete: bool) -> None:
        """The ranges, sorted by (begin, end), must tile [0, data_len) exactly."""
        data_len = self.blob.size - self.data_start
        ranges.sort()
        cursor, last = 0, None
        for begin, end, name in ranges:
            if end > data_len:
                complete = False
                self.add(OFFSET_OUT_OF_BOUNDS, f"data_offsets [{begin}, {end}] end past the "
                         f"{data_len}-byte data section (file truncated or forged)",
                         [begin, end], self.data_start + begin, name)
                continue
            if begin > cursor:
                self.add(COVERAGE_GAP, f"bytes [{cursor}, {begin}) of the data section before "
                         "it belong to no tensor", [cursor, begin], self.data_start + cursor,
                         name)
            elif begin < cursor:
                self.add(OVERLAP, f"bytes [{begin}, {end}) overlap tensor {_show(last)} (which "
                         f"ends at {cursor}); aliased weights", [begin, end],
                         self.data_start + begin, name)
            if end > cursor or last is None:
                cursor, last = max(cursor, end), name
        if complete and cursor < data_len:
            tail = self.blob.read_at(self.data_start + cursor, min(16, data_len - cursor))
            self.add(TRAILING_BYTES, f"{data_len - cursor} bytes after the last tensor (data "
                     f"section ends at {cursor}, file at {data_len})", tail.hex(),
                     self.data_start + cursor)

    def summarized(self) -> list[Problem]:
        out = list(self.problems)
        for rule_id, count in self.counts.items():
            if count > _PER_RULE:
                first = next(p for p in self.problems if p.rule.id == rule_id)
                out.append(Problem(first.rule, f"{count - _PER_RULE} more problems of this kind "
                                   "not listed", str(count)))
        return out


def _is_u64(value: object) -> bool:
    return type(value) is int and 0 <= value < _U64  # bool is not an int here


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _validate(
    blob: Blob, limits: Limits, tick: Callable[[], None] | None = None
) -> tuple[SafetensorsHeader | None, list[Problem]]:
    checker = _Checker(blob, limits, tick)
    header = checker.run()
    return header, checker.summarized()


def read_header(blob: Blob, limits: Limits) -> SafetensorsHeader:
    """Read and fully validate a safetensors header (spec: huggingface/safetensors README).

    Reads at most ``8 + N`` bytes (``N`` <= ``limits.max_safetensors_header``) plus 16 bytes
    of evidence; never tensor data. Checks framing, strict JSON, entry fields, dtypes,
    shapes (u64 overflow), offsets and that the tensors tile the data section exactly.
    Raises ``SafetensorsError`` (``rule_id`` = ``safetensors.*``) on any violation.
    """
    header, problems = _validate(blob, limits)
    if problems or header is None:
        raise SafetensorsError(problems or [Problem(HEADER_ENCODING, "header unreadable")])
    return header


def analyze_safetensors(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Scanner entry point: all format violations of ``blob`` as findings (empty = clean).

    Header-only unless ``ctx.limits.deep``, which also streams BOOL tensors to check that
    every byte is 0 or 1. Raises ``LimitHit`` when the deadline passes.
    """
    header, problems = _validate(blob, ctx.limits, ctx.check_deadline)
    findings = [p.finding(blob.name) for p in problems]
    if header is not None and not problems and ctx.limits.deep:
        findings += _deep_bools(ctx, blob, header)
    return findings


def _deep_bools(ctx: ScanContext, blob: Blob, header: SafetensorsHeader) -> list[Finding]:
    """Stream each BOOL tensor in ``_CHUNK`` reads; one finding per bad tensor."""
    findings: list[Finding] = []
    for name, info in header.tensors.items():
        if info.dtype != "BOOL" or len(findings) >= _PER_RULE:
            continue
        pos, end = header.data_start + info.begin, header.data_start + info.end
        while pos < end:
            ctx.check_deadline()
            chunk = blob.read_at(pos, min(_CHUNK, end - pos))
            if not chunk:
                findings.append(OFFSET_OUT_OF_BOUNDS.finding(
                    blob.name, f"tensor {_show(name)}: file ended at byte {pos} while "
                    "reading it (file changed during the scan?)", str(pos), pos))
                break
            bad = _NOT_BOOL.search(chunk)
            if bad is not None:
                at = pos + bad.start()
                findings.append(BOOL_VALUE.finding(
                    blob.name, f"tensor {_show(name)} (BOOL) holds byte "
                    f"0x{chunk[bad.start()]:02x} at file offset {at}; BOOL bytes must be 0 or 1",
                    f"0x{chunk[bad.start()]:02x}", at))
                break
            pos += len(chunk)
    return findings


SAFETENSORS = Format("safetensors")


def _length_prefix(h: Head) -> bool:
    """An 8-byte little-endian header length below 2**32 (the format's first field)."""
    return len(h.head) >= 8 and h.head[4:8] == b"\x00\x00\x00\x00"


SPECS = (FormatSpec(
    SAFETENSORS, analyze_safetensors, name_hints=(".safetensors",), claims=(".safetensors",),
    # A length prefix then '{' is strong evidence (before zip end records and pickles); a
    # bare prefix is tried after pickles (a protocol-4 FRAME length has zero high bytes).
    probes=(Probe(70, lambda h: _length_prefix(h) and h.head[8:9] == b"{"),
            Probe(120, _length_prefix)),
),)
