"""Fixtures for the store tests: a trust store, a signed servable model, an empty store."""

from __future__ import annotations

import datetime as dt
import json
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest

from appliance.signing import TrustedKey, TrustStore, keygen, sign
from appliance.store import Store


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


@pytest.fixture(scope="session")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Signer:
    folder = tmp_path_factory.mktemp("store-keys")
    keygen(folder / "k.pem", folder / "k.pub", "p384")
    trust = TrustStore((TrustedKey("release", folder / "k.pub", "P-384", None,
                                   dt.datetime.now(dt.UTC) + dt.timedelta(days=1)),))
    return Signer(folder / "k.pem", folder / "k.pub", trust)


@pytest.fixture
def source(tmp_path: Path, signer: Signer) -> Path:
    model = make_model(tmp_path)
    sign(model, signer.private)
    return model


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "store")
