"""R serialization (``.rds``, ``.rdata``/``.rda``: ``saveRDS``/``save``), analysed without R.

An R workspace is a serialized object graph; loading it can evaluate code: promises
(``PROMSXP``) are forced when a variable is first used (CVE-2024-27322), and language
objects or closures carry calls such as ``base::system``. The stream is not evaluated or
fully parsed: the analyzer checks the header (``RDX2``/``RDX3``/``RDA``/``X``/``A``
formats, XDR) and searches the serialized symbols (``CHARSXP``: length-prefixed names)
for functions that run commands, load native code or evaluate text (``system``,
``system2``, ``shell``, ``pipe``, ``eval``, ``parse``, ``source``, ``dyn.load`` ...).
Compressed workspaces (gzip/bzip2/xz, the default) reach here through
``scanner.formats.compressed``. Sources: R Internals ch. 1.8 (serialization); CVE-2024-27322.
"""

from __future__ import annotations

import re
import struct

from scanner.core.blobview import read_bounded
from scanner.core.context import ScanContext
from scanner.core.model import Blob, Finding, Severity, Verdict
from scanner.core.rules import rule
from scanner.core.spec import Format, FormatSpec, Probe

R_NOT_ALLOWED = rule(
    "format.r_not_allowed", Verdict.POLICY, Severity.MEDIUM,
    "R serialized data (.rds/.rdata): not an allowed weight format",
    "Export the arrays from R in a trusted environment (e.g. safetensors) and ship those.",
)
R_CODE = rule(
    "r.code_execution", Verdict.MALICIOUS, Severity.CRITICAL,
    "R serialized data references functions that run commands, load native code or "
    "evaluate text (system, eval, parse, dyn.load ...): loading or using it runs code",
    "Do not load this file in R; treat the source as untrusted.",
)

MAGICS = (b"RDX2\n", b"RDX3\n", b"RDA2\n", b"RDA3\n", b"RDB2\n", b"RDB3\n")
MAX_R_BYTES = 256 << 20
DANGEROUS = ("system", "system2", "shell", "shell.exec", "pipe", "eval", "evalq", "parse",
             "source", "sys.source", "dyn.load", "library.dynam", "do.call", ".Call",
             ".External", ".Internal", ".Primitive", "Sys.setenv", "download.file", "url",
             "socketConnection", "file.remove", "unlink", "writeLines", "readRDS", "load")
# CHARSXP in XDR: flags (type 9 in the low byte, encoding bits above), int32 length, bytes.
_SYMBOL = re.compile(b"\\x00[\\x00-\\x0f][\\x00-\\xff]\\x09(....)", re.S)


def looks_like_r(head: bytes) -> bool:
    """``head`` starts an R serialization stream (workspace or single object, XDR/ascii)."""
    if head.startswith(MAGICS):
        return True
    if head[:2] in (b"X\n", b"B\n"):
        return head[2:6] in (b"\x00\x00\x00\x02", b"\x00\x00\x00\x03")
    return head[:2] == b"A\n" and head[2:4] in (b"2\n", b"3\n")


def symbols(data: bytes) -> set[str]:
    """Names of the XDR ``CHARSXP`` strings in ``data`` (symbol names and string data)."""
    out: set[str] = set()
    for m in _SYMBOL.finditer(data):
        (n,) = struct.unpack(">i", m.group(1))
        if 0 < n <= 64:
            raw = data[m.end(): m.end() + n]
            if len(raw) == n:
                out.add(raw.decode("latin-1"))
    return out


def analyze_r(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Findings for an uncompressed R serialization stream: policy, plus ``r.code_execution``
    naming each dangerous function found among its symbols."""
    data = read_bounded(blob, MAX_R_BYTES, "max_r_bytes")
    findings = [R_NOT_ALLOWED.finding(blob.name, "R serialized data",
                                      evidence=data[:5].decode("latin-1").strip())]
    found = sorted(symbols(data) & set(DANGEROUS))
    if b"\n" in data[:5] and data[:1] == b"A":  # ascii format: names are plain lines
        found = sorted({ln.decode("latin-1") for ln in data.split(b"\n")} & set(DANGEROUS))
    if found:
        findings.append(R_CODE.finding(
            blob.name, f"references {', '.join(found[:8])}", evidence=", ".join(found)[:300]))
    return findings


R = Format("r")  # R serialization (.rds, .rdata)
SPECS = (FormatSpec(R, analyze_r, probes=(Probe(40, lambda h: looks_like_r(h.head)),)),)
