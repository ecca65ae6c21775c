"""Native executables, llamafile included: recognised from their headers, never run.

A llamafile (Mozilla-Ocho/llamafile) is an Actually Portable Executable (APE: a file that
is at once an MS-DOS/PE stub starting ``MZqFpD='``, a shell script and, after
``--assimilate``, an ELF or Mach-O binary) with the model's GGUF weights appended as a
stored zip member. Running it runs its native code, and no model loader needs an
executable, so every executable is ``format.executable`` (policy, high: refused with a
clear rule, not evidence that *loading* the folder runs code). When the executable
carries a zip (a llamafile's weights, or any zip appended to a binary) the zip is
analysed like any other (its GGUF chat template, a payload pickle in it ...).

Recognised: APE (``MZqFpD``, ``jartsr``), ELF (``\\x7fELF``), Mach-O (32/64-bit, both byte
orders; not the fat ``cafebabe`` magic, which Java class files share) and PE (``MZ``
with ``e_lfanew`` pointing to ``PE\\0\\0`` inside the first 4 KiB). Bounds: the header
bytes, plus the zip reader's own limits.

``first_embedded_image`` finds a native image inside another format's bytes (a TensorRT
engine's serialized plugin library, an ExecuTorch delegate's data), by the same header
checks, for the formats that report it.
"""

from __future__ import annotations

import re

from scanner.core.blobview import iter_chunks
from scanner.core.context import ScanContext
from scanner.core.model import Blob, Finding, Severity, Verdict
from scanner.core.rules import rule
from scanner.core.spec import Format, FormatSpec, Probe
from scanner.formats.ziplib import parse_eocd_only

EXECUTABLE = rule(
    "format.executable", Verdict.POLICY, Severity.HIGH,
    "Native executable (ELF, PE, Mach-O, APE/llamafile): running it runs its code, and no "
    "model loader needs one",
    "Remove executables from the model folder; ship the weights themselves (safetensors).",
)

APE_MAGICS = (b"MZqFpD", b"jartsr")
ELF_MAGIC = b"\x7fELF"
MACHO_MAGICS = (b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe", b"\xfe\xed\xfa\xcf", b"\xfe\xed\xfa\xce")
MAGICS = (*APE_MAGICS, ELF_MAGIC, *MACHO_MAGICS)  # the sniffer's magic numbers


def is_pe(head: bytes) -> bool:
    """A PE image: ``MZ``, then the 32-bit ``e_lfanew`` at 0x3C naming ``PE\\0\\0``."""
    if len(head) < 0x40 or head[:2] != b"MZ":
        return False
    lfanew = int.from_bytes(head[0x3C:0x40], "little")
    return 0x40 <= lfanew <= len(head) - 4 and head[lfanew:lfanew + 4] == b"PE\x00\x00"


_EMBEDDED_START = re.compile(b"|".join(re.escape(m) for m in (ELF_MAGIC, *MACHO_MAGICS, b"MZ")))
_MACHO_CPUS = {0x01000007, 0x0100000C, 7, 12, 18, 0x01000012}  # x86(_64), arm(64), ppc(64)
_MACHO_TYPES = {2, 6, 8}  # MH_EXECUTE, MH_DYLIB, MH_BUNDLE


def embedded_image_at(blob: Blob, at: int) -> str | None:
    """``"ELF image"``, ``"PE image"`` or ``"Mach-O image"`` when a native image whose
    header fields hold starts at byte ``at`` of ``blob`` (ELF: class, byte order and
    version bytes; PE: ``e_lfanew`` naming ``PE\\0\\0``; Mach-O: a known CPU type and an
    executable, library or bundle file type), else ``None``."""
    head = blob.read_at(at, 4096)
    if head.startswith(ELF_MAGIC):
        ok = head[4:5] in (b"\x01", b"\x02") and head[5:6] in (b"\x01", b"\x02") \
            and head[6:7] == b"\x01"
        return "ELF image" if ok else None
    if head.startswith(b"MZ"):
        return "PE image" if is_pe(head) else None
    little = head[:4] in MACHO_MAGICS[:2]  # cffaedfe / cefaedfe: little-endian headers
    cpu = int.from_bytes(head[4:8], "little" if little else "big")
    filetype = int.from_bytes(head[12:16], "little" if little else "big")
    return "Mach-O image" if cpu in _MACHO_CPUS and filetype in _MACHO_TYPES else None


def first_embedded_image(ctx: ScanContext, blob: Blob, start: int = 0,
                         end: int | None = None) -> tuple[int, str] | None:
    """The first native image inside ``blob[start:end]``: ``(offset in blob, kind)`` (kinds
    as :func:`embedded_image_at`), or ``None``. Read in chunks; checks the deadline."""
    for base, chunk in iter_chunks(blob, start, end, overlap=64):
        ctx.check_deadline()
        for m in _EMBEDDED_START.finditer(chunk):
            kind = embedded_image_at(blob, base + m.start())
            if kind is not None:
                return base + m.start(), kind
    return None


def kind_of(head: bytes) -> str | None:
    """``"APE"``, ``"ELF"``, ``"Mach-O"``, ``"PE"`` or ``None``."""
    if head.startswith(APE_MAGICS):
        return "APE"
    if head.startswith(ELF_MAGIC):
        return "ELF"
    if head.startswith(MACHO_MAGICS):
        return "Mach-O"
    return "PE" if is_pe(head) else None


def analyze_executable(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """``format.executable`` for the binary, plus the findings of a zip it carries (the
    zip analyzer's ``<prefix>`` view of the executable itself is not reported twice)."""
    head = blob.read_at(0, 4096)
    kind = kind_of(head) or "executable"
    zipped = blob.size >= 22 and parse_eocd_only(blob)
    what = f"{kind} executable" + (" with an embedded zip (llamafile layout)" if zipped
                                   else "")
    out = [EXECUTABLE.finding(blob.name, what, evidence=head[:8].hex())]
    if zipped:
        from scanner.formats.zip import analyze_zip

        prefix = f"{blob.name}!<prefix>"
        out += [f for f in analyze_zip(ctx, blob)
                if not (f.path == prefix and f.rule_id == EXECUTABLE.id)]
    return out


EXECUTABLE_FORMAT = Format("executable")  # ELF / PE / Mach-O / APE (llamafile)
SPECS = (FormatSpec(EXECUTABLE_FORMAT, analyze_executable, order=20, magic=MAGICS,
                    probes=(Probe(35, lambda h: is_pe(h.head)),),
                    name_hints=(".llamafile",)),)
