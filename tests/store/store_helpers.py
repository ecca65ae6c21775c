"""Shared helpers for the store tests: the signer record and model folders."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from appliance.signing import TrustStore


@dataclass(frozen=True)
class Signer:
    private: Path
    public: Path
    trust: TrustStore


def safetensors_bytes(count: int = 2) -> bytes:
    header = json.dumps({"w": {"dtype": "F32", "shape": [count],
                               "data_offsets": [0, 4 * count]}}).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + bytes(4 * count)


def make_model(root: Path, name: str = "src", weights: bytes | None = None) -> Path:
    model = root / name
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text('{"model_type": "tiny"}\n')
    (model / "model.safetensors").write_bytes(weights or safetensors_bytes())
    (model / "sub" / "tokenizer.json").write_text('{"version": "1.0"}\n')
    return model
