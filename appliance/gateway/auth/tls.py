"""TLS on the gateway listener: the server ``SSLContext``, SIGHUP reload, handshake failures
as TLS alerts (audited) and the client-certificate -> key-id mapping.

Context (:func:`build_context`): TLS 1.2 and 1.3 only; TLS 1.2 suites limited to ECDHE with
AES-GCM or ChaCha20-Poly1305 (TLS 1.3 suites are all AEAD); no compression, no
renegotiation, server cipher preference, ALPN ``http/1.1``. With ``client_auth`` optional or
require the client-CA bundle verifies client certificates (expired ones fail); a CRL file
turns on revocation checks for the leaf (``VERIFY_CRL_CHECK_LEAF``: a client CA without a
CRL then refuses all of its certificates, fail closed). Session tickets are off with client
certificates (TLS 1.3 then never resumes; TLS 1.2 session-cache resumptions are re-checked
by :meth:`TlsEndpoint.admit`).

Reload (:meth:`TlsEndpoint.reload`, on SIGHUP): the files are checked again
(:func:`appliance.preflight.tls_files.inspect_tls`) and a new context built; only then does it
replace the current one. The listening context's SNI callback (called for every ClientHello, with
or without SNI) moves each new handshake onto the current context, so open connections keep
theirs and new ones get the new certificate. A failed reload keeps the old context.

Handshake failures: asyncio/uvloop close the socket on a failed handshake without sending
the alert OpenSSL queued. :class:`AlertingSSLObject` reports the failure, then lets the loop
flush the pending alert bytes first (by answering "want read" once) so the client sees the
TLS alert it expects (``protocol_version``, ``handshake_failure``, ``certificate_required``,
``unknown_ca``, ``certificate_expired``, ``certificate_revoked``); no HTTP byte is ever
sent. Each failure is counted (``gateway_tls_handshake_failures_total{reason}``) and
written to the audit log as ``{"ts", "event": "tls_handshake_failed", "reason", "detail"}``
(OpenSSL's reason and the verify message: no key material, no certificate contents).

Client identity: :meth:`TlsEndpoint.admit` maps a verified client certificate with the
policy's ``client_ids`` rules (first match) to a key id; the HTTP protocol puts it in the
ASGI scope under :data:`TLS_KEY_ID` and the app's key check
(:mod:`appliance.gateway.auth.authenticate`) uses it like an API key's id. It also re-checks
a TLS 1.2 session resumed from the server's cache (no re-verification by OpenSSL) against the
current CRL and expiry, so a reload's revocations apply to it too.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any, ClassVar

from cryptography import x509
from cryptography.x509.oid import NameOID
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from appliance.config.tls import ClientIdRule, TlsPolicy
from appliance.errors import TlsError
from appliance.preflight.tls_files import TlsFacts, inspect_tls

from ..telemetry.metrics import AuditLog

LOG = logging.getLogger("appliance.gateway")
TLS_KEY_ID = "appliance.tls_key_id"  # ASGI scope key: key id of the verified client cert
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!eNULL:!PSK:!SRP"


def _no_password() -> bytes:
    raise TlsError("gateway.tls.private_key is encrypted", code="tls_key_invalid",
                   fix="give an unencrypted PEM key (protect it with systemd-creds)")


class _ListeningContext(ssl.SSLContext):
    """Server context whose SSL objects know their outgoing BIO (to flush alerts)."""

    def wrap_bio(self, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO,
                 server_side: bool = False, server_hostname: str | bytes | None = None,
                 session: ssl.SSLSession | None = None) -> ssl.SSLObject:
        obj = super().wrap_bio(incoming, outgoing, server_side, server_hostname, session)
        if isinstance(obj, AlertingSSLObject):
            obj.outgoing = outgoing
        return obj


def build_context(policy: TlsPolicy, listening: bool = False) -> ssl.SSLContext:
    """Server ``SSLContext`` for a resolved policy (see the module docstring).

    ``listening``: the context handed to the socket (an instance that records its SSL
    objects' outgoing BIO). Raises ``TlsError`` if OpenSSL refuses a file.
    """
    cls = _ListeningContext if listening else ssl.SSLContext
    ctx = cls(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    ctx.set_ciphers(TLS12_CIPHERS)
    ctx.options |= (ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
                    | ssl.OP_CIPHER_SERVER_PREFERENCE)
    ctx.set_alpn_protocols(["http/1.1"])
    try:
        ctx.load_cert_chain(str(policy.certificate), str(policy.private_key),
                            password=_no_password)
    except (ssl.SSLError, OSError) as exc:
        raise TlsError(f"OpenSSL refused the certificate or key: {exc}", code="tls_key_invalid",
                       where=str(policy.certificate),
                       fix="give a PEM chain (leaf first) and its PEM private key") from None
    if policy.client_auth != "none" and policy.client_ca is not None:
        ctx.verify_mode = ssl.CERT_REQUIRED if policy.client_auth == "require" \
            else ssl.CERT_OPTIONAL
        for path, code in ((policy.client_ca, "tls_client_ca_invalid"),
                           (policy.crl, "tls_crl_invalid")):
            if path is None:
                continue
            try:
                ctx.load_verify_locations(cafile=str(path))
            except (ssl.SSLError, OSError) as exc:
                raise TlsError(f"OpenSSL refused {path.name}: {exc}", code=code,
                               where=str(path), fix="give PEM files") from None
        if policy.crl is not None:
            ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
        ctx.options |= ssl.OP_NO_TICKET
        ctx.num_tickets = 0
    return ctx


def _values(cert: x509.Certificate, field: str) -> list[str]:
    if field == "subject":
        return [cert.subject.rfc4514_string()]
    if field == "subject_cn":
        return [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    kind: Any = {"san_dns": x509.DNSName, "san_email": x509.RFC822Name,
                 "san_uri": x509.UniformResourceIdentifier}[field]
    return [str(v) for v in san.get_values_for_type(kind)]


def client_key_id(rules: tuple[ClientIdRule, ...], der: bytes) -> str | None:
    """Key id of the first rule the (already verified) DER certificate matches, or ``None``
    (no rule matches, or the certificate cannot be parsed)."""
    try:
        return _key_id(rules, x509.load_der_x509_certificate(der))
    except ValueError:
        LOG.warning("client certificate could not be parsed for key-id rules")
        return None


def _key_id(rules: tuple[ClientIdRule, ...], cert: x509.Certificate) -> str | None:
    for rule in rules:
        if rule.value in _values(cert, rule.field):
            return rule.key_id
    return None


class AlertingSSLObject(ssl.SSLObject):
    """Reports a failed server handshake and lets the event loop send the pending alert.

    ``endpoint`` is set on a per-endpoint subclass; ``outgoing`` by the listening context.
    """

    endpoint: ClassVar[TlsEndpoint]
    outgoing: ssl.MemoryBIO | None = None
    _refused: ssl.SSLError | None = None

    def do_handshake(self) -> None:
        if self._refused is not None:
            raise self._refused
        try:
            super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise
        except ssl.SSLError as exc:
            self.endpoint.handshake_failed(exc)
            if self.outgoing is None or not self.outgoing.pending:
                raise
            # The loop flushes the outgoing BIO (the alert) on "want read" and waits for
            # the client, which closes on the alert; any further byte gets the error.
            self._refused = exc
            raise ssl.SSLWantReadError("TLS alert pending") from None


def _reason(exc: ssl.SSLError) -> tuple[str, str | None]:
    detail = getattr(exc, "verify_message", None)
    reason = str(exc.reason or type(exc).__name__).lower()
    label = reason
    if detail:
        label = "".join(ch if ch.isalnum() else "_" for ch in str(detail).lower())[:64]
    return label, (str(detail) if detail else None)


class TlsEndpoint(Collector):
    """The listener's TLS state: current context, facts, counters, audit hook.

    Build with a resolved policy (raises ``TlsError`` for bad files, before any socket
    exists); hand :attr:`listening` to the server socket; :meth:`attach` the app's metrics
    registry and audit log.
    """

    def __init__(self, policy: TlsPolicy) -> None:
        self.policy = policy
        self.facts: TlsFacts = inspect_tls(policy)
        self.listening = build_context(policy, listening=True)
        self.listening.sni_callback = self._select
        self.listening.sslobject_class = type(
            "GatewaySSLObject", (AlertingSSLObject,), {"endpoint": self})
        self._current = self.listening
        self.failures: Counter[str] = Counter()
        self.reloads: Counter[str] = Counter()
        self.audit: AuditLog | None = None
        self.identify = bool(policy.client_ids) and not policy.bearer_required
        self.client_certs = policy.client_auth != "none"

    def attach(self, registry: CollectorRegistry, audit: AuditLog | None) -> None:
        """Serve this endpoint's metrics from ``registry``; write events to ``audit``."""
        registry.register(self)
        self.audit = audit

    def _select(self, sslobj: ssl.SSLObject, server_name: str | None,
                ctx: ssl.SSLContext) -> None:
        current = self._current
        if current is not ctx:
            sslobj.context = current

    def handshake_failed(self, exc: ssl.SSLError) -> None:
        """Count and audit one refused handshake (called from the event loop)."""
        label, detail = _reason(exc)
        self.failures[label] += 1
        LOG.info("TLS handshake refused: %s%s", exc.reason, f" ({detail})" if detail else "")
        self._event({"event": "tls_handshake_failed", "reason": label, "detail": detail})

    def reload(self) -> bool:
        """Re-read the policy's files; switch new handshakes to them. ``False`` (old
        certificate kept, error logged and audited) when the new files are refused."""
        try:
            facts = inspect_tls(self.policy)
            ctx = build_context(self.policy)
        except TlsError as exc:
            self.reloads["error"] += 1
            LOG.error("TLS reload refused, keeping the current certificate: %s",
                      exc.diagnostics())
            self._event({"event": "tls_reload_failed", "code": exc.code, "where": exc.where})
            return False
        self._current = ctx
        self.facts = facts
        self.reloads["ok"] += 1
        LOG.warning("TLS reloaded: %s, expires %s", facts.subject, facts.not_after.isoformat())
        self._event({"event": "tls_reloaded", "subject": facts.subject,
                     "not_after": facts.not_after.isoformat(),
                     "sha256": facts.fingerprint})
        return True

    def admit(self, transport: asyncio.BaseTransport) -> tuple[bool, str | None]:
        """(keep the connection?, key id) for a new TLS connection with client certificates.

        A full handshake was verified by OpenSSL against the current CA bundle and CRL. A
        TLS 1.2 session resumed from the server's session cache skipped that, so its
        certificate is checked again here against the current CRL and its expiry
        (``False``: the caller closes the connection; counted and audited as
        ``tls_resumption_refused``). The key id is ``None`` without rules, certificate or
        match, and with ``bearer_required``.
        """
        sslobj = transport.get_extra_info("ssl_object")
        der = sslobj.getpeercert(binary_form=True) if sslobj is not None else None
        if not der:
            return True, None
        try:
            cert = x509.load_der_x509_certificate(der)
        except ValueError:
            LOG.warning("client certificate could not be parsed")
            return not sslobj.session_reused, None
        if sslobj.session_reused:
            reason = self._stale(cert)
            if reason is not None:
                self.failures[reason] += 1
                self._event({"event": "tls_resumption_refused", "reason": reason,
                             "detail": None})
                return False, None
        return True, (_key_id(self.policy.client_ids, cert) if self.identify else None)

    def _stale(self, cert: x509.Certificate) -> str | None:
        if cert.not_valid_after_utc.timestamp() <= time.time():
            return "certificate_has_expired"
        if (cert.issuer.public_bytes(), cert.serial_number) in self.facts.revoked:
            return "certificate_revoked"
        return None

    def expiry_seconds(self, now: float | None = None) -> float:
        """Seconds until the served chain's earliest ``notAfter`` (negative once expired)."""
        return self.facts.not_after.timestamp() - (time.time() if now is None else now)

    def _event(self, record: dict[str, Any]) -> None:
        if self.audit is not None:
            self.audit.write_event({"ts": round(time.time(), 3), **record})

    def collect(self) -> Iterator[Metric]:
        """Prometheus: expiry gauge(s), handshake failures, reloads."""
        expiry = GaugeMetricFamily(
            "gateway_tls_certificate_expiry_seconds",
            "Seconds until the served TLS certificate chain expires (negative: expired)")
        expiry.add_metric([], self.expiry_seconds())
        yield expiry
        if self.facts.crl_next_update is not None:
            crl = GaugeMetricFamily(
                "gateway_tls_crl_next_update_seconds",
                "Seconds until the client-certificate CRL's nextUpdate (then all are refused)")
            crl.add_metric([], self.facts.crl_next_update.timestamp() - time.time())
            yield crl
        failures = CounterMetricFamily("gateway_tls_handshake_failures",
                                       "TLS handshakes refused, by reason", labels=["reason"])
        for reason, count in sorted(self.failures.items()):
            failures.add_metric([reason], count)
        yield failures
        reloads = CounterMetricFamily("gateway_tls_reloads",
                                      "Certificate reloads (SIGHUP), by result",
                                      labels=["result"])
        for result, count in sorted(self.reloads.items()):
            reloads.add_metric([result], count)
        yield reloads
