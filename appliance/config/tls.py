"""Transport policy: the ``[gateway.tls]`` table and the rule that refuses plaintext off loopback.

Shape (all paths relative to the policy file, or ``${CREDENTIALS_DIRECTORY}/NAME`` for a
systemd credential)::

    [gateway]
    allow_plaintext = false          # true only behind a TLS-terminating proxy on this host

    [gateway.tls]
    certificate = "tls/server.pem"   # PEM chain, leaf first
    private_key = "tls/server.key"   # PEM, unencrypted (use systemd-creds for encryption at rest)
    client_ca = "tls/clients-ca.pem" # PEM bundle; needed for client_auth optional|require
    client_auth = "none"             # none | optional | require
    crl = "tls/clients.crl.pem"      # PEM CRL(s) for client certificates (leaf checked)
    bearer_required = false          # true: a client certificate never replaces the API key

    [[gateway.tls.client_ids]]       # verified client certificate -> key id; first match wins
    key_id = "billing"
    san_dns = "billing.svc.corp"     # exactly one of subject, subject_cn, san_dns,
                                     # san_email, san_uri (exact, case-sensitive match)

Errors: :class:`appliance.errors.PolicyError` with a stable code and the offending field.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import Field, StrictBool, model_validator

from appliance.config.base import StrictModel
from appliance.errors import PolicyError

CREDENTIALS_PREFIX = "${CREDENTIALS_DIRECTORY}/"
MATCH_FIELDS = ("subject", "subject_cn", "san_dns", "san_email", "san_uri")


class ClientIdRule(StrictModel):
    """One mapping rule: a verified client certificate whose field equals the value gets
    ``key_id`` (used like an API key's id for limits, metrics and the audit log)."""

    key_id: str = Field(pattern=r"^[A-Za-z0-9._:@-]{1,64}$")
    subject: str | None = Field(None, min_length=1, max_length=1024)  # RFC 4514 string
    subject_cn: str | None = Field(None, min_length=1, max_length=256)
    san_dns: str | None = Field(None, min_length=1, max_length=256)
    san_email: str | None = Field(None, min_length=1, max_length=256)
    san_uri: str | None = Field(None, min_length=1, max_length=1024)

    @model_validator(mode="after")
    def _one_field(self) -> ClientIdRule:
        given = [name for name in MATCH_FIELDS if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"set exactly one of {', '.join(MATCH_FIELDS)}")
        return self

    @property
    def field(self) -> str:
        """The certificate field this rule matches (one of ``MATCH_FIELDS``)."""
        return next(name for name in MATCH_FIELDS if getattr(self, name) is not None)

    @property
    def value(self) -> str:
        """The exact value the field must hold."""
        value = getattr(self, self.field)
        return str(value)


class TlsPolicy(StrictModel):
    """``[gateway.tls]``; see the module docstring. Paths are absolute after
    :meth:`resolved`."""

    certificate: Path
    private_key: Path
    client_ca: Path | None = None
    client_auth: Literal["none", "optional", "require"] = "none"
    crl: Path | None = None
    bearer_required: StrictBool = False
    client_ids: tuple[ClientIdRule, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> TlsPolicy:
        if self.client_auth != "none" and self.client_ca is None:
            raise ValueError(f"client_auth = {self.client_auth!r} needs client_ca")
        if self.client_auth == "none":
            for name in ("client_ca", "crl"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} is set but client_auth is 'none'")
            if self.client_ids:
                raise ValueError("client_ids is set but client_auth is 'none'")
        if self.bearer_required and self.client_ids:
            raise ValueError("client_ids has no effect with bearer_required = true")
        return self

    def resolved(self, base: Path, env: Mapping[str, str] | None = None) -> TlsPolicy:
        """A copy with every path absolute: relative to ``base`` (the policy's folder), or
        under ``$CREDENTIALS_DIRECTORY`` for ``${CREDENTIALS_DIRECTORY}/NAME``.

        Raises ``PolicyError`` (code ``tls_credentials_unset``) when a path names the
        credentials folder and the variable is not set (not running under systemd).
        """
        environ = os.environ if env is None else env
        update: dict[str, Path] = {}
        for name in ("certificate", "private_key", "client_ca", "crl"):
            value: Path | None = getattr(self, name)
            if value is not None:
                update[name] = _resolve_path(base, value, environ, name)
        return self.model_copy(update=update)


def _resolve_path(base: Path, value: Path, env: Mapping[str, str], name: str) -> Path:
    text = str(value)
    if text.startswith(CREDENTIALS_PREFIX):
        folder = env.get("CREDENTIALS_DIRECTORY", "")
        rest = text[len(CREDENTIALS_PREFIX):]
        if not folder:
            raise PolicyError(
                f"gateway.tls.{name} names a systemd credential but $CREDENTIALS_DIRECTORY "
                "is not set", code="tls_credentials_unset", where=f"gateway.tls.{name}",
                fix="run under systemd with LoadCredential= (or give a file path)")
        if not rest or "/" in rest or rest in (".", ".."):
            raise PolicyError(f"gateway.tls.{name}: bad credential name {rest!r}",
                              where=f"gateway.tls.{name}",
                              fix="use ${CREDENTIALS_DIRECTORY}/NAME with a plain name")
        return Path(folder) / rest
    if "$" in text:
        raise PolicyError(f"gateway.tls.{name}: only ${{CREDENTIALS_DIRECTORY}}/NAME is "
                          "expanded", where=f"gateway.tls.{name}",
                          fix="use a plain path or ${CREDENTIALS_DIRECTORY}/NAME")
    return value if value.is_absolute() else (base / value).resolve()


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback IP literal (``127.0.0.0/8``, ``::1``). Any other name,
    the wildcard addresses (``0.0.0.0``, ``::``) and ``""`` are not loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def require_tls_for_host(host: str, tls: TlsPolicy | None, allow_plaintext: bool) -> None:
    """Refuse a plaintext listener on a non-loopback address (fail closed).

    Raises ``PolicyError`` code ``plaintext_not_allowed`` (CLI exit status 2) unless TLS is
    configured, the address is loopback, or ``[gateway] allow_plaintext = true``.
    """
    if tls is None and not allow_plaintext and not is_loopback(host):
        raise PolicyError(
            f"refusing to serve plaintext HTTP on non-loopback address {host!r}: API keys "
            "and prompts would cross the network in the clear",
            code="plaintext_not_allowed", where="gateway.host",
            fix="configure [gateway.tls] (certificate, private_key), bind 127.0.0.1, or set "
                "[gateway] allow_plaintext = true behind a TLS-terminating proxy on this host")
