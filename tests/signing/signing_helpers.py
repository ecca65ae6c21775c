"""Shared helpers for the signing tests: model folders, forged bundles, an open() recorder."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.signing._bundle import encode_bundle
from appliance.signing._keys import load_private_key

GOLDEN = Path(__file__).parent / "golden"


@dataclass(frozen=True)
class KeyPair:
    private: Path
    public: Path


def safetensors_bytes(values: tuple[float, ...] = (1.0, -2.0)) -> bytes:
    """A tiny valid safetensors file: one F32 tensor ``w``."""
    header = json.dumps(
        {"w": {"dtype": "F32", "shape": [len(values)], "data_offsets": [0, 4 * len(values)]}},
        separators=(",", ":"),
    ).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + struct.pack(f"<{len(values)}f", *values)


def make_model(root: Path, name: str = "model") -> Path:
    """A servable model folder: config.json, model.safetensors, tokenizer.json."""
    model = root / name
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "tiny", "hidden_size": 2}\n')
    (model / "model.safetensors").write_bytes(safetensors_bytes())
    (model / "tokenizer.json").write_text('{"version": "1.0"}\n')
    return model


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def statement_for(
    files: dict[str, str], *, name: str = "model", root: str | None = None,
    **serialization: Any,
) -> dict[str, Any]:
    """An in-toto statement listing ``files`` (name -> hex digest) in the given order."""
    if root is None:
        root = hashlib.sha256(b"".join(bytes.fromhex(d) for d in files.values())).hexdigest()
    ser: dict[str, Any] = {
        "ignore_paths": [], "allow_symlinks": False, "hash_type": "sha256", "method": "files",
    }
    ser.update(serialization)
    return {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": name, "digest": {"sha256": root}}],
        "predicateType": "https://model_signing/signature/v1.0",
        "predicate": {
            "serialization": ser,
            "resources": [
                {"algorithm": "sha256", "name": n, "digest": d} for n, d in files.items()
            ],
        },
    }


def forge(signature: Path, statement: dict[str, Any] | bytes, private_key: Path) -> None:
    """Write a bundle over ``statement`` correctly signed by ``private_key``."""
    payload = statement if isinstance(statement, bytes) else json.dumps(statement).encode()
    signature.write_bytes(encode_bundle(payload, load_private_key(private_key)))


def read_bundle(signature: Path) -> dict[str, Any]:
    bundle: dict[str, Any] = json.loads(signature.read_bytes())
    return bundle


def read_statement(signature: Path) -> dict[str, Any]:
    payload = base64.b64decode(read_bundle(signature)["dsseEnvelope"]["payload"])
    statement: dict[str, Any] = json.loads(payload)
    return statement


def write_bundle(signature: Path, bundle: dict[str, Any]) -> None:
    signature.write_text(json.dumps(bundle))


def replace_payload(signature: Path, statement: dict[str, Any]) -> None:
    """Swap in a new payload while keeping the old signature (an attacker's edit)."""
    bundle = read_bundle(signature)
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    write_bundle(signature, bundle)


_RECORDERS: list[list[str]] = []
_HOOKED = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _RECORDERS:
        target = args[0]
        text = os.fsdecode(target) if isinstance(target, (str, bytes, os.PathLike)) else repr(
            target)
        for recorder in _RECORDERS:
            recorder.append(text)


@contextmanager
def record_opens() -> Iterator[list[str]]:
    """Collect the path argument of every ``open`` audit event (builtins.open, os.open)
    raised in this process while active."""
    global _HOOKED
    if not _HOOKED:
        sys.addaudithook(_audit)
        _HOOKED = True
    opened: list[str] = []
    _RECORDERS.append(opened)
    try:
        yield opened
    finally:
        _RECORDERS.remove(opened)


def snapshot(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    """Bytes, mtime_ns and mode of every regular file under ``folder``."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            info = path.stat()
            out[path.relative_to(folder).as_posix()] = (
                path.read_bytes(), info.st_mtime_ns, info.st_mode)
    return out
