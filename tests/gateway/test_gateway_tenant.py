"""Engine cache isolation per tenant (``appliance.gateway.auth.tenant``, issue 31): the gateway
salts every forwarded request with an HMAC of its caller, refuses a client's own
``cache_salt``, and shares the salt only where ``[gateway] cache_isolation`` says so.

The timing effect on the real CPU engine is in ``tests/e2e/test_e2e_tenants.py``."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from gw_fake_engine import FakeEngine, Reply, completion
from gw_helpers import AUTH, KEY, OTHER_KEY, chat_body, make_settings

from appliance.config.gateway import GatewayPolicy
from appliance.config.keys import KeyLimits
from appliance.errors import PolicyError
from appliance.gateway import GatewayHandle, GatewaySettings, start_in_thread
from appliance.gateway.auth.keystore import KeyEntry
from appliance.gateway.auth.tenant import (
    CacheIsolation,
    cache_salt,
    own_series,
    read_secret,
    salted,
    tenant_id,
)
from appliance.gateway.http.workers import settings_payload

SECRET = "0123456789abcdef" * 4
OTHER_AUTH = {"Authorization": f"Bearer {OTHER_KEY}"}


def _entry(key_id: str) -> KeyEntry:
    return KeyEntry(key_id, b"", None, KeyLimits())


def _salts(engine: FakeEngine) -> list[str | None]:
    return [c["body"].get("cache_salt") for c in engine.chat_calls]


def _post(gw: GatewayHandle, headers: dict[str, str], path: str = "/v1/chat/completions",
          body: dict[str, object] | None = None) -> httpx.Response:
    return httpx.post(gw.url + path, json=body if body is not None else chat_body(),
                      headers=headers, timeout=10.0)


@pytest.fixture
def keyed(make_gateway: Callable[..., GatewayHandle]) -> Iterator[GatewayHandle]:
    yield make_gateway(cache_salt_key=SECRET)


def test_each_key_gets_its_own_salt_and_keeps_it(keyed: GatewayHandle,
                                                 engine: FakeEngine) -> None:
    for headers in (AUTH, OTHER_AUTH, AUTH, OTHER_AUTH):
        assert _post(keyed, headers).status_code == 200
    a1, b1, a2, b2 = _salts(engine)
    assert a1 == a2 and b1 == b2 and a1 != b1
    plain_id = hashlib.sha256(KEY.encode()).hexdigest()[:8]
    assert a1 == hmac.new(SECRET.encode(), f"key:{plain_id}".encode(),
                          hashlib.sha256).hexdigest()
    assert a1 is not None and len(a1) == 64 and plain_id not in a1


def test_responses_and_streams_are_salted_like_chat(keyed: GatewayHandle,
                                                    engine: FakeEngine) -> None:
    assert _post(keyed, AUTH).status_code == 200
    engine.reply = Reply(events=[{"id": "c", "object": "chat.completion.chunk", "created": 1,
                                  "model": "appliance-model", "choices": [{
                                      "index": 0, "delta": {"content": "hi"},
                                      "finish_reason": "stop"}]}])
    assert _post(keyed, AUTH, body=chat_body(stream=True)).status_code == 200
    engine.reply = Reply(body=completion({"content": "hi"}))
    resp = _post(keyed, AUTH, "/v1/responses",
                 {"model": "appliance-model", "input": "hello", "max_output_tokens": 8})
    assert resp.status_code == 200, resp.text
    salts = _salts(engine)
    assert len(salts) == 3 and len(set(salts)) == 1 and salts[0] is not None


def test_isolation_none_sends_no_salt(make_gateway: Callable[..., GatewayHandle],
                                      engine: FakeEngine) -> None:
    gw = make_gateway(cache_isolation="none")
    assert _post(gw, AUTH).status_code == 200
    assert _post(gw, OTHER_AUTH).status_code == 200
    assert _salts(engine) == [None, None]


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", chat_body(cache_salt="x" * 64)),
    ("/v1/responses", {"model": "appliance-model", "input": "hi", "cache_salt": "x"}),
])
def test_client_cache_salt_is_refused(keyed: GatewayHandle, engine: FakeEngine, path: str,
                                      body: dict[str, object]) -> None:
    resp = _post(keyed, AUTH, path, body)
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["code"] == "forbidden_parameter" and err["param"] == "cache_salt"
    assert "cache_isolation" in err["message"]
    assert engine.chat_calls == []


def test_salt_secret_is_shared_with_worker_processes_and_not_dumped() -> None:
    settings = make_settings(FakeEngine(), cache_salt_key=SECRET)
    assert SECRET not in settings.model_dump_json() and SECRET not in repr(settings)
    payload = settings_payload(settings)
    assert payload["cache_salt_key"] == SECRET
    assert GatewaySettings.model_validate(payload).cache_salt_key.get_secret_value() == SECRET


def test_without_a_secret_file_each_start_draws_one() -> None:
    one, two = make_settings(FakeEngine()), make_settings(FakeEngine())
    first = one.cache_salt_key.get_secret_value()
    assert len(first) == 64 and first != two.cache_salt_key.get_secret_value()


def test_secret_file_and_credential(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cache-salt").write_text(SECRET + "\n")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    settings = make_settings(FakeEngine(),
                             cache_salt_secret="${CREDENTIALS_DIRECTORY}/cache-salt")
    assert settings.cache_salt_key.get_secret_value() == SECRET
    (tmp_path / "short").write_text("too short")
    for path in (tmp_path / "short", tmp_path / "missing"):
        with pytest.raises(PolicyError) as err:
            make_settings(FakeEngine(), cache_salt_secret=str(path))
        assert err.value.code == "cache_salt_secret_invalid" and err.value.where == str(path)
        assert "too short" not in err.value.message
    (tmp_path / "binary").write_bytes(b"\xff" * 40)
    with pytest.raises(PolicyError):
        read_secret(tmp_path / "binary")


def test_policy_keys_and_their_bounds() -> None:
    policy = GatewayPolicy()
    assert policy.cache_isolation == "key" and policy.cache_salt_secret is None
    with pytest.raises(ValueError):
        GatewayPolicy(cache_isolation="tenant")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="absolute"):
        GatewayPolicy(cache_salt_secret=Path("relative/secret"))


def test_tenant_ids_for_every_kind_of_caller() -> None:
    key, group = CacheIsolation.KEY, CacheIsolation.GROUP
    assert tenant_id(_entry("alice"), key) == "key:alice"
    assert tenant_id(_entry("alice"), group) == "key:alice"  # a key is its own group
    assert tenant_id(_entry("oidc:eng:bob"), key) == "key:oidc:eng:bob"
    assert tenant_id(_entry("oidc:eng:bob"), group) == "group:eng"
    assert tenant_id(_entry("oidc:eng:carol"), group) == "group:eng"
    assert tenant_id(_entry("oidc:eng"), group) == "group:eng"  # limits_scope = "group"
    assert tenant_id(_entry("oidc:-:dave"), group) == "group:-"
    assert tenant_id(_entry("alice"), CacheIsolation.NONE) is None
    # different tenants, different salts; a group name never equals a key's tenant
    salts = {cache_salt(b"s" * 32, t) for t in ("key:eng", "group:eng", "key:oidc:eng")}
    assert len(salts) == 3


def test_salted_body_is_the_same_json_plus_the_salt() -> None:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "}"}]}).encode()
    out = json.loads(salted(body, "ab" * 32))
    assert out == {**json.loads(body), "cache_salt": "ab" * 32}
    assert json.loads(salted(b"{}", "x")) == {"cache_salt": "x"}
    with pytest.raises(ValueError):
        salted(b"[1]", "x")


def test_every_model_of_the_routing_table_is_salted(engine: FakeEngine) -> None:
    second = FakeEngine().start()
    try:
        settings = GatewaySettings(models=[{"name": "small", "upstream_url": engine.url},
                                           {"name": "coder", "upstream_url": second.url}],
                                   api_keys=[KEY], request_timeout_s=10.0,
                                   cache_salt_key=SECRET)
        handle = start_in_thread(settings)
        try:
            for model in ("small", "coder"):
                assert _post(handle, AUTH, body=chat_body(model=model)).status_code == 200
        finally:
            handle.stop()
        salts = _salts(engine) + _salts(second)
        assert len(salts) == 2 and salts[0] == salts[1] and salts[0] is not None
    finally:
        second.stop()


def _metric_keys(text: str) -> set[str]:
    return {line.split('key_id="', 1)[1].split('"', 1)[0] for line in text.splitlines()
            if 'key_id="' in line and not line.startswith("#")}


def test_metrics_show_a_key_only_its_own_per_key_series(
        make_gateway: Callable[..., GatewayHandle]) -> None:
    plain_a = hashlib.sha256(KEY.encode()).hexdigest()[:8]
    plain_b = hashlib.sha256(OTHER_KEY.encode()).hexdigest()[:8]
    gw = make_gateway(metrics_keys=(plain_b,))
    assert _post(gw, AUTH).status_code == 200
    assert _post(gw, OTHER_AUTH).status_code == 200
    mine = httpx.get(gw.url + "/metrics", headers=AUTH, timeout=10.0).text
    assert _metric_keys(mine) == {plain_a}  # A's own series, never B's
    assert "gateway_requests_total" in mine  # the aggregate series stay
    everyone = httpx.get(gw.url + "/metrics", headers=OTHER_AUTH, timeout=10.0).text
    assert _metric_keys(everyone) == {plain_a, plain_b}  # B is the monitoring key


def test_own_series_matches_the_whole_label_value() -> None:
    text = (b'# HELP x per key\n# TYPE x counter\nx_total{key_id="ali",status="200"} 1.0\n'
            b'x_total{key_id="alice",status="200"} 2.0\ny_total 3.0\n'
            b'z{key_id="a\\"b"} 4.0\n')
    assert own_series(text, "ali") == (b'# HELP x per key\n# TYPE x counter\n'
                                       b'x_total{key_id="ali",status="200"} 1.0\ny_total 3.0\n')
    assert own_series(text, 'a"b').endswith(b'y_total 3.0\nz{key_id="a\\"b"} 4.0\n')


def test_serve_refuses_an_unusable_secret_before_any_slow_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``serve``'s checks (``Appliance.check``) refuse the secret before any model is
    verified; a usable secret lets them go on to the model (here: no model folder)."""
    from appliance.config.models import ServedModel
    from appliance.config.policy import load_policy
    from appliance.errors import ApplianceError
    from appliance.serve import Appliance

    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    checked: list[str] = []

    def check_model(_policy: object, model: ServedModel, *_args: object) -> None:
        checked.append(model.served_name)
        raise ApplianceError("no model here")

    monkeypatch.setattr("appliance.serve.check_model", check_model)
    policy = load_policy(Path(__file__).resolve().parents[2] / "policies" / "cpu-demo.toml")

    def check(secret: Path) -> ApplianceError:
        app = Appliance(policy=policy.model_copy(update={"gateway": policy.gateway.model_copy(
            update={"cache_salt_secret": secret})}), model_dir=tmp_path / "none",
            public_key=tmp_path / "k.pub", api_keys=[KEY])
        try:
            with pytest.raises(ApplianceError) as err:
                app.check()
        finally:
            app.stop()
        return err.value

    for secret in (tmp_path / "missing", Path("${CREDENTIALS_DIRECTORY}/cache-salt")):
        assert check(secret).code == "cache_salt_secret_invalid"
    assert checked == []  # refused before the first model
    (tmp_path / "ok").write_text(SECRET)
    assert check(tmp_path / "ok").message == "no model here"
    assert checked == [policy.model.served_name]
