"""OIDC / JWT bearer tokens (issue 23): a token signed by a test identity provider's key (a
JWKS file, the air-gapped set-up) is served with its group's limits beside the static keys;
expired, wrong-audience, wrong-issuer, ``alg: none``, HS256-signed-with-the-public-key,
unknown-``kid``, bad-signature and group-less tokens are refused with distinct codes; the
policy refuses symmetric algorithms; a JWKS URL is fetched trusting only the pinned CA."""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.server
import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import trustme
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from gw_fake_engine import FakeEngine
from gw_helpers import AUTH, chat_body

from appliance.config.auth import AuthPolicy, OidcPolicy
from appliance.config.keys import KeyLimits
from appliance.config.policy import load_policy
from appliance.errors import ApplianceError, PolicyError
from appliance.gateway import GatewayHandle

ISSUER = "https://idp.test/realms/corp"
AUDIENCE = "appliance"


class Idp:
    """A test identity provider: an RSA and an EC signing key, their JWKS, and tokens."""

    def __init__(self) -> None:
        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec = ec.generate_private_key(ec.SECP256R1())
        rsa_jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.rsa.public_key()))
        ec_jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self.ec.public_key()))
        self.jwks = {"keys": [{**rsa_jwk, "kid": "rsa1", "use": "sig", "alg": "RS256"},
                              {**ec_jwk, "kid": "ec1", "use": "sig"}]}
        self.rsa_public_pem = self.rsa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    def claims(self, **over: Any) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice",
                                  "groups": ["staff", "eng"], "iat": now, "exp": now + 300}
        claims.update(over)
        return {k: v for k, v in claims.items() if v is not None}

    def token(self, kid: str = "rsa1", alg: str = "RS256", key: Any = None,
              **claims: Any) -> str:
        signer = key or (self.rsa if alg.startswith(("RS", "PS")) else self.ec)
        return jwt.encode(self.claims(**claims), signer, algorithm=alg,
                          headers={"kid": kid})


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unsigned(idp: Idp, alg: str) -> str:
    head = _b64(json.dumps({"alg": alg, "kid": "rsa1", "typ": "JWT"}).encode())
    return f"{head}.{_b64(json.dumps(idp.claims()).encode())}."


def _hs256_with_public_key(idp: Idp) -> str:
    """The algorithm-confusion attack: HMAC-SHA256 keyed with the IdP's public key PEM."""
    head = _b64(json.dumps({"alg": "HS256", "kid": "rsa1", "typ": "JWT"}).encode())
    body = _b64(json.dumps(idp.claims()).encode())
    mac = hmac.new(idp.rsa_public_pem, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(mac)}"


@pytest.fixture(scope="module")
def idp() -> Idp:
    return Idp()


@pytest.fixture
def auth(idp: Idp, tmp_path: Path) -> AuthPolicy:
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(idp.jwks))
    return AuthPolicy(
        oidc=OidcPolicy(issuer=ISSUER, audience=AUDIENCE, jwks_file=jwks,
                        algorithms=("RS256", "ES256"), clock_skew_s=5),
        groups={"eng": KeyLimits(rpm=3, max_tokens=8), "ops": KeyLimits()})


@pytest.fixture
def oidc_gateway(make_gateway: Callable[..., GatewayHandle],
                 auth: AuthPolicy) -> Iterator[GatewayHandle]:
    yield make_gateway(auth=auth)


def _chat(gw: GatewayHandle, token: str, **extra: Any) -> httpx.Response:
    return httpx.post(gw.url + "/v1/chat/completions", json=chat_body(**extra), timeout=10,
                      headers={"Authorization": f"Bearer {token}"})


