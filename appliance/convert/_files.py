"""Small-file helpers of a conversion: read a config or index file with a size bound and
no symlink, write a file or fsync a folder durably, hash a file, tell the two checkpoint
layouts apart by their first bytes."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from appliance.convert import _provenance
from appliance.convert._errors import ConvertError
from appliance.convert._sources import open_file
from appliance.convert._write import file_sha256


def checkpoint_kind(fd: int) -> str:
    """``torch-zip`` or ``torch-legacy`` by the file's first bytes."""
    return "torch-zip" if os.pread(fd, 4, 0) == b"PK\x03\x04" else "torch-legacy"


MAX_COPIED_BYTES = 256 << 20


def read_small(path: Path, display: str) -> bytes:
    fds: list[int] = []
    try:
        fd, size = open_file(path, display, fds.append)
        if size > MAX_COPIED_BYTES:
            raise ConvertError(f"{display} is {size} bytes (limit {MAX_COPIED_BYTES})",
                               code="convert_limit", where=display,
                               fix="a tokenizer or config file of this size is not expected")
        data = os.pread(fd, size, 0)
        if len(data) != size:
            raise ConvertError(f"{display} changed while it was read", code="convert_io",
                               where=display, fix="retry when the folder is not being written")
        return data
    finally:
        for fd in fds:
            os.close(fd)


def hashed(path: Path, display: str, kind: str) -> _provenance.SourceFile:
    data = read_small(path, display)
    return _provenance.SourceFile(display, kind, len(data), hashlib.sha256(data).hexdigest())


def sha_path(path: Path) -> str:
    fd = os.open(path, os.O_RDONLY)
    try:
        return file_sha256(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def write_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def dumps(doc: object) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=True)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
