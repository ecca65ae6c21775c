"""Source-address allow-lists (issue 33): per named key, per OIDC group and for the whole
gateway; 403 ``source_not_allowed``; a forwarded-for header believed only from a configured
trusted proxy (rightmost untrusted hop); the audit record carries the source address."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from gw_fake_engine import FakeEngine
from gw_helpers import KEY, GroupIssuer, chat_body
from pydantic import ValidationError

from appliance.config.gateway import GatewayPolicy
from appliance.config.keys import KeyLimits, KeysFile, add_key, load_keys, save_keys
from appliance.config.networks import networks
from appliance.gateway import GatewayHandle
from appliance.gateway.auth.source_address import source_of


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _chat(gw: GatewayHandle, key: str, **headers: str) -> httpx.Response:
    return httpx.post(gw.url + "/v1/chat/completions", json=chat_body(), timeout=10,
                      headers={**_bearer(key), **headers})


def _set_sources(path: Path, key_id: str, sources: tuple[str, ...] | None) -> None:
    current = load_keys(path)
    keys = tuple(k.model_copy(update={"limits": k.limits.model_copy(
        update={"allowed_sources": sources})}) if k.id == key_id else k for k in current.keys)
    save_keys(path, KeysFile(keys=keys))


def _records(log: Path, count: int) -> list[dict[str, Any]]:
    """The audit log's request records, once ``count`` are there (each is written just
    after its answer is sent)."""
    deadline = time.monotonic() + 10
    while True:
        lines = log.read_text().splitlines() if log.exists() else []
        found = [r for r in map(json.loads, lines) if "request_id" in r]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def _reload(gw: GatewayHandle) -> None:
    before = gw.state.keys.reloads
    gw.state.reload_threadsafe()  # what SIGHUP does
    deadline = time.monotonic() + 10
    while gw.state.keys.reloads == before and time.monotonic() < deadline:
        time.sleep(0.02)


def test_key_limited_to_10_8_is_refused_from_loopback_and_served_once_allowed(
        make_gateway: Callable[..., GatewayHandle], engine: FakeEngine,
        tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    office = add_key(path, "office", KeyLimits(allowed_sources=("10.0.0.0/8",)))
    anywhere = add_key(path, "anywhere", KeyLimits())
    log = tmp_path / "audit.jsonl"
    gw = make_gateway(keys_file=path, audit_log=log)
    r = _chat(gw, office)
    assert r.status_code == 403
    err = r.json()["error"]
    assert err["code"] == "source_not_allowed" and err["type"] == "permission_error"
    assert "127.0.0.1" in err["message"] and "'office'" in err["message"]
    assert not engine.chat_calls  # refused before the engine is asked
    # /metrics and /v1/models are refused too: the key is barred from that address
    assert httpx.get(gw.url + "/v1/models", headers=_bearer(office)).status_code == 403
    assert _chat(gw, anywhere).status_code == 200
    _set_sources(path, "office", ("10.0.0.0/8", "127.0.0.0/8"))
    _reload(gw)
    assert _chat(gw, office).status_code == 200
    _set_sources(path, "office", ("::1/128",))  # IPv6 only: an IPv4 peer is outside
    _reload(gw)
    assert _chat(gw, office).status_code == 403
    requests = _records(log, 5)
    assert [r["error"] for r in requests if r["key_id"] == "office"] == [
        "source_not_allowed", "source_not_allowed", None, "source_not_allowed"]
    assert {r["source_address"] for r in requests} == {"127.0.0.1"}


def test_gateway_allow_list_refuses_before_the_key_and_spares_health_probes(
        make_gateway: Callable[..., GatewayHandle]) -> None:
    gw = make_gateway(allowed_sources=("192.168.0.0/16", "2001:db8::/32"))
    r = httpx.post(gw.url + "/v1/chat/completions", json=chat_body(), timeout=10)
    assert r.status_code == 403 and r.json()["error"]["code"] == "source_not_allowed"
    assert "this gateway" in r.json()["error"]["message"]
    assert _chat(gw, KEY).status_code == 403
    assert httpx.get(gw.url + "/health/live").status_code == 200
    open_gw = make_gateway(allowed_sources=("127.0.0.1/32",))
    assert _chat(open_gw, KEY).status_code == 200


def test_forwarded_for_from_an_untrusted_peer_is_ignored(
        make_gateway: Callable[..., GatewayHandle], tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    office = add_key(path, "office", KeyLimits(allowed_sources=("10.0.0.0/8",)))
    gw = make_gateway(keys_file=path)  # no trusted_proxies: the header proves nothing
    for header in ({"X-Forwarded-For": "10.1.2.3"}, {"Forwarded": "for=10.1.2.3"}):
        assert _chat(gw, office, **header).status_code == 403
    proxied = make_gateway(keys_file=path, trusted_proxies=("192.168.0.0/16",))
    assert _chat(proxied, office, **{"X-Forwarded-For": "10.1.2.3"}).status_code == 403


def test_forwarded_for_from_a_trusted_proxy_is_believed(
        make_gateway: Callable[..., GatewayHandle], tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    office = add_key(path, "office", KeyLimits(allowed_sources=("10.0.0.0/8",)))
    log = tmp_path / "audit.jsonl"
    gw = make_gateway(keys_file=path, trusted_proxies=("127.0.0.1", "172.16.0.0/12"),
                      audit_log=log)
    assert _chat(gw, office, **{"X-Forwarded-For": "10.1.2.3"}).status_code == 200
    # a spoofed left part is ignored: the rightmost untrusted hop counts
    spoofed = {"X-Forwarded-For": "10.9.9.9, 203.0.113.5"}
    assert _chat(gw, office, **spoofed).status_code == 403
    # trusted proxies on the right are skipped
    assert _chat(gw, office, **{"X-Forwarded-For": "203.0.113.5, 10.1.2.3, 172.16.0.9"}
                 ).status_code == 200
    # a hop that is no address makes the source unknown: refused (fail closed)
    assert _chat(gw, office, **{"X-Forwarded-For": "10.1.2.3, unknown"}).status_code == 403
    # the other header kind is not read (the proxies are declared to set X-Forwarded-For)
    assert _chat(gw, office, **{"Forwarded": "for=10.1.2.3"}).status_code == 403
    sources = [r["source_address"] for r in _records(log, 5)]
    assert sources == ["10.1.2.3", "203.0.113.5", "10.1.2.3", None, "127.0.0.1"]


def _scope(peer: str | None, *headers: tuple[bytes, bytes]) -> dict[str, Any]:
    return {"client": (peer, 5555) if peer else None, "headers": list(headers)}


def test_source_of_parses_forwarded_and_ipv6() -> None:
    trusted = networks(("::1/128", "10.0.0.0/8"))
    fwd = (b"forwarded", b'for="[2001:db8::7]:4711";proto=https, for=10.0.0.2')
    assert str(source_of(_scope("::1", fwd), trusted, "forwarded")) == "2001:db8::7"
    assert str(source_of(_scope("::1", fwd), trusted)) == "::1"  # XFF declared, absent
    xff = (b"x-forwarded-for", b"198.51.100.4:1234")
    assert str(source_of(_scope("10.0.0.1", xff), trusted)) == "198.51.100.4"
    assert str(source_of(_scope("10.0.0.1"), trusted)) == "10.0.0.1"  # the proxy itself
    assert source_of(_scope(None, xff), trusted) is None  # Unix socket: unknown
    two = ((b"x-forwarded-for", b"198.51.100.4"), (b"x-forwarded-for", b"10.0.0.3"))
    assert str(source_of(_scope("10.0.0.1", *two), trusted)) == "198.51.100.4"


@pytest.mark.parametrize(("value", "words"), [
    (["10.0.0.1/8"], "host bits set; did you mean '10.0.0.0/8'"),
    (["10.0.0.0/33"], "not an IPv4 or IPv6 network"),
    (["office"], "not an IPv4 or IPv6 network"),
    ([], "empty list would refuse every address"),
])
def test_policy_keys_are_validated_with_clear_errors(value: list[str], words: str) -> None:
    for field in ("allowed_sources", "trusted_proxies"):
        with pytest.raises(ValidationError, match=words):
            GatewayPolicy.model_validate({field: value})
    with pytest.raises(ValidationError, match=words):
        KeyLimits.model_validate({"allowed_sources": value})
    with pytest.raises(ValidationError, match="forwarded_header"):
        GatewayPolicy.model_validate({"forwarded_header": "x-real-ip"})


def test_oidc_group_allow_list(make_gateway: Callable[..., GatewayHandle],
                               tmp_path: Path) -> None:
    idp = GroupIssuer(tmp_path)
    gw = make_gateway(auth=idp.policy({
        "branch": KeyLimits(allowed_sources=("10.20.0.0/16",)),
        "staff": KeyLimits(allowed_sources=("127.0.0.0/8", "::1"))}))
    token = idp.token

    r = _chat(gw, token("branch"))
    assert r.status_code == 403 and r.json()["error"]["code"] == "source_not_allowed"
    assert "oidc:branch:u1" in r.json()["error"]["message"]
    assert _chat(gw, token("staff")).status_code == 200


def test_keys_add_writes_the_source_list(tmp_path: Path, capsys: Any) -> None:
    from appliance.cli import main

    path = tmp_path / "keys.json"
    assert main(["keys", "add", "--file", str(path), "--id", "office",
                 "--sources", "10.0.0.0/8, 2001:db8::/32"]) == 0
    assert load_keys(path).keys[0].limits.allowed_sources == ("10.0.0.0/8", "2001:db8::/32")
    assert main(["keys", "add", "--file", str(path), "--id", "typo",
                 "--sources", "10.0.0.1/8"]) == 1
    assert ("--sources: Value error, '10.0.0.1/8' has host bits set; did you mean "
            "'10.0.0.0/8'") in capsys.readouterr().err


@pytest.mark.parametrize(("body", "field", "words"), [
    ('[gateway]\nallowed_sources = ["10.0.0.1/8"]\n', "gateway.allowed_sources",
     "did you mean '10.0.0.0/8'"),
    ('[gateway]\ntrusted_proxies = ["proxy.corp"]\n', "gateway.trusted_proxies",
     "not an IPv4 or IPv6 network"),
    ('[auth.groups.branch]\nallowed_sources = ["10.20.0.0/33"]\n',
     "auth.groups.branch.allowed_sources", "not an IPv4 or IPv6 network"),
    ('[admission.default_limits]\nallowed_sources = []\n',
     "admission.default_limits.allowed_sources", "empty list would refuse every address"),
])
def test_a_bad_list_in_the_policy_is_policy_invalid_naming_the_key(
        tmp_path: Path, body: str, field: str, words: str) -> None:
    from appliance.config.policy import load_policy
    from appliance.errors import PolicyError

    path = tmp_path / "p.toml"
    path.write_text(body)
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert info.value.code == "policy_invalid" and field in (info.value.where or "")
    assert words in info.value.message