def test_token_is_served_with_its_groups_limits(oidc_gateway: GatewayHandle, idp: Idp,
                                                engine: FakeEngine) -> None:
    token = idp.token()
    assert _chat(oidc_gateway, token).status_code == 200
    assert engine.chat_calls  # reached the engine
    # the group's max_tokens cap (8) applies to the token's requests
    capped = _chat(oidc_gateway, token, max_tokens=9)
    assert capped.status_code == 400
    assert capped.json()["error"]["param"] == "max_tokens"
    # ... and its rpm (3): the fourth request of the minute is 429 naming the principal
    assert _chat(oidc_gateway, token).status_code == 200
    limited = _chat(oidc_gateway, token)
    assert limited.status_code == 429, limited.text
    assert "oidc:eng:alice" in limited.json()["error"]["message"]
    # limits are per subject: another user of the same group still has their own budget
    assert _chat(oidc_gateway, idp.token(sub="bob")).status_code == 200
    # an EC-signed token (other kid) from a group without limits
    ec_token = idp.token(kid="ec1", alg="ES256", groups=["ops"])
    assert all(_chat(oidc_gateway, ec_token).status_code == 200 for _ in range(4))


def test_static_keys_keep_working_beside_oidc(oidc_gateway: GatewayHandle) -> None:
    r = httpx.post(oidc_gateway.url + "/v1/chat/completions", json=chat_body(), headers=AUTH,
                   timeout=10)
    assert r.status_code == 200
    bad = httpx.post(oidc_gateway.url + "/v1/chat/completions", json=chat_body(),
                     headers={"Authorization": "Bearer sk-not-a-key-at-all-000"}, timeout=10)
    assert bad.status_code == 401
    assert bad.json()["error"]["code"] == "unauthorized"


def _refusals(idp: Idp) -> dict[str, str]:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return {
        "expired": idp.token(iat=int(time.time()) - 600, exp=int(time.time()) - 60),
        "wrong_audience": idp.token(aud="someone-else"),
        "wrong_issuer": idp.token(iss="https://evil.test/"),
        "alg_none": _unsigned(idp, "none"),
        "alg_None": _unsigned(idp, "None"),
        "hs256_public_key": _hs256_with_public_key(idp),
        "unknown_kid": idp.token(kid="rotated-away"),
        "bad_signature": idp.token(key=other),
        "not_yet_valid": idp.token(nbf=int(time.time()) + 600),
        "no_exp": idp.token(exp=None),
        "no_group": idp.token(groups=["visitors"]),
        "rs_token_on_ec_key": idp.token(kid="ec1", alg="RS256"),
    }


EXPECTED = {
    "expired": (401, "token_expired"),
    "wrong_audience": (401, "token_wrong_audience"),
    "wrong_issuer": (401, "token_wrong_issuer"),
    "alg_none": (401, "token_alg_none"),
    "alg_None": (401, "token_alg_none"),
    "hs256_public_key": (401, "token_alg_not_allowed"),
    "unknown_kid": (401, "token_unknown_kid"),
    "bad_signature": (401, "token_bad_signature"),
    "not_yet_valid": (401, "token_not_yet_valid"),
    "no_exp": (401, "token_missing_claim"),
    "no_group": (403, "token_group_not_allowed"),
    "rs_token_on_ec_key": (401, "token_alg_not_allowed"),
}


def test_bad_tokens_are_refused_with_distinct_codes(oidc_gateway: GatewayHandle, idp: Idp,
                                                    engine: FakeEngine) -> None:
    got = {}
    for name, token in _refusals(idp).items():
        r = _chat(oidc_gateway, token)
        got[name] = (r.status_code, r.json()["error"]["code"])
        assert r.headers["www-authenticate"].startswith("Bearer")
    assert got == EXPECTED
    core = ["expired", "wrong_audience", "wrong_issuer", "alg_none", "hs256_public_key",
            "unknown_kid"]
    assert len({got[name][1] for name in core}) == len(core)  # distinct codes
    assert not engine.chat_calls  # none reached the engine


