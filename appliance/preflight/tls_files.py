"""Reading and checking the gateway's TLS files (PEM) before any socket uses them.

:func:`inspect_tls` validates a resolved :class:`~appliance.config.tls.TlsPolicy`: the
certificate chain parses, the private key is unencrypted PEM and matches the leaf, the chain
is inside its validity window, the client-CA bundle parses and every CRL parses, is signed
by a CA of the bundle and is not past its ``nextUpdate``. It returns a :class:`TlsFacts`
(expiry in UTC, for the metric and ``appliance check``) or raises :class:`TlsError` with a
stable code:

=============================  ==========================================================
``tls_file_unreadable``        a file cannot be read (path in ``where``)
``tls_certificate_invalid``    no PEM certificate in ``certificate`` / unparsable
``tls_key_invalid``            ``private_key`` is not an unencrypted PEM private key
``tls_key_mismatch``           the key does not belong to the leaf certificate
``tls_certificate_expired``    the chain is expired or not yet valid
``tls_client_ca_invalid``      ``client_ca`` holds no parsable PEM certificate
``tls_crl_invalid``            a CRL is unparsable, not signed by a client CA, or expired
=============================  ==========================================================

:func:`describe_tls` turns the same checks into ``appliance check`` lines and problems.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

from appliance.config.tls import TlsPolicy, require_tls_for_host
from appliance.errors import ApplianceError, TlsError

PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n.*?-----END \1-----", re.S)
EXPIRY_WARNING = dt.timedelta(days=30)


@dataclass(frozen=True)
class TlsFacts:
    """What the checked files say. Times are aware UTC datetimes."""

    subject: str            # leaf subject, RFC 4514
    names: tuple[str, ...]  # leaf SAN DNS names and IP addresses
    not_after: dt.datetime  # earliest notAfter of the served chain
    fingerprint: str        # SHA-256 of the leaf, hex
    client_cas: int = 0
    client_ca_not_after: dt.datetime | None = None  # earliest notAfter of the bundle
    crl_next_update: dt.datetime | None = None      # earliest nextUpdate of the CRLs
    revoked: frozenset[tuple[bytes, int]] = frozenset()  # (issuer name DER, serial) in CRLs


def _read(path: Path, field: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TlsError(f"cannot read gateway.tls.{field}: {exc.strerror}",
                       code="tls_file_unreadable", where=str(path),
                       fix="check the path and that the appliance user may read it") from None


def pem_blocks(data: bytes, label: bytes) -> list[bytes]:
    """Every PEM block of type ``label`` (e.g. ``b"CERTIFICATE"``) in ``data``, in order."""
    return [m.group(0) for m in PEM_BLOCK.finditer(data) if m.group(1) == label]


def load_certificates(path: Path, field: str, code: str) -> list[x509.Certificate]:
    """All PEM certificates in the file (at least one), else ``TlsError(code)``."""
    blocks = pem_blocks(_read(path, field), b"CERTIFICATE")
    try:
        certs = [x509.load_pem_x509_certificate(block) for block in blocks]
    except ValueError as exc:
        raise TlsError(f"gateway.tls.{field}: unparsable certificate: {exc}", code=code,
                       where=str(path), fix="give PEM certificates") from None
    if not certs:
        raise TlsError(f"gateway.tls.{field}: no PEM certificate found", code=code,
                       where=str(path), fix="give PEM certificates ('-----BEGIN CERTIFICATE')")
    return certs


def _check_key(path: Path, leaf: x509.Certificate) -> None:
    data = _read(path, "private_key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise TlsError("gateway.tls.private_key is encrypted", code="tls_key_invalid",
                       where=str(path), fix="give an unencrypted PEM key; protect it at rest "
                       "with file permissions or systemd-creds (LoadCredentialEncrypted=)") \
            from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise TlsError(f"gateway.tls.private_key is not a PEM private key: {exc}",
                       code="tls_key_invalid", where=str(path),
                       fix="give the PEM private key of the certificate") from None
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
                      | ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey):
        raise TlsError("gateway.tls.private_key: unsupported key type", code="tls_key_invalid",
                       where=str(path), fix="use an RSA, ECDSA or EdDSA key")
    raw = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*raw) != leaf.public_key().public_bytes(*raw):
        raise TlsError("gateway.tls.private_key does not match the certificate",
                       code="tls_key_mismatch", where=str(path),
                       fix="give the key the first certificate of the chain was issued for")


def _signed_by(crl: x509.CertificateRevocationList, cas: list[x509.Certificate]) -> bool:
    for ca in cas:
        if ca.subject != crl.issuer:
            continue
        public = ca.public_key()
        if isinstance(public, rsa.RSAPublicKey | ec.EllipticCurvePublicKey
                      | ed25519.Ed25519PublicKey | ed448.Ed448PublicKey) \
                and crl.is_signature_valid(public):
            return True
    return False


def _check_crls(path: Path, cas: list[x509.Certificate], now: dt.datetime
                ) -> tuple[dt.datetime, frozenset[tuple[bytes, int]]]:
    revoked: set[tuple[bytes, int]] = set()
    blocks = pem_blocks(_read(path, "crl"), b"X509 CRL")
    if not blocks:
        raise TlsError("gateway.tls.crl: no PEM CRL found", code="tls_crl_invalid",
                       where=str(path), fix="give PEM CRLs ('-----BEGIN X509 CRL'); convert "
                       "DER with `openssl crl -inform DER -in x.crl -out x.pem`")
    earliest: dt.datetime | None = None
    for block in blocks:
        try:
            crl = x509.load_pem_x509_crl(block)
        except ValueError as exc:
            raise TlsError(f"gateway.tls.crl: unparsable CRL: {exc}", code="tls_crl_invalid",
                           where=str(path), fix="give PEM CRLs") from None
        if not _signed_by(crl, cas):
            raise TlsError(f"gateway.tls.crl: CRL of {crl.issuer.rfc4514_string()} is not "
                           "signed by a CA in client_ca", code="tls_crl_invalid",
                           where=str(path), fix="give the CRL of the client CA")
        next_update = crl.next_update_utc
        if next_update is None or next_update <= now:
            raise TlsError(f"gateway.tls.crl: CRL of {crl.issuer.rfc4514_string()} is past "
                           "its nextUpdate (every client certificate would be refused)",
                           code="tls_crl_invalid", where=str(path),
                           fix="install the current CRL and send SIGHUP")
        earliest = next_update if earliest is None else min(earliest, next_update)
        issuer = crl.issuer.public_bytes()
        revoked.update((issuer, entry.serial_number) for entry in crl)
    if earliest is None:  # pragma: no cover - blocks is non-empty
        raise TlsError("gateway.tls.crl: no CRL", code="tls_crl_invalid", where=str(path))
    return earliest, frozenset(revoked)


def _names(cert: x509.Certificate) -> tuple[str, ...]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    return tuple([*san.get_values_for_type(x509.DNSName),
                  *(str(ip) for ip in san.get_values_for_type(x509.IPAddress))])


def inspect_tls(policy: TlsPolicy, now: dt.datetime | None = None) -> TlsFacts:
    """Check every file of a resolved policy; see the module docstring. Raises ``TlsError``."""
    moment = now or dt.datetime.now(dt.UTC)
    chain = load_certificates(policy.certificate, "certificate", "tls_certificate_invalid")
    leaf = chain[0]
    _check_key(policy.private_key, leaf)
    not_after = min(c.not_valid_after_utc for c in chain)
    not_before = max(c.not_valid_before_utc for c in chain)
    if not_after <= moment or not_before > moment:
        state = "expired" if not_after <= moment else "not yet valid"
        raise TlsError(f"gateway.tls.certificate is {state} (valid {not_before:%Y-%m-%d %H:%M}Z"
                       f" to {not_after:%Y-%m-%d %H:%M}Z)", code="tls_certificate_expired",
                       where=str(policy.certificate),
                       fix="install a current certificate and send SIGHUP (or restart)")
    cas: list[x509.Certificate] = []
    crl_next: dt.datetime | None = None
    revoked: frozenset[tuple[bytes, int]] = frozenset()
    if policy.client_ca is not None:
        cas = load_certificates(policy.client_ca, "client_ca", "tls_client_ca_invalid")
        if policy.crl is not None:
            crl_next, revoked = _check_crls(policy.crl, cas, moment)
    return TlsFacts(
        subject=leaf.subject.rfc4514_string(), names=_names(leaf), not_after=not_after,
        fingerprint=leaf.fingerprint(hashes.SHA256()).hex(),
        client_cas=len(cas),
        client_ca_not_after=min((c.not_valid_after_utc for c in cas), default=None),
        crl_next_update=crl_next, revoked=revoked)


def describe_tls(host: str, tls: TlsPolicy | None, allow_plaintext: bool,
                 now: dt.datetime | None = None) -> tuple[list[str], list[tuple[str, str, str]]]:
    """``appliance check`` view of the listener: (info lines, problems).

    Each problem is ``(code, message, fix)``; the caller renders it. No exception escapes
    for bad files: they become problems.
    """
    moment = now or dt.datetime.now(dt.UTC)
    lines: list[str] = []
    problems: list[tuple[str, str, str]] = []
    try:
        require_tls_for_host(host, tls, allow_plaintext)
    except ApplianceError as exc:
        problems.append((exc.code, exc.message, exc.fix or ""))
    if tls is None:
        lines.append(f"gateway: plaintext HTTP on {host}"
                     + (" (allow_plaintext = true)" if allow_plaintext else ""))
        return lines, problems
    try:
        facts = inspect_tls(tls, moment)
    except TlsError as exc:
        problems.append((exc.code, f"{exc.message} ({exc.where})", exc.fix or ""))
        return lines, problems
    left = facts.not_after - moment
    lines.append(f"gateway: TLS on {host}, certificate {facts.subject} "
                 f"[{', '.join(facts.names) or 'no SAN'}], expires "
                 f"{facts.not_after:%Y-%m-%d %H:%M}Z (in {left.total_seconds() / 86400:.1f} "
                 f"days), sha256 {facts.fingerprint[:16]}...")
    if left < EXPIRY_WARNING:
        lines.append(f"warning: the gateway certificate expires in "
                     f"{left.total_seconds() / 86400:.1f} days")
    if tls.client_auth != "none":
        ca_end = facts.client_ca_not_after
        if ca_end is not None and ca_end <= moment:
            problems.append(("tls_client_ca_invalid", f"a client CA expired on {ca_end:%Y-%m-%d}"
                             f" ({tls.client_ca}): its client certificates are all refused",
                             "install the renewed client CA bundle and send SIGHUP"))
        expiry = f"first expiry {ca_end:%Y-%m-%d}" if ca_end else "none"
        crl = (f"CRL next update {facts.crl_next_update:%Y-%m-%d %H:%M}Z"
               if facts.crl_next_update else "no CRL")
        lines.append(f"gateway: client certificates {tls.client_auth}, {facts.client_cas} "
                     f"client CA(s) ({expiry}), {len(tls.client_ids)} key-id rule(s), {crl}")
    return lines, problems
