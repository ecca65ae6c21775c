"""Fixtures for the signing tests: key pairs and a freshly signed model per test."""

from __future__ import annotations

from pathlib import Path

import pytest
from signing_helpers import KeyPair, make_model

from appliance.signing import keygen, sign


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    folder = tmp_path_factory.mktemp("keys")
    pair = KeyPair(folder / "signer.pem", folder / "signer.pub")
    keygen(pair.private, pair.public)
    return pair


@pytest.fixture(scope="session")
def other_keys(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    folder = tmp_path_factory.mktemp("other-keys")
    pair = KeyPair(folder / "other.pem", folder / "other.pub")
    keygen(pair.private, pair.public)
    return pair


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """An unsigned servable model folder."""
    return make_model(tmp_path)


@pytest.fixture
def signed(model: Path, keys: KeyPair) -> Path:
    """A servable model folder signed by ``keys`` into MODEL/model.sig."""
    sign(model, keys.private)
    return model
