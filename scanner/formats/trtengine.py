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

from scanner.core.context import ScanContext
from scanner.core.model import Blob, Finding, Severity, Verdict
from scanner.core.rules import rule
from scanner.core.spec import Format, FormatSpec
from scanner.formats.executable import first_embedded_image

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


def analyze_tensorrt(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Policy refusal; ``tensorrt.plugin_library`` for an embedded native library."""
    findings = [TENSORRT_NOT_ALLOWED.finding(blob.name, TENSORRT_NOT_ALLOWED.title)]
    found = first_embedded_image(ctx, blob, 4)
    if found is not None:
        at, kind = found
        findings.append(PLUGIN_LIBRARY.finding(
            blob.name, f"{kind} at offset {at} inside the engine: a serialized plugin "
            "library that deserialization loads", evidence=kind, offset=at))
    return findings


TENSORRT = Format("tensorrt")
SPECS = (FormatSpec(TENSORRT, analyze_tensorrt, order=20, magic=(MAGIC,), name_hints=NAMES,
                    claims=NAMES),)
