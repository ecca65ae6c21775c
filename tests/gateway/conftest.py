"""Fixtures: one fake engine per module, gateways in threads, an HTTP client, SSE parsing."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from gw_fake_engine import FakeEngine  # noqa: E402
from gw_helpers import make_settings  # noqa: E402

from appliance.gateway import GatewayHandle, start_in_thread  # noqa: E402


@pytest.fixture(scope="module")
def engine() -> Iterator[FakeEngine]:
    eng = FakeEngine().start()
    yield eng
    eng.stop()


@pytest.fixture(autouse=True)
def _reset_engine(request: pytest.FixtureRequest) -> None:
    if "engine" in request.fixturenames:
        request.getfixturevalue("engine").reset()


@pytest.fixture(scope="module")
def gateway(engine: FakeEngine) -> Iterator[GatewayHandle]:
    handle = start_in_thread(make_settings(engine))
    yield handle
    handle.stop()


@pytest.fixture
def make_gateway(engine: FakeEngine) -> Iterator[Callable[..., GatewayHandle]]:
    handles: list[GatewayHandle] = []

    def factory(**overrides: Any) -> GatewayHandle:
        handle = start_in_thread(make_settings(engine, **overrides))
        handles.append(handle)
        return handle

    yield factory
    for handle in handles:
        handle.stop()


@pytest.fixture
def client(gateway: GatewayHandle) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=10.0) as c:
        yield c
