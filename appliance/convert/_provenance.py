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
from appliance.atomic_file import write_new_file

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
    """The record as UTF-8 JSON: one line per source file, tensor, dropped value and
    written file (a million tensors stay readable and diffable), in conversion order."""
    doc: dict[str, object] = {
        "format": FORMAT,
        "converter": {"name": "appliance convert", "version": __version__},
        "dtype": dtype,
        "source": {"files": [s.__dict__ for s in sources]},
        "tensors": tensors,
        "dropped": [{"name": n, "kind": k} for n, k in dropped],
        "files": files,
    }
    parts = []
    for key, value in doc.items():
        if isinstance(value, list) or key == "source":
            items = value if isinstance(value, list) else _sources_list(sources)
            inner = ",\n".join("  " + _line(v) for v in items)
            body = f"[\n{inner}\n ]" if items else "[]"
            if key == "source":
                body = '{"files": ' + body + "}"
            parts.append(f" {_line(key)}: {body}")
        else:
            parts.append(f" {_line(key)}: {_line(value)}")
    return ("{\n" + ",\n".join(parts) + "\n}\n").encode()


def _sources_list(sources: list[SourceFile]) -> list[object]:
    return [dict(s.__dict__) for s in sources]


def _line(value: object) -> str:
    return json.dumps(value, ensure_ascii=True, separators=(", ", ": "))


def write(folder: str, data: bytes) -> None:
    """Write ``conversion.json`` into ``folder`` (created, fsynced)."""
    write_new_file(os.path.join(folder, NAME), data, 0o644)
