"""TensorRT serialized engines (``.engine`` / ``.plan`` / ``.trt``): refused by policy, and
malicious when they carry native plugin code.

An engine is a GPU-specific binary blob that ``IRuntime.deserializeCudaEngine`` reads; it
cannot be checked for what its kernels do, and it is not a weight format the appliance
serves (``format.tensorrt_not_allowed``). TensorRT 10 can serialize plugin libraries into
the engine (``IBuilderConfig.setPluginsToSerialize``, "plugin shared libraries" in the
TensorRT developer guide); the runtime loads them as shared objects when the engine is
deserialized, so an ELF, PE or Mach-O image inside the engine is native code that runs on
load (``tensorrt.plugin_library``, malicious). Engines start with the ASCII tag ``ftrt``
(the plan's magic tag that ``deserializeCudaEngine`` verifies); the suffixes are used as
name hints. Bounds: the file is streamed once in 1 MiB windows (deadline checked).
"""

from __future__ import annotations

import re

from scanner.core.blobview import iter_chunks
from scanner.core.context import ScanContext
from scanner.core.model import Blob, Finding, Severity, Verdict
from scanner.core.rules import rule
from scanner.core.spec import Format, FormatSpec
from scanner.formats.executable import ELF_MAGIC, MACHO_MAGICS, is_pe

TENSORRT_NOT_ALLOWED = rule(
    "format.tensorrt_not_allowed", Verdict.POLICY, Severity.MEDIUM,
    "TensorRT engine: a GPU-specific binary, not an allowed weight format",
    "Ship the weights as safetensors; build engines on the serving host from trusted sources.",
)
PLUGIN_LIBRARY = rule(
    "tensorrt.plugin_library", Verdict.MALICIOUS, Severity.CRITICAL,
    "TensorRT engine embeds a native shared library (serialized plugin) that the runtime "
    "loads when it deserializes the engine",
    "Do not deserialize this engine; plugins must come from trusted, installed libraries.",
)

MAGIC = b"ftrt"
NAMES = (".engine", ".plan", ".trt")
# candidate starts of an embedded native image; each is checked before it counts
_NATIVE = re.compile(b"|".join(re.escape(m) for m in (ELF_MAGIC, *MACHO_MAGICS, b"MZ")))
_OVERLAP = 64
_MACHO_CPUS = {0x01000007, 0x0100000C, 7, 12, 18, 0x01000012}  # x86(_64), arm(64), ppc(64)
_MACHO_LIBRARY_TYPES = {6, 8}  # MH_DYLIB, MH_BUNDLE


def _kind(blob: Blob, at: int) -> str | None:
    """What native image starts at ``at`` (header fields checked), or ``None``."""
    head = blob.read_at(at, 64)
    if head.startswith(ELF_MAGIC):
        ok = head[4:5] in (b"\x01", b"\x02") and head[5:6] in (b"\x01", b"\x02") \
            and head[6:7] == b"\x01"
        return "ELF shared object" if ok else None
    if head.startswith(b"MZ"):
        stub = blob.read_at(at, 4096)
        return "PE (Windows DLL)" if is_pe(stub) else None
    little = head[:4] in MACHO_MAGICS[:2]  # cffaedfe / cefaedfe: little-endian headers
    cpu = int.from_bytes(head[4:8], "little" if little else "big")
    filetype = int.from_bytes(head[12:16], "little" if little else "big")
    return "Mach-O library" if cpu in _MACHO_CPUS and filetype in _MACHO_LIBRARY_TYPES \
        else None


def _native_at(blob: Blob, ctx: ScanContext) -> tuple[int, str] | None:
    """Offset and kind of the first native image inside ``blob`` (after its header)."""
    for base, chunk in iter_chunks(blob, 4, overlap=_OVERLAP):
        ctx.check_deadline()
        for m in _NATIVE.finditer(chunk):
            kind = _kind(blob, base + m.start())
            if kind is not None:
                return base + m.start(), kind
    return None


def analyze_tensorrt(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Policy refusal; ``tensorrt.plugin_library`` for an embedded native library."""
    findings = [TENSORRT_NOT_ALLOWED.finding(blob.name, TENSORRT_NOT_ALLOWED.title)]
    found = _native_at(blob, ctx)
    if found is not None:
        at, kind = found
        findings.append(PLUGIN_LIBRARY.finding(
            blob.name, f"{kind} at offset {at} inside the engine: a serialized plugin "
            "library that deserialization loads", evidence=kind, offset=at))
    return findings


TENSORRT = Format("tensorrt")
SPECS = (FormatSpec(TENSORRT, analyze_tensorrt, order=20, magic=(MAGIC,), name_hints=NAMES,
                    claims=NAMES),)