def test_default_limits_serve_tokens_outside_the_group_table(
        make_gateway: Callable[..., GatewayHandle], auth: AuthPolicy, idp: Idp) -> None:
    assert auth.oidc is not None
    oidc = auth.oidc.model_copy(update={"default_limits": KeyLimits(max_tokens=4),
                                        "limits_scope": "group"})
    gw = make_gateway(auth=auth.model_copy(update={"oidc": oidc}))
    token = idp.token(groups=["visitors"])
    assert _chat(gw, token).status_code == 200
    assert _chat(gw, token, max_tokens=5).status_code == 400


def test_sighup_reload_picks_up_a_rotated_jwks(make_gateway: Callable[..., GatewayHandle],
                                               auth: AuthPolicy, idp: Idp) -> None:
    gw = make_gateway(auth=auth)
    new_key = ec.generate_private_key(ec.SECP256R1())
    token = idp.token(kid="ec2", alg="ES256", key=new_key)
    assert _chat(gw, token).json()["error"]["code"] == "token_unknown_kid"
    assert auth.oidc is not None and auth.oidc.jwks_file is not None
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(new_key.public_key()))
    auth.oidc.jwks_file.write_text(json.dumps({"keys": [*idp.jwks["keys"],
                                                        {**jwk, "kid": "ec2"}]}))
    gw.state.reload_threadsafe()
    deadline = time.monotonic() + 5
    while _chat(gw, token).status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.parametrize("alg", ["HS256", "none", "HS512"])
def test_policy_refuses_symmetric_and_none_algorithms(tmp_path: Path, alg: str) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text(f'[auth.oidc]\nissuer = "{ISSUER}"\naudience = "a"\n'
                      f'jwks_file = "jwks.json"\nalgorithms = ["RS256", "{alg}"]\n')
    with pytest.raises(PolicyError) as err:
        load_policy(policy)
    assert "auth.oidc.algorithms" in str(err.value.where)


def test_policy_reads_auth_tables(tmp_path: Path) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text(f'[auth.oidc]\nissuer = "{ISSUER}"\naudience = "a"\n'
                      'jwks_file = "jwks.json"\n[auth.groups.eng]\nrpm = 5\n'
                      '[auth.groups.ops]\ntpm = 100\n')
    loaded = load_policy(policy)
    assert loaded.auth.oidc is not None
    assert loaded.auth.oidc.jwks_file == (tmp_path / "jwks.json").resolve()
    assert list(loaded.auth.groups) == ["eng", "ops"]
    assert loaded.auth.groups["eng"].rpm == 5
    policy.write_text(f'[auth.oidc]\nissuer = "{ISSUER}"\naudience = "a"\n'
                      'jwks_url = "http://idp.test/certs"\njwks_ca = "ca.pem"\n')
    with pytest.raises(PolicyError, match="https"):
        load_policy(policy)


def test_jwks_with_a_symmetric_key_is_refused(tmp_path: Path) -> None:
    from appliance.gateway.auth.oidc import OidcVerifier

    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "x"}]}))
    with pytest.raises(ApplianceError) as err:
        OidcVerifier(AuthPolicy(oidc=OidcPolicy(issuer=ISSUER, audience=AUDIENCE,
                                                jwks_file=jwks)))
    assert err.value.code == "jwks_invalid"


class _JwksHandler(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *_: Any) -> None:
        pass


