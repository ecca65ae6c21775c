"""Admission control and named keys: per-key limits (429 rate_limited), the global bound
(503 overloaded), the max_tokens cap, expiry, key-labelled metrics, SIGHUP-style reload of
the keys file and the audit log without dropping connections, and ``appliance keys``."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from gw_fake_engine import FakeEngine, Reply, completion
from gw_helpers import KEY, chat_body

from appliance.cli import main
from appliance.config.keys import KeyLimits, add_key, load_keys, revoke_key
from appliance.gateway import GatewayHandle


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _keys(tmp_path: Path, **limits: dict[str, Any]) -> tuple[Path, dict[str, str]]:
    path = tmp_path / "keys.json"
    plain = {name: add_key(path, name, KeyLimits(**lim)) for name, lim in limits.items()}
    return path, plain


async def _burst(url: str, key: str, n: int, **extra: Any) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=10, headers=_bearer(key)) as client:
        return list(await asyncio.gather(*(
            client.post("/v1/chat/completions", json=chat_body(**extra)) for _ in range(n))))


def test_concurrent_limit_429_with_retry_after_other_key_still_served(
        engine: FakeEngine, make_gateway: Callable[..., GatewayHandle], tmp_path: Path) -> None:
    path, plain = _keys(tmp_path, small={"concurrent": 2}, other={})
    gw = make_gateway(keys_file=path, metrics_keys=("other",))  # "other" sees every key's
    engine.reply = Reply(body=completion({"content": "hi"}), delay_s=0.5)

    async def run() -> tuple[list[httpx.Response], list[httpx.Response]]:
        small, other = await asyncio.gather(_burst(gw.url, plain["small"], 6),
                                            _burst(gw.url, plain["other"], 4))
        return small, other

    small, other = asyncio.run(run())
    codes = sorted(r.status_code for r in small)
    assert codes == [200, 200, 429, 429, 429, 429]
    for r in small:
        if r.status_code == 429:
            assert r.json()["error"]["code"] == "rate_limited"
            assert r.json()["error"]["type"] == "rate_limit_error"
            assert r.headers["retry-after"] == "1"
    # Refused at the door: every 429 is back before any admitted request (each held 0.5 s
    # by the engine), and the engine saw only the admitted ones.
    refused = [r.elapsed for r in small if r.status_code == 429]
    admitted = [r.elapsed for r in small if r.status_code == 200]
    assert max(refused) < min(admitted)
    assert len(engine.chat_calls) == 2 + 4
    assert [r.status_code for r in other] == [200] * 4
    with httpx.Client(base_url=gw.url, headers=_bearer(plain["other"])) as client:
        metrics = client.get("/metrics").text
    assert 'gateway_admission_refusals_total{key_id="small",reason="concurrent"} 4.0' in metrics
    assert 'gateway_key_requests_total{key_id="other",status="200"} 4.0' in metrics
    assert plain["small"] not in metrics


def _gauge(metrics: str, name: str) -> float:
    line = next(ln for ln in metrics.splitlines() if ln.startswith(name + " "))
    return float(line.split()[-1])


def test_in_flight_gauges_show_live_counts_when_scraped(
        engine: FakeEngine, make_gateway: Callable[..., GatewayHandle], tmp_path: Path) -> None:
    """The in-flight gauges are read when scraped (not set per request): three slow chat
    requests of one key show as 3 pending and 3 in flight for that key while they run, and
    as 0 once they have finished; the scrape itself is the one request being served."""
    path, plain = _keys(tmp_path, busy={})
    gw = make_gateway(keys_file=path)
    engine.reply = Reply(body=completion({"content": "hi"}), delay_s=1.0)

    async def run() -> tuple[str, list[httpx.Response]]:
        async with httpx.AsyncClient(base_url=gw.url, timeout=10,
                                     headers=_bearer(plain["busy"])) as client:
            chats = [asyncio.create_task(client.post("/v1/chat/completions",
                                                     json=chat_body())) for _ in range(3)]
            await asyncio.sleep(0.5)
            during = (await client.get("/metrics")).text
            return during, list(await asyncio.gather(*chats))

    during, answers = asyncio.run(run())
    assert [r.status_code for r in answers] == [200] * 3
    with httpx.Client(base_url=gw.url, headers=_bearer(plain["busy"])) as client:
        after = client.get("/metrics").text
    assert _gauge(during, "gateway_admission_pending") == 3
    assert _gauge(during, 'gateway_key_in_flight{key_id="busy"}') == 3
    assert _gauge(during, "gateway_requests_in_flight") == 4  # three chats and the scrape
    assert _gauge(after, "gateway_admission_pending") == 0
    assert _gauge(after, 'gateway_key_in_flight{key_id="busy"}') == 0
    assert _gauge(after, "gateway_requests_in_flight") == 1


def test_rpm_bucket_refuses_with_retry_after(
        engine: FakeEngine, make_gateway: Callable[..., GatewayHandle], tmp_path: Path) -> None:
    path, plain = _keys(tmp_path, slow={"rpm": 3})
    gw = make_gateway(keys_file=path)
    with httpx.Client(base_url=gw.url, headers=_bearer(plain["slow"])) as client:
        codes = [client.post("/v1/chat/completions", json=chat_body()).status_code
                 for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        refused = client.post("/v1/chat/completions", json=chat_body())
    assert refused.json()["error"]["code"] == "rate_limited"
    assert "3 requests per minute" in refused.json()["error"]["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 20  # one token every 20 s


def test_tpm_charges_prompt_and_max_tokens(
        engine: FakeEngine, make_gateway: Callable[..., GatewayHandle], tmp_path: Path) -> None:
    path, plain = _keys(tmp_path, tokens={"tpm": 300})
    gw = make_gateway(keys_file=path)
    with httpx.Client(base_url=gw.url, headers=_bearer(plain["tokens"])) as client:
        first = client.post("/v1/chat/completions", json=chat_body(max_tokens=200))
        second = client.post("/v1/chat/completions", json=chat_body(max_tokens=200))
    assert first.status_code == 200
    assert second.status_code == 429
    assert "tokens per minute" in second.json()["error"]["message"]
    assert len(engine.chat_calls) == 1


def test_global_bound_503_overloaded(engine: FakeEngine,
                                     make_gateway: Callable[..., GatewayHandle]) -> None:
    gw = make_gateway(max_pending=3)
    engine.reply = Reply(body=completion({"content": "hi"}), delay_s=0.5)
    responses = asyncio.run(_burst(gw.url, KEY, 8))
    codes = sorted(r.status_code for r in responses)
    assert codes == [200, 200, 200, 503, 503, 503, 503, 503]
    for r in responses:
        if r.status_code == 503:
            assert r.json()["error"]["code"] == "overloaded"
            assert r.headers["retry-after"] == "1"
    # the bound is released: the next request is admitted
    with httpx.Client(base_url=gw.url, headers=_bearer(KEY)) as client:
        assert client.post("/v1/chat/completions", json=chat_body()).status_code == 200


def test_key_max_tokens_cap_refuses_and_defaults(
        engine: FakeEngine, make_gateway: Callable[..., GatewayHandle], tmp_path: Path) -> None:
    path, plain = _keys(tmp_path, capped={"max_tokens": 64})
    gw = make_gateway(keys_file=path)
    with httpx.Client(base_url=gw.url, headers=_bearer(plain["capped"])) as client:
        over = client.post("/v1/chat/completions", json=chat_body(max_tokens=65))
        ok = client.post("/v1/chat/completions", json=chat_body())
    assert over.status_code == 400 and over.json()["error"]["param"] == "max_tokens"
    assert ok.status_code == 200
    assert engine.chat_calls[-1]["body"]["max_tokens"] == 64


def test_expired_key_is_unauthorized(engine: FakeEngine,
                                     make_gateway: Callable[..., GatewayHandle],
                                     tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    old = add_key(path, "old", KeyLimits(),
                  expires=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1))
    new = add_key(path, "new", KeyLimits(),
                  expires=dt.datetime.now(dt.UTC) + dt.timedelta(days=1))
    gw = make_gateway(keys_file=path, api_keys=[])
    with httpx.Client(base_url=gw.url) as client:
        assert client.get("/v1/models", headers=_bearer(old)).status_code == 401
        assert client.get("/v1/models", headers=_bearer(new)).status_code == 200
        assert client.get("/v1/models", headers=_bearer(KEY)).status_code == 401


def test_reload_adds_and_revokes_keys_and_reopens_audit_without_dropping_connections(
        engine: FakeEngine, make_gateway: Callable[..., GatewayHandle], tmp_path: Path) -> None:
    path, plain = _keys(tmp_path, alice={})
    audit = tmp_path / "audit.jsonl"
    gw = make_gateway(keys_file=path, audit_log=audit)
    transport = httpx.HTTPTransport()
    with httpx.Client(base_url=gw.url, transport=transport) as client:
        assert client.get("/v1/models", headers=_bearer(plain["alice"])).status_code == 200
        bob = add_key(path, "bob", KeyLimits())
        assert client.get("/v1/models", headers=_bearer(bob)).status_code == 401
        revoke_key(path, "alice")
        deadline = time.monotonic() + 5
        while len(audit.read_text().splitlines()) < 2:  # written after the response
            assert time.monotonic() < deadline
            time.sleep(0.01)
        audit.rename(tmp_path / "audit.jsonl.1")  # logrotate
        gw.state.reload_threadsafe()  # what SIGHUP does in `appliance serve`
        deadline = time.monotonic() + 5
        while gw.state.keys.reloads < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert client.get("/v1/models", headers=_bearer(bob)).status_code == 200
        assert client.get("/v1/models", headers=_bearer(plain["alice"])).status_code == 401
        # a broken file on reload keeps the previous keys
        path.write_text("{")
        gw.state.reload_threadsafe()
        time.sleep(0.2)
        assert client.get("/v1/models", headers=_bearer(bob)).status_code == 200
    deadline = time.monotonic() + 5
    while len(audit.read_text().splitlines()) < 3:  # records follow the responses
        assert time.monotonic() < deadline
        time.sleep(0.01)
    new_records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [r["key_id"] for r in new_records] == ["bob", None, "bob"]
    old_records = (tmp_path / "audit.jsonl.1").read_text().splitlines()
    assert len(old_records) == 2


def test_keys_cli_add_list_revoke_prints_plaintext_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "keys.json"
    assert main(["keys", "add", "--file", str(path), "--id", "ci", "--rpm", "60",
                 "--concurrent", "4", "--max-tokens", "256", "--days", "30"]) == 0
    out, err = capsys.readouterr()
    plain = out.strip()
    assert plain.startswith("sk-appl-") and "shown once" in err
    assert plain not in path.read_text()
    assert path.stat().st_mode & 0o777 == 0o600
    record = load_keys(path).keys[0]
    assert record.limits == KeyLimits(rpm=60, concurrent=4, max_tokens=256)
    assert main(["keys", "list", "--file", str(path)]) == 0
    listed = capsys.readouterr().out
    assert "ci\tsha256:" in listed and "rpm=60" in listed and plain not in listed
    assert main(["keys", "add", "--file", str(path), "--id", "ci"]) == 1
    assert "error[key_exists]" in capsys.readouterr().err
    assert main(["keys", "revoke", "--file", str(path), "--id", "ci"]) == 0
    assert load_keys(path).keys == ()
    assert main(["keys", "revoke", "--file", str(path), "--id", "ci"]) == 1
    assert "error[key_not_found]" in capsys.readouterr().err


def test_load_three_keys_no_5xx_but_overloaded_under_limit_key_served(
        engine: FakeEngine, make_gateway: Callable[..., GatewayHandle], tmp_path: Path) -> None:
    """Functional twin of bench/admission.py at 300 concurrent (bounded, loopback)."""
    path, plain = _keys(tmp_path, capped={"concurrent": 10}, metered={"rpm": 30},
                        steady={"concurrent": 100})
    gw = make_gateway(keys_file=path, max_pending=60)
    engine.reply = Reply(body=completion({"content": "hi"}), delay_s=1.0)

    async def run() -> list[tuple[str, httpx.Response]]:
        limits = httpx.Limits(max_connections=400, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=gw.url, timeout=30, limits=limits) as client:
            async def one(name: str) -> tuple[str, httpx.Response]:
                return name, await client.post("/v1/chat/completions", json=chat_body(),
                                               headers=_bearer(plain[name]))
            steady = [one("steady") for _ in range(20)]
            noisy = [one(n) for n in ("capped", "metered") for _ in range(140)]
            return list(await asyncio.gather(*steady, *noisy))

    results = asyncio.run(run())
    by: dict[tuple[str, int, str], int] = {}
    for name, resp in results:
        code = "" if resp.status_code == 200 else resp.json()["error"]["code"]
        by[(name, resp.status_code, code)] = by.get((name, resp.status_code, code), 0) + 1
        assert resp.status_code < 500 or code == "overloaded", (name, resp.status_code, code)
        if resp.status_code in (429, 503):
            assert int(resp.headers["retry-after"]) >= 1
    assert by.get(("steady", 200, ""), 0) == 20, by  # under its limit: all served
    assert by.get(("capped", 200, ""), 0) <= 10 and by.get(("capped", 429, "rate_limited"))
    assert by.get(("metered", 200, ""), 0) <= 30 and by.get(("metered", 429, "rate_limited"))
    assert sum(n for (_, s, _), n in by.items() if s == 200) <= 60
