"""ExecuTorch program files (``.pte``): refused by policy, with findings for what makes the
runtime run code the file does not show, and malformed when their offsets leave the file.

Source: ExecuTorch's public "``.pte`` file format" page and ``schema/program.fbs``
(``file_identifier "ET12"``). Layout (all numbers little-endian): a FlatBuffer whose bytes
0..3 are the u32 offset of the root ``Program`` table and bytes 4..7 the file magic ``ET``
plus two ASCII digits; an optional extended header at byte 8 (magic ``eh`` plus two digits,
u32 header size >= 24, u64 size of the program data counted from byte 0, u64 offset of the
first data segment or 0, and in newer files a u64 size of the segment data); then the program
data and the appended segments. Fields read (vtable slot numbers of program.fbs):

- ``Program``: 0 ``version`` (u32), 1 ``execution_plan`` ([ExecutionPlan]), 3
  ``backend_delegate_data`` ([{0 data: [ubyte]}]), 4 ``segments`` ([{0 offset: u64,
  1 size: u64}], offsets relative to the extended header's segment base);
- ``ExecutionPlan``: 0 ``name``, 6 ``operators`` ([{0 name, 1 overload}]), 7 ``delegates``
  ([{0 id: string, 1 processed: {0 location: byte (0 inline, 1 segment), 1 index: u32}}]).

What can run code: the runtime looks every operator up by name in its kernel registry, so
an operator outside PyTorch's ``aten`` namespace needs a custom kernel library linked into
the runtime (``executorch.custom_operator``); a delegate hands an opaque, backend-compiled
blob to the named backend's code (``executorch.delegate``); and some backends load native
shared objects from their blob, so an ELF, PE or Mach-O image inside delegate data is
native code that runs on load (``executorch.native_code``, malicious). Every program is
``format.executorch_not_allowed`` (an on-device runtime format, not a weight format the
appliance serves). A file named ``.pte`` that is not recognisably a program, or whose
headers, tables, strings, vectors, segments or delegate references point outside the file
(or their region), is ``executorch.malformed``: fail closed, never clean.

The FlatBuffer is read by the small bounds-checked reader ``scanner.core.flatbuf`` (why not
the ``flatbuffers`` package: see there): every offset, vtable, string and vector is checked
against the program region before it is read, and only the handful of fields above are
read. Bounds: the program region is read into
memory up to ``MAX_PROGRAM_BYTES`` (larger: ``scanner.limit_exceeded``); at most
``MAX_ITEMS`` operators, delegates and segments in all; delegate blobs are streamed in
1 MiB windows (deadline checked).
"""

from __future__ import annotations

import struct

from scanner.core.context import LimitHit, ScanContext
from scanner.core.flatbuf import Bad, Reader
from scanner.core.model import Blob, BytesBlob, Finding, Severity, Verdict
from scanner.core.rules import rule
from scanner.core.spec import Format, FormatSpec, Probe
from scanner.formats.executable import first_embedded_image

V, S = Verdict, Severity

EXECUTORCH_NOT_ALLOWED = rule(
    "format.executorch_not_allowed", V.POLICY, S.MEDIUM,
    "ExecuTorch program (.pte): an on-device runtime program, not an allowed weight format",
    "Ship the weights as safetensors; export ExecuTorch programs on the device side from "
    "trusted sources.",
)
CUSTOM_OPERATOR = rule(
    "executorch.custom_operator", V.POLICY, S.HIGH,
    "ExecuTorch program calls operators outside PyTorch's aten namespace: the runtime runs "
    "custom kernel code for them that the file does not show",
    "Export with standard (aten) operators only, or review the custom kernel library by hand.",
)
DELEGATE = rule(
    "executorch.delegate", V.POLICY, S.HIGH,
    "ExecuTorch program hands an opaque backend-compiled blob to a delegate backend's code",
    "Export without backend delegates, or review the backend and its blob by hand.",
)
NATIVE_CODE = rule(
    "executorch.native_code", V.MALICIOUS, S.CRITICAL,
    "ExecuTorch delegate data holds a native shared library (ELF, PE or Mach-O) that a "
    "backend can load and run",
    "Do not load this program; native code must come from trusted, installed libraries.",
)
MALFORMED = rule(
    "executorch.malformed", V.MALFORMED, S.HIGH,
    "ExecuTorch program is malformed or not a program (bad magic, headers, offsets, "
    "segments or references outside the file)",
    "Re-export the program with ExecuTorch's exporter (to_executorch().write_to_file).",
)

NAMES = (".pte",)
MAX_PROGRAM_BYTES = 64 << 20  # program region (FlatBuffer) read into memory
MAX_ITEMS = 1 << 20  # operators + delegates + segments + inline blobs examined
_LISTED = 8  # names shown in one finding's evidence
_HEADER = struct.Struct("<4sIQQ")  # extended header: magic, size, program size, segment base


def looks_like_pte(head: bytes) -> bool:
    """``ET`` plus two ASCII digits at byte 4, a root offset inside the header's reach."""
    return (len(head) >= 12 and head[4:6] == b"ET" and head[6:8].isdigit()
            and 8 <= int.from_bytes(head[:4], "little"))