def test_jwks_url_is_fetched_trusting_only_the_pinned_ca(
        make_gateway: Callable[..., GatewayHandle], idp: Idp, tmp_path: Path) -> None:
    from appliance.gateway.auth.oidc import OidcVerifier

    ca, other_ca = trustme.CA(), trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    handler = type("H", (_JwksHandler,), {"body": json.dumps(idp.jwks).encode()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}/certs"
        pinned, wrong = tmp_path / "ca.pem", tmp_path / "other.pem"
        ca.cert_pem.write_to_path(str(pinned))
        other_ca.cert_pem.write_to_path(str(wrong))
        good = AuthPolicy(oidc=OidcPolicy(issuer=ISSUER, audience=AUDIENCE, jwks_url=url,
                                          jwks_ca=pinned), groups={"eng": KeyLimits()})
        gw = make_gateway(auth=good)
        assert _chat(gw, idp.token()).status_code == 200
        bad = good.model_copy(update={"oidc": good.oidc and good.oidc.model_copy(
            update={"jwks_ca": wrong})})
        with pytest.raises(ApplianceError) as err:
            OidcVerifier(bad)
        assert err.value.code == "jwks_invalid"
        assert "CERTIFICATE_VERIFY_FAILED" in err.value.message
    finally:
        server.shutdown()
        server.server_close()


def test_a_remembered_token_still_expires_and_dies_with_its_key(
        make_gateway: Callable[..., GatewayHandle], auth: AuthPolicy, idp: Idp) -> None:
    assert auth.oidc is not None and auth.oidc.jwks_file is not None
    oidc = auth.oidc.model_copy(update={"clock_skew_s": 0.0})
    gw = make_gateway(auth=auth.model_copy(update={"oidc": oidc}))
    short = idp.token(groups=["ops"], exp=int(time.time()) + 2)
    assert _chat(gw, short).status_code == 200
    assert _chat(gw, short).status_code == 200  # remembered
    time.sleep(max(0.0, int(time.time()) + 2 - time.time()) + 0.2)
    assert _chat(gw, short).json()["error"]["code"] == "token_expired"
    token = idp.token(groups=["ops"])
    assert _chat(gw, token).status_code == 200
    # the IdP drops the RSA key: a reload forgets the tokens it verified
    auth.oidc.jwks_file.write_text(json.dumps({"keys": idp.jwks["keys"][1:]}))
    gw.state.reload_threadsafe()
    deadline = time.monotonic() + 5
    while _chat(gw, token).status_code == 200:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert _chat(gw, token).json()["error"]["code"] == "token_unknown_kid"


def test_jwks_url_is_fetched_again_after_an_unknown_kid(
        make_gateway: Callable[..., GatewayHandle], idp: Idp, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from appliance.gateway.auth import oidc as oidc_module

    monkeypatch.setattr(oidc_module, "UNKNOWN_KID_REFETCH_S", 0.0)
    ca = trustme.CA()
    rotated = ec.generate_private_key(ec.SECP256R1())
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(rotated.public_key()))
    handler = type("H", (_JwksHandler,), {"body": json.dumps(idp.jwks).encode()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
        url = f"https://127.0.0.1:{server.server_address[1]}/certs"
        gw = make_gateway(auth=AuthPolicy(
            oidc=OidcPolicy(issuer=ISSUER, audience=AUDIENCE, jwks_url=url,
                            jwks_ca=tmp_path / "ca.pem"), groups={"eng": KeyLimits()}))
        token = idp.token(kid="ec9", alg="ES256", key=rotated)
        assert _chat(gw, token).json()["error"]["code"] == "token_unknown_kid"
        handler.body = json.dumps({"keys": [*idp.jwks["keys"], {**jwk, "kid": "ec9"}]}).encode()
        deadline = time.monotonic() + 10
        while _chat(gw, token).status_code != 200:  # each miss asks for a fetch
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("isolation", ["key", "group"])
def test_token_holders_get_the_engine_cache_of_their_tenant(
        make_gateway: Callable[..., GatewayHandle], auth: AuthPolicy, idp: Idp,
        engine: FakeEngine, isolation: str) -> None:
    """Issue 31 (appliance.gateway.auth.tenant): with "key" each subject has its own cache salt;
    with "group" the subjects of one group share one, apart from another group and from
    static keys."""
    gw = make_gateway(auth=auth, cache_isolation=isolation)
    for token in (idp.token(sub="alice"), idp.token(sub="bob"),
                  idp.token(sub="carol", groups=["ops"])):
        assert _chat(gw, token).status_code == 200
    assert httpx.post(gw.url + "/v1/chat/completions", json=chat_body(), headers=AUTH,
                      timeout=10).status_code == 200
    alice, bob, carol, key = (c["body"]["cache_salt"] for c in engine.chat_calls)
    assert len({alice, carol, key}) == 3
    assert (alice == bob) is (isolation == "group")
