"""Policy table ``[auth]``: OIDC / JWT bearer tokens beside the static keys, and the group
table that maps an identity provider's groups to the same limits named keys have.

Shape (every key optional; ``policies/default.toml`` shows it commented out)::

    [auth.oidc]
    issuer = "https://idp.example.com/realms/corp"   # the token's ``iss``, exactly
    audience = "appliance"                           # must be in the token's ``aud``
    jwks_file = "/etc/appliance/idp-jwks.json"       # air gap: the IdP's JWKS, copied ...
    # jwks_url = "https://idp.example.com/.../certs"  # ... or fetched over HTTPS, trusting
    # jwks_ca = "/etc/appliance/idp-ca.pem"          #     only this CA (pinned; required)
    # jwks_refresh_s = 300                           # URL: re-fetch period (s)
    algorithms = ["RS256", "ES256"]                  # asymmetric only (none / HS* refused)
    clock_skew_s = 60                                # leeway on exp / nbf / iat (s)
    subject_claim = "sub"                            # who (audit log, per-user limits)
    groups_claim = "groups"                          # list of group names (or one string)
    limits_scope = "subject"                         # "subject": each user gets the group's
                                                     # limits; "group": the group shares them
    # [auth.oidc.default_limits]                      # tokens in no listed group; absent:
    # rpm = 60                                       # such tokens are refused (403)

    [auth.groups.engineering]                        # first listed group the token has wins
    rpm = 600; tpm = 200000; concurrent = 8; max_tokens = 1024

Relative paths resolve against the policy file's folder (:meth:`AuthPolicy.resolved`).
Refused at load (``policy_invalid``): an algorithm that is not asymmetric (``none``,
``HS256`` ... would let the public key act as an HMAC secret), both or neither of
``jwks_file`` / ``jwks_url``, a ``jwks_url`` that is not ``https://`` or has no ``jwks_ca``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from appliance.config.base import StrictModel
from appliance.config.keys import KEY_ID_PATTERN, KeyLimits

ASYMMETRIC_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
                         "ES256", "ES384", "ES512", "EdDSA")


class OidcPolicy(StrictModel):
    """``[auth.oidc]`` (see the module docstring)."""

    issuer: str = Field(min_length=1, max_length=2048)
    audience: str = Field(min_length=1, max_length=2048)
    jwks_file: Path | None = None
    jwks_url: str | None = None
    jwks_ca: Path | None = None
    jwks_refresh_s: float = Field(default=300.0, ge=10, le=86_400)
    algorithms: tuple[str, ...] = ("RS256", "ES256")
    clock_skew_s: float = Field(default=60.0, ge=0, le=600)
    subject_claim: str = Field(default="sub", min_length=1, max_length=64)
    groups_claim: str = Field(default="groups", min_length=1, max_length=64)
    limits_scope: Literal["subject", "group"] = "subject"
    default_limits: KeyLimits | None = None

    @field_validator("algorithms")
    @classmethod
    def _asymmetric(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("list at least one algorithm")
        for alg in value:
            if alg not in ASYMMETRIC_ALGORITHMS:
                raise ValueError(f"algorithm {alg!r} is not allowed: only asymmetric "
                                 f"algorithms ({', '.join(ASYMMETRIC_ALGORITHMS)})")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> OidcPolicy:
        if (self.jwks_file is None) == (self.jwks_url is None):
            raise ValueError("set exactly one of jwks_file and jwks_url")
        if self.jwks_url is not None:
            parts = urlsplit(self.jwks_url)
            if parts.scheme != "https" or not parts.hostname:
                raise ValueError("jwks_url must be an https:// URL")
            if self.jwks_ca is None:
                raise ValueError("jwks_url needs jwks_ca (the CA the IdP's certificate must "
                                 "chain to; nothing else is trusted)")
        return self


class AuthPolicy(StrictModel):
    """``[auth]``: ``oidc`` (``None``: static keys only) and ``groups`` (name -> limits,
    in the policy's order)."""

    oidc: OidcPolicy | None = None
    groups: dict[str, KeyLimits] = Field(default_factory=dict)

    @field_validator("groups")
    @classmethod
    def _names(cls, value: dict[str, KeyLimits]) -> dict[str, KeyLimits]:
        for name in value:
            if not re.fullmatch(KEY_ID_PATTERN, name):
                raise ValueError(f"group name {name!r} must match {KEY_ID_PATTERN}")
        return value

    def resolved(self, base: Path) -> AuthPolicy:
        """Paths made absolute against ``base`` (the policy file's folder)."""
        if self.oidc is None:
            return self
        oidc = self.oidc
        update = {name: (base / path).resolve()
                  for name, path in (("jwks_file", oidc.jwks_file), ("jwks_ca", oidc.jwks_ca))
                  if path is not None and not path.is_absolute()}
        return self.model_copy(update={"oidc": oidc.model_copy(update=update)})
