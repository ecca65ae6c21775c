"""`[gateway.tls]` in the policy, the TLS file checks, `appliance check` and the plaintext
refusal of `appliance serve` (issue 13). Certificates are made at test time (trustme)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from appliance.cli import main
from appliance.config.policy import Policy, load_policy
from appliance.config.tls import TlsPolicy, is_loopback, require_tls_for_host
from appliance.errors import PolicyError, TlsError
from appliance.preflight.problem import Problem
from appliance.preflight.sequence import check_listener
from appliance.preflight.tls_files import describe_tls, inspect_tls

REPO = Path(__file__).resolve().parents[2]
NOW = dt.datetime.now(dt.UTC)


def _write_server(folder: Path, *, days: float = 90, ca: trustme.CA | None = None) -> trustme.CA:
    ca = ca or trustme.CA()
    leaf = ca.issue_cert("gateway.corp", common_name="gateway.corp",
                         not_before=NOW - dt.timedelta(days=1),
                         not_after=NOW + dt.timedelta(days=days))
    (folder / "tls").mkdir(exist_ok=True)
    (folder / "tls" / "server.pem").write_bytes(
        b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    (folder / "tls" / "server.key").write_bytes(leaf.private_key_pem.bytes())
    ca.cert_pem.write_to_path(str(folder / "tls" / "clients.pem"))
    return ca


def _policy(folder: Path, gateway: str) -> Path:
    path = folder / "policy.toml"
    path.write_text(f'[preflight]\nadvisories = "{REPO / "policies" / "advisories.json"}"\n'
                    f'[engine]\ndevice = "cpu"\n{gateway}')
    return path


TLS = ('[gateway.tls]\ncertificate = "tls/server.pem"\nprivate_key = "tls/server.key"\n')


def test_tls_paths_resolve_against_the_policy_folder(tmp_path: Path) -> None:
    policy = load_policy(_policy(tmp_path, TLS + 'client_ca = "tls/clients.pem"\n'
                                 'client_auth = "require"\n[[gateway.tls.client_ids]]\n'
                                 'key_id = "billing"\nsubject_cn = "billing"\n'))
    tls = policy.gateway.tls
    assert tls is not None
    assert tls.certificate == tmp_path.resolve() / "tls" / "server.pem"
    assert tls.private_key == tmp_path.resolve() / "tls" / "server.key"
    assert tls.client_ca == tmp_path.resolve() / "tls" / "clients.pem"
    assert tls.client_auth == "require" and tls.client_ids[0].field == "subject_cn"
    assert policy.gateway.allow_plaintext is False


def test_systemd_credentials_directory_is_expanded(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    body = ('[gateway.tls]\ncertificate = "${CREDENTIALS_DIRECTORY}/tls.pem"\n'
            'private_key = "${CREDENTIALS_DIRECTORY}/tls.key"\n')
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", "/run/credentials/appliance.service")
    tls = load_policy(_policy(tmp_path, body)).gateway.tls
    assert tls is not None
    assert tls.private_key == Path("/run/credentials/appliance.service/tls.key")
    monkeypatch.delenv("CREDENTIALS_DIRECTORY")
    with pytest.raises(PolicyError) as refused:
        load_policy(_policy(tmp_path, body))
    assert refused.value.code == "tls_credentials_unset"
    with pytest.raises(PolicyError):  # no other variable is expanded
        TlsPolicy(certificate=Path("$HOME/x.pem"), private_key=Path("k")).resolved(tmp_path)


@pytest.mark.parametrize(("body", "field"), [
    (TLS + "ciphers = \"ALL\"\n", "gateway.tls.ciphers"),
    (TLS + "client_auth = \"maybe\"\n", "gateway.tls.client_auth"),
    (TLS + "client_auth = \"require\"\n", "gateway.tls"),
    (TLS + "crl = \"x.pem\"\n", "gateway.tls"),
    ("[gateway.tls]\nprivate_key = \"k\"\n", "gateway.tls.certificate"),
    (TLS + 'client_ca = "c"\nclient_auth = "optional"\n[[gateway.tls.client_ids]]\n'
     'key_id = "a"\nsubject_cn = "a"\nsan_dns = "a"\n', "gateway.tls.client_ids.0"),
    ("[gateway]\nallow_plaintext = \"yes\"\n", "gateway.allow_plaintext"),
])
def test_invalid_tls_policy_names_the_field(tmp_path: Path, body: str, field: str) -> None:
    with pytest.raises(PolicyError) as refused:
        load_policy(_policy(tmp_path, body))
    assert refused.value.code == "policy_invalid" and field in str(refused.value.where)


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.8.0.1", True), ("::1", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("", False), ("10.0.0.5", False), ("gw.corp", False)])
def test_loopback_detection(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_plaintext_rule() -> None:
    tls = TlsPolicy(certificate=Path("/c"), private_key=Path("/k"))
    require_tls_for_host("127.0.0.1", None, False)
    require_tls_for_host("0.0.0.0", tls, False)
    require_tls_for_host("0.0.0.0", None, True)
    with pytest.raises(PolicyError) as refused:
        require_tls_for_host("0.0.0.0", None, False)
    assert refused.value.code == "plaintext_not_allowed" and refused.value.exit_status == 2


def test_inspect_reports_expiry_and_refuses_bad_files(tmp_path: Path) -> None:
    ca = _write_server(tmp_path, days=10)
    tls = load_policy(_policy(tmp_path, TLS)).gateway.tls
    assert tls is not None
    facts = inspect_tls(tls)
    assert facts.subject.startswith("CN=gateway.corp,") and facts.names == ("gateway.corp",)
    assert dt.timedelta(days=9) < facts.not_after - NOW < dt.timedelta(days=11)
    lines, problems = describe_tls("0.0.0.0", tls, False)
    assert problems == [] and "expires" in lines[0] and lines[1].startswith("warning:")
    other = ca.issue_cert("other.corp")
    tls.private_key.write_bytes(other.private_key_pem.bytes())
    with pytest.raises(TlsError) as refused:
        inspect_tls(tls)
    assert refused.value.code == "tls_key_mismatch"
    key = serialization.load_pem_private_key(other.private_key_pem.bytes(), None)
    tls.private_key.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret")))
    assert _code(tls) == "tls_key_invalid"
    tls.certificate.write_text("not a certificate")
    assert _code(tls) == "tls_certificate_invalid"
    tls.certificate.unlink()
    assert _code(tls) == "tls_file_unreadable"


def _code(tls: TlsPolicy) -> str:
    with pytest.raises(TlsError) as refused:
        inspect_tls(tls)
    return refused.value.code


def test_crl_must_be_current_and_from_the_client_ca(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(REPO / "tests" / "gateway"))
    from gw_tls import write_crl

    ca = _write_server(tmp_path)
    body = TLS + 'client_ca = "tls/clients.pem"\nclient_auth = "require"\ncrl = "crl.pem"\n'
    tls = load_policy(_policy(tmp_path, body)).gateway.tls
    assert tls is not None and tls.crl is not None
    write_crl(ca, tls.crl, [])
    assert inspect_tls(tls).crl_next_update is not None
    lines, problems = describe_tls("127.0.0.1", tls, False)
    assert problems == [] and "client certificates require, 1 client CA(s)" in lines[-1]
    assert "CRL next update" in lines[-1]
    write_crl(trustme.CA(), tls.crl, [])
    assert _code(tls) == "tls_crl_invalid"
    write_crl(ca, tls.crl, [], next_update=NOW - dt.timedelta(minutes=1))
    assert _code(tls) == "tls_crl_invalid"


def _listener_problems(policy: Policy) -> list[Problem]:
    """The listener's problems as ``appliance check`` reports them (the sequence's first
    step, not strict)."""
    return check_listener(policy, policy.gateway.host, strict=False)[1]


def test_appliance_check_shows_certificate_expiry(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    _write_server(tmp_path, days=90)
    path = _policy(tmp_path, '[gateway]\nhost = "0.0.0.0"\n' + TLS)
    assert main(["check", "--policy", str(path)]) == 0
    out = capsys.readouterr().out
    assert "gateway: TLS on 0.0.0.0, certificate CN=gateway.corp" in out and "expires" in out
    _write_server(tmp_path, days=-1)  # the same rule `check` exits 1 on (fast path)
    assert [p.code for p in _listener_problems(load_policy(path))] == [
        "tls_certificate_expired"]


def test_appliance_check_flags_plaintext_off_loopback(tmp_path: Path) -> None:
    path = _policy(tmp_path, '[gateway]\nhost = "0.0.0.0"\n')
    problems = _listener_problems(load_policy(path))
    assert [p.code for p in problems] == ["plaintext_not_allowed"]
    assert "error[plaintext_not_allowed]" in problems[0].render()
    path = _policy(tmp_path, '[gateway]\nhost = "0.0.0.0"\nallow_plaintext = true\n')
    assert _listener_problems(load_policy(path)) == []


def test_serve_on_0000_without_tls_exits_with_plaintext_not_allowed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before verification, scan or engine start (so no model is needed)."""
    monkeypatch.setenv("APPLIANCE_API_KEYS", "sk-test-gateway-key-0001")
    path = _policy(tmp_path, '[gateway]\nhost = "0.0.0.0"\n')
    args = ["serve", "--model", str(tmp_path / "no-model"), "--policy", str(path),
            "--public-key", str(tmp_path / "no.pub")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "error[plaintext_not_allowed]" in err and "allow_plaintext" in err
    path = _policy(tmp_path, "")  # policy on loopback, --host overrides it
    assert main([*args[:4], str(path), *args[5:], "--host", "0.0.0.0"]) == 2
    assert "error[plaintext_not_allowed]" in capsys.readouterr().err
