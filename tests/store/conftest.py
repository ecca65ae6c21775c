"""Fixtures for the store tests: a trust store, a signed servable model, an empty store."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from store_helpers import Signer, make_model

from appliance.signing import TrustedKey, TrustStore, keygen, sign
from appliance.store import Store


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