def _header(blob: Blob) -> tuple[int, int, int | None]:
    """(root offset, program region size, segment base or None) from the file headers."""
    head = blob.read_at(0, 40)
    if not looks_like_pte(head):
        raise Bad("not an ExecuTorch program: bytes 4..7 are not 'ET' and two digits, or the "
                  "root offset is below 8", 4)
    root = int.from_bytes(head[:4], "little")
    if head[8:10] != b"eh" or not head[10:12].isdigit():
        return root, blob.size, None
    if len(head) < _HEADER.size + 8:
        raise Bad("extended header is cut short by the end of the file", 8)
    _, size, program, base = _HEADER.unpack_from(head, 8)
    if size < 24 or 8 + size > blob.size:
        raise Bad(f"extended header size {size} is below 24 or runs past the end of the file",
                  12)
    if not 8 + size <= program <= blob.size:
        raise Bad(f"program data size {program} is outside [{8 + size}, {blob.size}] (the "
                  "headers to the end of the file)", 16)
    if base and not program <= base <= blob.size:
        raise Bad(f"segment base offset {base} is outside the file or inside the program "
                  "data", 24)
    if size >= 32 and len(head) >= 40:
        data_size = int.from_bytes(head[32:40], "little")
        if base and base + data_size > blob.size:
            raise Bad(f"segment data ({data_size} bytes from {base}) runs past the end of "
                      "the file", 32)
    return root, program, base or None


def _listed(names: list[str]) -> str:
    more = f" (+{len(names) - _LISTED} more)" if len(names) > _LISTED else ""
    return ", ".join(names[:_LISTED]) + more


def _program(ctx: ScanContext, blob: Blob) -> list[Finding]:
    root, region, base = _header(blob)
    if region > MAX_PROGRAM_BYTES:
        raise LimitHit("max_executorch_program_bytes", MAX_PROGRAM_BYTES, region)
    data = blob.read_at(0, region)
    if len(data) != region:
        raise Bad("the file is shorter than its program data", len(data))
    r = Reader(BytesBlob(blob.name, data), what="program data", max_items=MAX_ITEMS,
               limit="max_executorch_items")
    if root + 4 > region:
        raise Bad(f"root table offset {root} is outside the program data", 0)
    version = r.scalar(root, 0, 4)
    segments: list[tuple[int, int]] = []
    for table in r.tables(root, 4):
        offset, size = r.scalar(table, 0, 8), r.scalar(table, 1, 8)
        if base is None:
            raise Bad("the program lists data segments but has no extended header giving "
                      "their base offset", table)
        if base + offset + size > blob.size:
            raise Bad(f"segment {len(segments)} ({size} bytes at {base + offset}) runs past "
                      f"the end of the file ({blob.size} bytes)", table)
        segments.append((base + offset, size))
    inline: list[tuple[int, int]] = []
    for table in r.tables(root, 3):
        start, count = r.vector(table, 0, 1)
        inline.append((start, count))
    custom: list[str] = []
    delegates: list[str] = []
    blobs: list[tuple[str, int, int]] = []  # (backend id, file offset, size)
    for plan in r.tables(root, 1):
        ctx.check_deadline()
        for op in r.tables(plan, 6):
            name = r.string(op, 0) or ""
            overload = r.string(op, 1) or ""
            if not name.startswith("aten::"):
                custom.append(f"{name}.{overload}" if overload else name or "<unnamed>")
        for delegate in r.tables(plan, 7):
            backend = r.string(delegate, 0) or "<unnamed>"
            ref = r.field(delegate, 1)
            if ref is None:
                raise Bad(f"delegate {backend!r} has no processed-data reference", delegate)
            ref_table = r.deref(ref)
            location, index = r.scalar(ref_table, 0, 1), r.scalar(ref_table, 1, 4)
            pool = inline if location == 0 else segments if location == 1 else None
            if pool is None:
                raise Bad(f"delegate {backend!r} names data location {location} (0 inline, "
                          "1 segment)", ref_table)
            if index >= len(pool):
                where = "inline delegate data" if location == 0 else "segments"
                raise Bad(f"delegate {backend!r} references {where} entry {index} of "
                          f"{len(pool)}", ref_table)
            start, size = pool[index]
            delegates.append(f"{backend} ({'inline' if location == 0 else 'segment'} "
                             f"{index}, {size} bytes)")
            blobs.append((backend, start, size))
    out = [EXECUTORCH_NOT_ALLOWED.finding(blob.name, f"ExecuTorch program (schema version "
                                          f"{version}, magic {data[4:8].decode('ascii')})",
                                          evidence=data[4:8].decode("ascii"))]
    if custom:
        unique = list(dict.fromkeys(custom))
        out.append(CUSTOM_OPERATOR.finding(
            blob.name, f"{len(unique)} operator(s) outside the aten namespace",
            _listed(unique)[:300]))
    if delegates:
        out.append(DELEGATE.finding(blob.name, f"{len(delegates)} backend delegate(s)",
                                    _listed(delegates)[:300]))
    scanned: set[tuple[int, int]] = set()
    for backend, start, size in blobs:
        if (start, size) in scanned:  # delegates may share one blob: read it once
            continue
        scanned.add((start, size))
        found = first_embedded_image(ctx, blob, start, start + size)
        if found is not None:
            at, kind = found
            out.append(NATIVE_CODE.finding(
                blob.name, f"{kind} inside the data of delegate {backend!r}", kind, at))
    return out


def analyze_executorch(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Findings for an ExecuTorch program (see the module docstring)."""
    try:
        return _program(ctx, blob)
    except Bad as bad:
        return [MALFORMED.finding(blob.name, str(bad), f"offset {bad.offset}"
                                  if bad.offset is not None else "", bad.offset)]


EXECUTORCH = Format("executorch")
SPECS = (FormatSpec(EXECUTORCH, analyze_executorch, probes=(Probe(65, lambda h: looks_like_pte(
    h.head)),), name_hints=NAMES, claims=NAMES),)
