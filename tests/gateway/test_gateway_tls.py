"""TLS and mutual TLS on the gateway listener (issue 13), with certificates made at test time.

Covers: the openai SDK over TLS with the test CA; plaintext to the TLS port; TLS 1.1 and
weak TLS 1.2 suites refused with TLS alerts; mTLS require/optional refusing missing,
foreign, expired and revoked client certificates (alerts, no HTTP byte); client certificate
-> key id in the audit log; handshake failures audited without secrets; expiry metric;
reload (SIGHUP in a subprocess, and in-process) swapping the certificate for new
connections only; plaintext on a non-loopback address refused.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from cryptography import x509
from gw_fake_engine import MODEL, FakeEngine
from gw_helpers import AUTH, KEY, make_settings
from gw_tls import Pki, exchange, peer_certificate, serial, write_crl

from appliance.errors import PolicyError, TlsError
from appliance.gateway import GatewayHandle, start_in_thread
from appliance.gateway.auth.tls import build_context
from appliance.gateway.http.server import make_config

REPO = Path(__file__).resolve().parents[2]
AEAD_TLS12 = {"ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384",
              "ECDHE-ECDSA-CHACHA20-POLY1305"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def tls_gateway(engine: FakeEngine, pki: Pki, tmp_path: Path
                ) -> Iterator[Callable[..., GatewayHandle]]:
    handles: list[GatewayHandle] = []

    def factory(**tls: Any) -> GatewayHandle:
        handle = start_in_thread(make_settings(engine, tls=pki.policy(**tls),
                                               audit_log=tmp_path / "audit.jsonl"))
        handles.append(handle)
        return handle

    yield factory
    for handle in handles:
        handle.stop()


def audit(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def _reason(error: BaseException | None) -> str | None:
    return getattr(error, "reason", None)


# -- server TLS -------------------------------------------------------------------------------

def test_openai_sdk_talks_to_the_gateway_over_tls_with_the_test_ca(tls_gateway, pki):
    gw = tls_gateway()
    assert gw.url.startswith("https://127.0.0.1:")
    with httpx.Client(verify=pki.context(), timeout=10) as http:
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, http_client=http,
                               max_retries=0)
        answer = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content == "hi"
        assert [m.id for m in client.models.list()] == [MODEL]
    # Without the test CA the SDK refuses the gateway's certificate.
    with httpx.Client(timeout=10) as http:
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, http_client=http,
                               max_retries=0)
        with pytest.raises(openai.APIConnectionError):
            client.models.list()


def test_plaintext_http_to_the_tls_port_gets_no_http_answer(tls_gateway, tmp_path):
    gw = tls_gateway()
    with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as sock:
        sock.sendall(b"GET /health/live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert sock.recv(4096) == b""  # closed at once, no HTTP status line
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{gw.port}/health/live", timeout=5)
    assert wait_for(lambda: any(r.get("reason") == "http_request" for r in audit(tmp_path)))


def test_tls11_is_refused_with_a_protocol_version_alert(tls_gateway, pki):
    gw = tls_gateway()
    ctx = pki.context()
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # let the client offer TLS 1.1 at all
    ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    data, error = exchange(gw.port, ctx)
    assert data == b"" and _reason(error) == "TLSV1_ALERT_PROTOCOL_VERSION"


@pytest.mark.parametrize("cipher", ["ECDHE-ECDSA-AES128-SHA", "ECDHE-ECDSA-AES256-SHA384",
                                    "ECDHE-ECDSA-AES128-SHA256", "ECDHE-ECDSA-NULL-SHA"])
def test_weak_tls12_suites_are_refused(tls_gateway, pki, cipher):
    gw = tls_gateway()
    ctx = pki.context()
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(f"{cipher}:@SECLEVEL=0")  # raises if this OpenSSL cannot offer it
    data, error = exchange(gw.port, ctx)
    assert data == b"" and _reason(error) == "SSLV3_ALERT_HANDSHAKE_FAILURE"
    strong = pki.context()  # control: the same client with an AEAD suite is served
    strong.maximum_version = ssl.TLSVersion.TLSv1_2
    strong.set_ciphers("ECDHE-ECDSA-AES128-GCM-SHA256")
    data, error = exchange(gw.port, strong)
    assert error is None and data.startswith(b"HTTP/1.1 401")


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_tls12_and_13_negotiate_aead_without_compression(tls_gateway, pki, version):
    gw = tls_gateway()
    ctx = pki.context()
    ctx.minimum_version = ctx.maximum_version = version
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        name, protocol, _bits = sock.cipher()
        assert protocol == ("TLSv1.3" if version == ssl.TLSVersion.TLSv1_3 else "TLSv1.2")
        assert name in AEAD_TLS12 or name.startswith("TLS_") and (
            "GCM" in name or "CHACHA20_POLY1305" in name)
        assert sock.compression() is None
        assert sock.selected_alpn_protocol() == "http/1.1"


def test_server_context_allows_only_tls12_13_aead_no_compression_no_renegotiation(pki):
    ctx = build_context(pki.policy())
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.maximum_version == ssl.TLSVersion.TLSv1_3
    assert ctx.options & ssl.OP_NO_COMPRESSION and ctx.options & ssl.OP_NO_RENEGOTIATION
    ciphers = ctx.get_ciphers()
    assert ciphers and all(c["aead"] for c in ciphers), [c["name"] for c in ciphers]
    assert {c["protocol"] for c in ciphers} <= {"TLSv1.2", "TLSv1.3"}
    assert all(c["kea"] in ("kx-ecdhe", "kx-any") for c in ciphers)


# -- mutual TLS -------------------------------------------------------------------------------

@pytest.mark.parametrize(("client", "version", "alert"), [
    (None, ssl.TLSVersion.TLSv1_3, "TLSV13_ALERT_CERTIFICATE_REQUIRED"),
    (None, ssl.TLSVersion.TLSv1_2, "SSLV3_ALERT_HANDSHAKE_FAILURE"),
    ("rogue", ssl.TLSVersion.TLSv1_3, "TLSV1_ALERT_UNKNOWN_CA"),
    ("rogue", ssl.TLSVersion.TLSv1_2, "TLSV1_ALERT_UNKNOWN_CA"),
    ("expired", ssl.TLSVersion.TLSv1_3, "SSLV3_ALERT_CERTIFICATE_EXPIRED"),
    ("revoked", ssl.TLSVersion.TLSv1_3, "SSLV3_ALERT_CERTIFICATE_REVOKED"),
])
def test_mtls_require_refuses_with_a_tls_alert_and_no_http_byte(
        tls_gateway, pki, client, version, alert):
    gw = tls_gateway(client_auth="require")
    ctx = pki.context(client)
    ctx.maximum_version = version
    data, error = exchange(gw.port, ctx, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n"
                           b"Authorization: Bearer " + KEY.encode() + b"\r\n\r\n")
    assert data == b"" and _reason(error) == alert
    data, error = exchange(gw.port, pki.context("billing"))  # control: a good certificate
    assert error is None and data.startswith(b"HTTP/1.1 200")


def test_mapped_client_certificate_is_the_key_id_for_the_sdk_and_the_audit_log(
        tls_gateway, pki, tmp_path):
    gw = tls_gateway(client_auth="require")
    with httpx.Client(verify=pki.context("billing"), timeout=10) as http:
        # The SDK always sends a bearer header; a mapped certificate makes it irrelevant.
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="unused-with-mtls",
                               http_client=http, max_retries=0)
        answer = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content == "hi"
    with httpx.Client(verify=pki.context("unmapped"), timeout=10) as http:
        # A verified certificate no rule maps admits the connection; the key is still needed.
        assert http.get(gw.url + "/v1/models").status_code == 401
        assert http.get(gw.url + "/v1/models", headers=AUTH).status_code == 200
    requests = [r for r in audit(tmp_path) if "request_id" in r]
    assert [(r["route"], r["status"], r["key_id"]) for r in requests] == [
        ("/v1/chat/completions", 200, "billing"), ("/v1/models", 401, None),
        ("/v1/models", 200, requests[2]["key_id"])]
    assert requests[2]["key_id"] not in (None, "billing")  # the API key's own id


def test_mtls_optional_accepts_no_certificate_but_still_refuses_bad_ones(tls_gateway, pki):
    gw = tls_gateway(client_auth="optional")
    with httpx.Client(verify=pki.context(), timeout=10) as http:
        assert http.get(gw.url + "/v1/models").status_code == 401
        assert http.get(gw.url + "/v1/models", headers=AUTH).status_code == 200
    with httpx.Client(verify=pki.context("billing"), timeout=10) as http:
        assert http.get(gw.url + "/v1/models").status_code == 200
    for bad, alert in (("rogue", "TLSV1_ALERT_UNKNOWN_CA"),
                       ("expired", "SSLV3_ALERT_CERTIFICATE_EXPIRED"),
                       ("revoked", "SSLV3_ALERT_CERTIFICATE_REVOKED")):
        data, error = exchange(gw.port, pki.context(bad))
        assert data == b"" and _reason(error) == alert, bad


def test_bearer_required_makes_the_certificate_admission_only(tls_gateway, pki):
    gw = tls_gateway(client_auth="require", client_ids=[], bearer_required=True)
    with httpx.Client(verify=pki.context("billing"), timeout=10) as http:
        assert http.get(gw.url + "/v1/models").status_code == 401
        assert http.get(gw.url + "/v1/models", headers=AUTH).status_code == 200


def test_handshake_failures_are_audited_and_counted_without_secrets(tls_gateway, pki, tmp_path):
    gw = tls_gateway(client_auth="require")
    for client in (None, "rogue", "expired", "revoked"):
        exchange(gw.port, pki.context(client))
    wanted = {"peer_did_not_return_a_certificate", "unable_to_get_local_issuer_certificate",
              "certificate_has_expired", "certificate_revoked"}
    assert wait_for(lambda: wanted <= {r.get("reason") for r in audit(tmp_path)})
    events = [r for r in audit(tmp_path) if r.get("event") == "tls_handshake_failed"]
    assert {tuple(sorted(r)) for r in events} == {  # seq, prev: the audit chain
        ("detail", "event", "prev", "reason", "seq", "ts")}
    text = (tmp_path / "audit.jsonl").read_text()
    for secret in (pki.server.private_key_pem, pki.clients["rogue"].private_key_pem):
        body = secret.bytes().decode().splitlines()[1]
        assert body not in text and "PRIVATE KEY" not in text
    with httpx.Client(verify=pki.context("billing"), timeout=10) as http:
        metrics = http.get(gw.url + "/metrics").text
    assert 'gateway_tls_handshake_failures_total{reason="certificate_revoked"} 1.0' in metrics
    expiry = next(float(line.split()[1]) for line in metrics.splitlines()
                  if line.startswith("gateway_tls_certificate_expiry_seconds "))
    not_after = min(c.not_valid_after_utc for c in [peer_certificate(gw.port, pki.context())])
    assert abs(expiry - (not_after.timestamp() - time.time())) < 60
    assert "gateway_tls_crl_next_update_seconds" in metrics


# -- reload -----------------------------------------------------------------------------------

def _install_new_server_cert(pki: Pki, root: Path, name: str) -> tuple[Path, Path, str]:
    """A fresh policy folder holding server certificate ``name``; returns (cert, key, CN)."""
    leaf = pki.ca.issue_cert("127.0.0.1", "localhost", common_name=name)
    cert, key = root / "server.pem", root / "server.key"
    cert.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    key.write_bytes(leaf.private_key_pem.bytes())
    return cert, key, name


def _cn(cert: Any) -> str:
    return str(cert.subject.rfc4514_string())


def test_reload_serves_the_new_certificate_to_new_connections_only(engine, pki, tmp_path):
    cert, key, _ = _install_new_server_cert(pki, tmp_path, "before-reload")
    gw = start_in_thread(make_settings(engine, tls=pki.policy(certificate=cert,
                                                              private_key=key)))
    try:
        ctx = pki.context()
        conn = http.client.HTTPSConnection("127.0.0.1", gw.port, context=ctx, timeout=5)
        conn.request("GET", "/v1/models", headers=AUTH)
        assert conn.getresponse().read() and "before-reload" in _cn(peer_certificate(
            gw.port, ctx))
        _install_new_server_cert(pki, tmp_path, "after-reload")
        assert gw.reload_tls() is True
        assert "after-reload" in _cn(peer_certificate(gw.port, ctx))
        conn.request("GET", "/v1/models", headers=AUTH)  # the open connection lives on
        response = conn.getresponse()
        assert response.status == 200 and response.read()
        assert conn.sock is not None and "before-reload" in _cn(
            x509.load_der_x509_certificate(conn.sock.getpeercert(binary_form=True)))
        conn.close()
        key.write_bytes(pki.clients["billing"].private_key_pem.bytes())  # wrong key
        assert gw.reload_tls() is False  # refused: the previous certificate stays
        assert "after-reload" in _cn(peer_certificate(gw.port, ctx))
    finally:
        gw.stop()


def test_reload_picks_up_a_new_crl(engine, pki, tmp_path):
    crl = write_crl(pki.client_ca, tmp_path / "crl.pem", [])
    gw = start_in_thread(make_settings(engine, tls=pki.policy(client_auth="require", crl=crl)))
    try:
        data, error = exchange(gw.port, pki.context("revoked"))
        assert error is None and data.startswith(b"HTTP/1.1 200")  # not revoked yet
        write_crl(pki.client_ca, crl, [serial(pki.clients["revoked"])])
        assert gw.reload_tls() is True
        data, error = exchange(gw.port, pki.context("revoked"))
        assert data == b"" and _reason(error) == "SSLV3_ALERT_CERTIFICATE_REVOKED"
    finally:
        gw.stop()


SERVE_SCRIPT = """
import sys
from pathlib import Path
from appliance.gateway import GatewaySettings, serve_until_signal
settings = GatewaySettings.model_validate_json(Path(sys.argv[1]).read_text())
serve_until_signal(settings, "127.0.0.1", int(sys.argv[2]))
"""


def test_sighup_swaps_the_certificate_in_a_served_process(engine, pki, tmp_path):
    """Time-boxed: ~2-4 s (a gateway subprocess start)."""
    cert, key, _ = _install_new_server_cert(pki, tmp_path, "before-sighup")
    settings = make_settings(engine, tls=pki.policy(certificate=cert, private_key=key))
    (tmp_path / "settings.json").write_text(settings.model_dump_json())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", SERVE_SCRIPT, str(tmp_path / "settings.json"),
                             str(port)], env=env)
    ctx = pki.context()
    try:
        def up() -> bool:
            try:
                return "before-sighup" in _cn(peer_certificate(port, ctx))
            except OSError:
                return False

        assert wait_for(up, timeout=30)
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=5)
        conn.request("GET", "/v1/models", headers=AUTH)
        assert conn.getresponse().read()
        _install_new_server_cert(pki, tmp_path, "after-sighup")
        proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: "after-sighup" in _cn(peer_certificate(port, ctx)))
        conn.request("GET", "/v1/models", headers=AUTH)  # not dropped by the reload
        assert conn.getresponse().status == 200
        conn.close()
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(10)


# -- plaintext refusal ------------------------------------------------------------------------

def test_plaintext_on_a_non_loopback_address_is_refused_before_binding(engine, pki):
    settings = make_settings(engine)
    for host in ("0.0.0.0", "::", "10.1.2.3", "gateway.corp"):
        with pytest.raises(PolicyError) as refused:
            start_in_thread(settings, host, 0)
        assert refused.value.code == "plaintext_not_allowed"
    # TLS, or the explicit opt-out, make the same host acceptable (config only: no bind).
    assert make_config(make_settings(engine, tls=pki.policy()), "0.0.0.0", 0).tls is not None
    assert make_config(make_settings(engine, allow_plaintext=True), "0.0.0.0", 0).tls is None


def test_unusable_tls_files_stop_the_gateway_at_start(engine, pki, tmp_path):
    wrong_key = tmp_path / "wrong.key"
    wrong_key.write_bytes(pki.clients["billing"].private_key_pem.bytes())
    with pytest.raises(TlsError) as refused:
        start_in_thread(make_settings(engine, tls=pki.policy(private_key=wrong_key)))
    assert refused.value.code == "tls_key_mismatch"


def test_appliance_wait_reloads_tls_on_sighup(engine, pki, tmp_path):
    """The production path: `appliance serve` waits in Appliance.wait (main thread)."""
    import threading

    from appliance.config.policy import Policy
    from appliance.serve import Appliance

    cert, key, _ = _install_new_server_cert(pki, tmp_path, "before-hup")
    gw = start_in_thread(make_settings(engine, tls=pki.policy(certificate=cert,
                                                              private_key=key)))
    app = Appliance(policy=Policy(), model_dir=tmp_path, public_key=tmp_path / "k.pub",
                    api_keys=[KEY], gateway=gw)
    seen: list[str] = []

    def operator() -> None:
        try:
            ctx = pki.context()
            seen.append(_cn(peer_certificate(gw.port, ctx)))
            _install_new_server_cert(pki, tmp_path, "after-hup")
            os.kill(os.getpid(), signal.SIGHUP)
            wait_for(lambda: "after-hup" in _cn(peer_certificate(gw.port, ctx)))
            seen.append(_cn(peer_certificate(gw.port, ctx)))
        finally:
            os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=operator)
    thread.start()
    assert app.wait() == 128 + signal.SIGTERM  # stopped by SIGTERM (issue 36)
    thread.join(10)
    assert "before-hup" in seen[0] and "after-hup" in seen[1]
    assert app.gateway is None  # stopped by wait()


def _der_cert(cn: str, sans: list[x509.GeneralName]) -> bytes:
    import datetime as dt

    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Corp"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = dt.datetime.now(dt.UTC)
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now).not_valid_after(now + dt.timedelta(days=1)))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)


def test_client_id_rules_match_subject_and_san_fields_exactly_first_match_wins():
    from appliance.config.tls import ClientIdRule
    from appliance.gateway.auth.tls import client_key_id

    der = _der_cert("svc-a", [x509.DNSName("a.svc.corp"), x509.RFC822Name("ops@corp.example"),
                              x509.UniformResourceIdentifier("spiffe://corp/ns/a/sa/api")])
    bare = _der_cert("svc-b", [])

    def rules(*pairs: tuple[str, str, str]) -> tuple[ClientIdRule, ...]:
        return tuple(ClientIdRule.model_validate({"key_id": k, f: v}) for k, f, v in pairs)

    assert client_key_id(rules(("s", "subject", "CN=svc-a,O=Corp")), der) == "s"
    assert client_key_id(rules(("c", "subject_cn", "svc-a")), der) == "c"
    assert client_key_id(rules(("d", "san_dns", "a.svc.corp")), der) == "d"
    assert client_key_id(rules(("e", "san_email", "ops@corp.example")), der) == "e"
    assert client_key_id(rules(("u", "san_uri", "spiffe://corp/ns/a/sa/api")), der) == "u"
    assert client_key_id(rules(("x", "san_dns", "A.svc.corp"), ("y", "subject_cn", "svc-a"),
                               ("z", "subject_cn", "svc-a")), der) == "y"
    for field, value in (("subject", "CN=svc-a"), ("subject_cn", "svc"), ("san_dns", "svc.corp"),
                         ("san_uri", "spiffe://corp/ns/a")):
        assert client_key_id(rules(("n", field, value)), der) is None
    assert client_key_id(rules(("d", "san_dns", "a.svc.corp")), bare) is None
    assert client_key_id(rules(("d", "san_dns", "a.svc.corp")), b"not DER") is None


def test_tls12_session_resumed_after_a_crl_reload_is_checked_again(engine, pki, tmp_path):
    """OpenSSL does not re-verify a session-cache resumption: the gateway re-checks it."""
    crl = write_crl(pki.client_ca, tmp_path / "crl.pem", [])
    gw = start_in_thread(make_settings(engine, tls=pki.policy(client_auth="require", crl=crl),
                                       audit_log=tmp_path / "audit.jsonl"))
    request = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"

    def session_of(client: str) -> tuple[ssl.SSLContext, ssl.SSLSession]:
        ctx = pki.context(client)
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as raw, \
                ctx.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            sock.sendall(request)
            assert sock.recv(100).startswith(b"HTTP/1.1 200")
            assert sock.session is not None
            return ctx, sock.session

    def resume(ctx: ssl.SSLContext, session: ssl.SSLSession) -> tuple[bool, bytes]:
        data = b""
        with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as raw, \
                ctx.wrap_socket(raw, server_hostname="127.0.0.1", session=session) as sock:
            try:
                sock.sendall(request)
                while chunk := sock.recv(65536):
                    data += chunk
            except OSError:
                pass
            return sock.session_reused, data

    try:
        revoked, good = session_of("revoked"), session_of("billing")
        write_crl(pki.client_ca, crl, [serial(pki.clients["revoked"])])
        assert gw.reload_tls() is True
        assert resume(*revoked) == (True, b"")  # resumed, then closed: no HTTP byte
        reused, data = resume(*good)
        assert reused and data.startswith(b"HTTP/1.1 200")
        assert wait_for(lambda: any(r.get("event") == "tls_resumption_refused"
                                    and r["reason"] == "certificate_revoked"
                                    for r in audit(tmp_path)))
    finally:
        gw.stop()
