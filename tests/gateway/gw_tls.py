"""Test PKI made at test time (trustme) and raw TLS client helpers for the gateway tests."""

from __future__ import annotations

import datetime as dt
import socket
import ssl
from pathlib import Path
from typing import Any

import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from appliance.config.tls import TlsPolicy

NOW = dt.datetime.now(dt.UTC)
MODELS_REQUEST = b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


def serial(leaf: trustme.LeafCert) -> int:
    return x509.load_pem_x509_certificate(leaf.cert_chain_pems[0].bytes()).serial_number


def write_crl(ca: trustme.CA, path: Path, revoked: list[int], *,
              next_update: dt.datetime | None = None) -> Path:
    """A PEM CRL signed by ``ca`` revoking ``revoked`` serial numbers."""
    key = serialization.load_pem_private_key(ca.private_key_pem.bytes(), password=None)
    issuer = x509.load_pem_x509_certificate(ca.cert_pem.bytes()).subject
    builder = (x509.CertificateRevocationListBuilder().issuer_name(issuer)
               .last_update(NOW - dt.timedelta(hours=1))
               .next_update(next_update or NOW + dt.timedelta(days=1)))
    for number in revoked:
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(number)
            .revocation_date(NOW - dt.timedelta(minutes=5)).build())
    crl = builder.sign(key, hashes.SHA256())  # type: ignore[arg-type]
    path.write_bytes(crl.public_bytes(serialization.Encoding.PEM))
    return path


class Pki:
    """A server CA + server certificate, a client CA with client certificates (mapped,
    unmapped, expired, revoked), a rogue CA, and a CRL; all written under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ca = trustme.CA(organization_name="Appliance test server CA")
        self.client_ca = trustme.CA(organization_name="Appliance test client CA")
        self.rogue_ca = trustme.CA(organization_name="Rogue CA")
        self.server = self.ca.issue_cert("127.0.0.1", "localhost", common_name="gateway-one")
        self.server_cert, self.server_key = self.write_leaf("server", self.server)
        self.client_ca_file = root / "client-ca.pem"
        self.client_ca.cert_pem.write_to_path(str(self.client_ca_file))
        self.clients = {
            "billing": self.client_ca.issue_cert("billing.svc.corp", common_name="billing"),
            "unmapped": self.client_ca.issue_cert("other.svc.corp", common_name="other"),
            "rogue": self.rogue_ca.issue_cert("billing.svc.corp", common_name="billing"),
            "expired": self.client_ca.issue_cert(
                "billing.svc.corp", common_name="billing",
                not_before=NOW - dt.timedelta(days=10), not_after=NOW - dt.timedelta(days=1)),
            "revoked": self.client_ca.issue_cert("billing.svc.corp", common_name="billing"),
        }
        self.crl = write_crl(self.client_ca, root / "clients.crl.pem",
                             [serial(self.clients["revoked"])])

    def write_leaf(self, name: str, leaf: trustme.LeafCert) -> tuple[Path, Path]:
        cert, key = self.root / f"{name}.pem", self.root / f"{name}.key"
        cert.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
        key.write_bytes(leaf.private_key_pem.bytes())
        return cert, key

    def policy(self, **overrides: Any) -> TlsPolicy:
        values: dict[str, Any] = {"certificate": self.server_cert,
                                  "private_key": self.server_key}
        if overrides.get("client_auth", "none") != "none":
            values.update(client_ca=self.client_ca_file, crl=self.crl, client_ids=[
                {"key_id": "billing", "san_dns": "billing.svc.corp"}])
        values.update(overrides)
        return TlsPolicy.model_validate(values)

    def context(self, client: str | None = None, *, ca: trustme.CA | None = None
                ) -> ssl.SSLContext:
        """Client context trusting the server CA, presenting ``clients[client]``."""
        ctx = ssl.create_default_context(cadata=(ca or self.ca).cert_pem.bytes().decode())
        if client is not None:
            self.clients[client].configure_cert(ctx)
        return ctx


def exchange(port: int, ctx: ssl.SSLContext, request: bytes = MODELS_REQUEST,
             timeout: float = 5.0) -> tuple[bytes, BaseException | None]:
    """Send ``request`` over TLS and read to the end: (bytes received, error or None)."""
    data = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw, \
                ctx.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            sock.sendall(request)
            while chunk := sock.recv(65536):
                data += chunk
    except (ssl.SSLError, OSError) as exc:
        return data, exc
    return data, None


def peer_certificate(port: int, ctx: ssl.SSLContext) -> x509.Certificate:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        der = sock.getpeercert(binary_form=True)
    assert der
    return x509.load_der_x509_certificate(der)
