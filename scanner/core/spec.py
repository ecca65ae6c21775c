"""The format registry: one ``FormatSpec`` line per format, read by the sniffer (magic
numbers at offset 0, name hints for unrecognised binary), the dispatcher (which analyzer
module and function) and the folder rules (which formats are binary containers/weights
judged by content). A new format is one analyzer module plus one line here (and, when it
is recognised by structure rather than a magic number, one predicate in
``scanner.scan.sniff``). Imports nothing but ``scanner.core.formats``: no cycles.
"""

from __future__ import annotations

from dataclasses import dataclass

from scanner.core.formats import Format


@dataclass(frozen=True)
class FormatSpec:
    """``analyzer``: (module under ``scanner``, function); ``magic``: byte strings the
    blob starts with (checked in registry order, after zip); ``name_hints``: file
    suffixes that pick this format for binary content matching nothing else; ``binary``:
    a container or weight format (a text-named file holding it is a mismatch, not text)."""

    format: Format
    analyzer: tuple[str, str]
    magic: tuple[bytes, ...] = ()
    name_hints: tuple[str, ...] = ()
    binary: bool = True


F = Format
SPECS: tuple[FormatSpec, ...] = (
    FormatSpec(F.SAFETENSORS, ("formats.safetensors", "analyze_safetensors"),
               name_hints=(".safetensors",)),
    FormatSpec(F.PICKLE, ("formats.pickle.analyze", "analyze_pickle"),
               name_hints=(".pt", ".pth", ".bin", ".pkl", ".pickle", ".ckpt", ".joblib",
                           ".dill")),
    FormatSpec(F.TORCH_LEGACY, ("formats.pickle.analyze", "analyze_torch_legacy")),
    FormatSpec(F.ZIP, ("formats.zip", "analyze_zip"), name_hints=(".zip", ".npz", ".keras")),
    FormatSpec(F.TAR, ("formats.tar", "analyze_tar")),
    FormatSpec(F.SEVENZIP, ("formats.sevenzip", "analyze_7z"), magic=(b"7z\xbc\xaf\x27\x1c",)),
    FormatSpec(F.NPY, ("formats.numpy", "analyze_npy"), magic=(b"\x93NUMPY",),
               name_hints=(".npy",)),
    FormatSpec(F.HDF5, ("formats.keras", "analyze_hdf5"), magic=(b"\x89HDF\r\n\x1a\n",),
               name_hints=(".h5", ".hdf5")),
    FormatSpec(F.GGUF, ("formats.gguf", "analyze_gguf"), magic=(b"GGUF",), name_hints=(".gguf",)),
    FormatSpec(F.ONNX, ("formats.onnx", "analyze_onnx"), name_hints=(".onnx",)),
    FormatSpec(F.COMPRESSED, ("formats.compressed", "analyze_compressed")),
    FormatSpec(F.R, ("formats.rdata", "analyze_r")),
    FormatSpec(F.TENSORFLOW, ("formats.tensorflow", "analyze_tf")),
    FormatSpec(F.TFLITE, ("formats.tensorflow", "analyze_tflite")),
    FormatSpec(F.XML, ("formats.xml", "analyze_xml"), binary=False),
    FormatSpec(F.PYTHON, ("formats.text", "analyze_python"), binary=False),
    FormatSpec(F.JINJA, ("formats.text", "analyze_template"), binary=False),
    FormatSpec(F.JSON, ("formats.text", "analyze_json"), binary=False),
    FormatSpec(F.TEXT, ("formats.text", "analyze_text"), binary=False),
    FormatSpec(F.UNKNOWN, ("formats.text", "analyze_unknown"), binary=False),
    FormatSpec(F.EMPTY, ("formats.text", "analyze_text"), binary=False),
)

BY_FORMAT: dict[Format, FormatSpec] = {s.format: s for s in SPECS}
MAGICS: tuple[tuple[bytes, Format], ...] = tuple(
    (m, s.format) for s in SPECS for m in s.magic)
NAME_HINTS: dict[str, Format] = {h: s.format for s in SPECS for h in s.name_hints}
BINARY_FORMATS: frozenset[Format] = frozenset(s.format for s in SPECS if s.binary)
