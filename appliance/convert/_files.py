"""Small-file helpers of a conversion: read a config or index file with a size bound and
no symlink, write a file or fsync a folder durably, hash a file, tell the two checkpoint
layouts apart by their first bytes."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from appliance.convert import _provenance
from appliance.convert._sources import read_bounded
from appliance.convert._write import file_sha256


def checkpoint_kind(fd: int) -> str:
    """``torch-zip`` or ``torch-legacy`` by the file's first bytes."""
    return "torch-zip" if os.pread(fd, 4, 0) == b"PK\x03\x04" else "torch-legacy"


MAX_COPIED_BYTES = 256 << 20


def read_small(path: Path, display: str) -> bytes:
    """A tokenizer or config file copied beside the weights (at most ``MAX_COPIED_BYTES``)."""
    return read_bounded(path, display, MAX_COPIED_BYTES,
                        "a tokenizer or config file of this size is not expected")


def hashed(path: Path, display: str, kind: str) -> _provenance.SourceFile:
    data = read_small(path, display)
    return _provenance.SourceFile(display, kind, len(data), hashlib.sha256(data).hexdigest())


def sha_path(path: Path) -> str:
    fd = os.open(path, os.O_RDONLY)
    try:
        return file_sha256(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def dumps(doc: object) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=True)
