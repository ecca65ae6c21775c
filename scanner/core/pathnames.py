"""Names that tools turn into file paths, and whether they leave their folder.

One place for every such check: archive member names and link targets (zip, tar, 7z,
OCI), file references resolved against a folder (``weight_map`` of a sharded index, ONNX
external data, Core ML), and names that converters write files after (safetensors and
GGUF tensor names, ``weight_map`` keys: google-ai-edge/mediapipe issue 6278, a converter
writing each tensor to a file named after it). The names are checked as the reader sees
them: JSON strings after the parser has undone ``\\u`` escapes (``\\u002e\\u002e/`` is
``../``), archive names after decoding (zip members also under their Info-ZIP Unicode Path
name). Both ``/`` and ``\\`` are separators (Windows tools split on either); a drive
letter (``C:``) or a leading ``/`` or ``\\`` (UNC ``\\\\host``) makes a name absolute.

``NAME_PATH_ESCAPE`` is the rule for names that are not references but become paths
(tensor names); archive members keep ``archive.path_traversal``; file references resolved
against the model folder (an index's ``weight_map``, a sentence-transformers
``modules.json`` ``path``) ``PATH_ESCAPE`` (``path.escape``).
"""

from __future__ import annotations

import posixpath
import re

from scanner.core.model import Severity, Verdict
from scanner.core.rules import rule

NAME_PATH_ESCAPE = rule(
    "name.path_escape", Verdict.MALICIOUS, Severity.CRITICAL,
    "A name that tools write files after (tensor name) is a path leaving its folder "
    "after unescaping: '..', absolute, drive letter or leading backslash "
    "(google-ai-edge/mediapipe issue 6278)",
    "Rename the tensors to plain dotted names (model.layers.0.weight) and re-export.",
)

PATH_ESCAPE = rule(
    "path.escape", Verdict.MALICIOUS, Severity.CRITICAL,
    "A file reference in the model points outside its folder ('..' or absolute path)",
    "Reference only files inside the model folder by relative names without '..'.",
)

_DRIVE = re.compile(r"^[A-Za-z]:")
_SEPARATORS = re.compile(r"[/\\]")


def escapes(name: str, *, nul: bool = True) -> str | None:
    """Why ``name`` (an archive member, a link target, a name written as a file) escapes
    its extraction folder, or ``None``. Any ``..`` component counts, even one a
    normalisation would cancel (extractors and converters do not normalise).
    ``nul=False``: a NUL byte is no reason by itself (tensor names: a C writer stops at
    it, Python's ``open`` refuses it; names equal up to a NUL are
    ``safetensors.ambiguous_names``), the rest of the name is still judged."""
    if nul and "\x00" in name:
        return "name contains a NUL byte"
    if ".." not in name and "\\" not in name and name[:1] != "/" and name[1:2] != ":":
        return None  # the common name: none of what an escape needs
    if name.startswith(("/", "\\")):
        return "absolute path"
    if _DRIVE.match(name):
        return "drive-qualified path"
    if ".." in _SEPARATORS.split(name):
        return "'..' component"
    return None


def reference_escapes(name: str) -> str | None:
    """Why a file *reference* resolved against its folder (ONNX external data, an index's
    ``weight_map``) leaves the folder, or ``None``: absolute, drive-qualified, NUL, or
    ``..`` after normalisation (``subdir/../weights.bin`` stays inside; ``sub/../../x``
    does not)."""
    if "\x00" in name:
        return "name contains a NUL byte"
    posix = name.replace("\\", "/")
    if posix.startswith("/"):
        return "absolute path"
    if _DRIVE.match(posix):
        return "drive-qualified path"
    norm = posixpath.normpath(posix)
    if norm == ".." or norm.startswith("../"):
        return "'..' leaves the folder"
    return None


def normalized(name: str) -> str:
    """Key under which extractors treat two names as the same file."""
    norm = posixpath.normpath(name.replace("\\", "/"))
    return norm.lstrip("/")


# Bytes without which no JSON-encoded name can escape (an escape needs '..', a backslash
# (also every \u escape), a leading '/', a drive letter, or a NUL (only as \u0000)).
MAY_ESCAPE = re.compile(rb'\.\.|\\|"/|"[A-Za-z]:')
