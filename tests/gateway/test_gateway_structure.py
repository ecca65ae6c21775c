"""Structure of ``appliance.gateway`` (issue 11): one route table that the app answers exactly
as declared. (No import cycles inside the package: the import-linter contract
``appliance-acyclic`` in pyproject.toml, run by tests/test_import_contracts.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "appliance" / "gateway"


# -- one route table ---------------------------------------------------------------------
METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")
ERROR_KEYS = {"message", "type", "param", "code"}


def _concrete(path: str) -> str:
    from gw_fake_engine import MODEL

    return path[:path.index("{")] + MODEL if "{" in path else path


def test_every_route_answers_as_declared(engine) -> None:
    """Walk the app's own table (issue 11: the router's and the Guard's tables disagreed):
    each declared method reaches the handler (no 404/405, no 5xx; HEAD = GET without the
    body), each other method is 405 with ``Allow`` = the declared methods, a non-public
    route without a key is 401, unknown paths are an OpenAI-shaped 404; refusals never reach
    the engine."""
    import asyncio

    import httpx
    from gw_helpers import AUTH, make_settings

    from appliance.gateway import create_app

    app = create_app(make_settings(engine))
    routes = app.table.routes
    assert [r.path for r in routes] == list(dict.fromkeys(r.path for r in routes))

    async def walk() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            for route in routes:
                path = _concrete(route.path)
                for method in METHODS:
                    engine.reset()
                    r = await client.request(method, path, headers=AUTH, content=b"{}")
                    where = (method, route.path, r.status_code, r.text)
                    if method in route.methods:
                        assert r.status_code not in (404, 405) and r.status_code < 500, where
                        if method == "HEAD":
                            get = await client.get(path, headers=AUTH)
                            assert (r.status_code, r.content) == (get.status_code, b""), where
                    else:
                        assert r.status_code == 405, where
                        assert r.headers["allow"] == ", ".join(route.methods), where
                        if method != "HEAD":  # HEAD: the same answer without the body
                            assert set(r.json()["error"]) >= ERROR_KEYS, where
                            assert r.json()["error"]["code"] == "method_not_allowed"
                        else:
                            assert r.content == b"", where
                        assert engine.calls == [], where
                r = await client.request(route.methods[0], path, content=b"{}")
                assert (r.status_code == 401) != route.public, (route.path, r.status_code)
            for path in ("/v1/completions", "/nope", "/v1/models/", "/health/live/",
                         "/v1/chat/completions/x", "/metrics%2F"):
                engine.reset()
                r = await client.post(path, headers=AUTH, content=b"{}")
                assert r.status_code == 404, path
                assert set(r.json()["error"]) >= ERROR_KEYS, r.text
                assert r.json()["error"]["code"] == "not_found" and engine.calls == []
        await app.state.close()

    asyncio.run(walk())


def test_route_table_refuses_ambiguous_declarations() -> None:
    from appliance.gateway.http.route_table import GET, POST, Route, RouteTable

    async def handler(scope, receive, send) -> None:  # pragma: no cover - never called
        pass

    with pytest.raises(ValueError, match="HEAD"):
        RouteTable([Route("/a", ("GET",), handler)])
    with pytest.raises(ValueError, match="twice"):
        RouteTable([Route("/a", GET, handler), Route("/a", POST, handler)])
    with pytest.raises(ValueError, match="trailing"):
        RouteTable([Route("/a/{x}/b", GET, handler)])
    table = RouteTable([Route("/m", GET, handler), Route("/m/{id}", GET, handler)])
    assert table.match("/m/x/y").path == "/m/{id}" and table.match("/m").path == "/m"
    assert table.match("/m/") is None and table.match("/M") is None


# -- one run path ------------------------------------------------------------------------
class _Started(Exception):
    pass


def test_serve_demo_and_bench_run_the_gateway_the_same_way(monkeypatch, tmp_path) -> None:
    """Issue 11: ``appliance serve`` (and the demo, which runs ``Appliance``) served through
    one function while ``bench/gateway.py`` measured another. Each now calls
    ``start_in_thread`` with the start-up heap frozen."""
    import importlib.util
    import threading

    from gw_helpers import KEY

    import appliance.gateway as gateway
    from appliance.config.policy import Policy
    from appliance.engine.launcher import EngineSpec
    from appliance.gateway.http import server
    from appliance.serve import Appliance

    calls: list[tuple[str, bool]] = []

    def fake(settings, host="127.0.0.1", port=0, timeout=10.0, *, freeze_gc=False):
        calls.append((threading.current_thread().name, freeze_gc))
        raise _Started

    monkeypatch.setattr(server, "start_in_thread", fake)
    monkeypatch.setattr(gateway, "start_in_thread", fake)
    policy = Policy()
    appliance = Appliance(policy=policy, model_dir=tmp_path, public_key=tmp_path / "k.pub",
                          api_keys=[KEY])
    spec = EngineSpec(model_dir=tmp_path, served_name="m", engine=policy.engine,
                      runtime_dir=tmp_path / "run")
    with pytest.raises(_Started):
        appliance._start_gateway(spec)  # appliance serve / appliance demo
    bench_path = PACKAGE.parents[1] / "bench" / "gateway.py"
    spec_b = importlib.util.spec_from_file_location("bench_gateway", bench_path)
    assert spec_b is not None and spec_b.loader is not None
    bench = importlib.util.module_from_spec(spec_b)
    spec_b.loader.exec_module(bench)
    with pytest.raises(_Started):
        bench.run_gateway(0, 9, None)  # bench/gateway.py's gateway process
    assert calls == [("MainThread", True), ("MainThread", True)]
