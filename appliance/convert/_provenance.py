"""``conversion.json``: what was converted, from what, by what.

Shape (``format`` ``appliance-convert/1``)::

    {"format": "appliance-convert/1",
     "converter": {"name": "appliance convert", "version": "<appliance version>"},
     "dtype": "keep" | "bf16" | "fp16" | "fp32",
     "source": {"files": [{"path", "kind": "torch-zip" | "torch-legacy" | "index" | "copied",
                           "size", "sha256"}]},
     "tensors": [{"name", "shape", "dtype", "source_dtype", "file", "sha256"}],
     "dropped": [{"name", "kind"}],      # non-tensor values of the pickle (numbers, str)
     "files": [{"path", "size"[, "sha256"]}]}   # every other file written; sha256 for the
                                               # index and copied files (shards: per tensor)

Paths are relative to the source (a file: its name) and to the output folder. The SHA-256
of a tensor is over its bytes as written (little-endian, output dtype), so a reviewer can
check a tensor without the converter.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from appliance import __version__

FORMAT = "appliance-convert/1"
NAME = "conversion.json"


@dataclass(frozen=True)
class SourceFile:
    """A file read (or copied) by the conversion."""

    path: str
    kind: str
    size: int
    sha256: str


def record(dtype: str, sources: list[SourceFile], tensors: list[dict[str, object]],
           dropped: list[tuple[str, str]], files: list[dict[str, object]]) -> bytes:
    """The record as UTF-8 JSON (sorted keys inside entries, stable order of entries)."""
    doc = {
        "format": FORMAT,
        "converter": {"name": "appliance convert", "version": __version__},
        "dtype": dtype,
        "source": {"files": [s.__dict__ for s in sources]},
        "tensors": tensors,
        "dropped": [{"name": n, "kind": k} for n, k in dropped],
        "files": files,
    }
    return (json.dumps(doc, indent=1, ensure_ascii=True) + "\n").encode()


def write(folder: str, data: bytes) -> None:
    """Write ``conversion.json`` into ``folder`` (created, fsynced)."""
    fd = os.open(os.path.join(folder, NAME), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
