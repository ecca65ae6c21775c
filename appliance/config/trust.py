"""The ``[trust]`` and ``[store]`` sections of a deployment policy.

Shape::

    [store]
    root = "/var/lib/appliance/models"      # the trusted model store (see appliance.store)

    [trust]
    revoked = ["<sha256 hex of a key's DER SubjectPublicKeyInfo>", ...]

    [[trust.keys]]
    name = "release-2026"                    # [A-Za-z0-9._-]{1,64}, unique
    public_key = "keys/release-2026.pub"     # PEM, relative to the policy file
    algorithm = "P-256"                      # or "P-384"
    not_before = 2026-01-01T00:00:00Z        # optional TOML datetimes with an offset
    not_after = 2027-01-01T00:00:00Z

``appliance keygen`` prints a new key's fingerprint. Kept out of ``policy.py`` so that file
only gains two fields and a path-resolution line.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from appliance.config.base import StrictModel
from appliance.signing import TrustedKey, TrustStore

DEFAULT_STORE = Path("/var/lib/appliance/models")


class TrustKeyPolicy(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z0-9._-]{1,64}$")
    public_key: Path
    algorithm: Literal["P-256", "P-384"]
    not_before: dt.datetime | None = None
    not_after: dt.datetime | None = None

    @field_validator("not_before", "not_after")
    @classmethod
    def _aware(cls, value: dt.datetime | None) -> dt.datetime | None:
        if value is not None and value.utcoffset() is None:
            raise ValueError("must carry a UTC offset, e.g. 2027-01-01T00:00:00Z")
        return value

    @model_validator(mode="after")
    def _window(self) -> TrustKeyPolicy:
        if self.not_before and self.not_after and self.not_after <= self.not_before:
            raise ValueError("not_after must be later than not_before")
        return self


class TrustPolicy(StrictModel):
    keys: tuple[TrustKeyPolicy, ...] = ()
    revoked: tuple[str, ...] = ()

    @field_validator("revoked")
    @classmethod
    def _fingerprints(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        out = []
        for item in value:
            text = item.lower().removeprefix("sha256:").replace(":", "")
            if len(text) != 64 or any(c not in "0123456789abcdef" for c in text):
                raise ValueError(f"{item!r} is not a SHA-256 hex key fingerprint")
            out.append(text)
        return tuple(out)

    @field_validator("keys")
    @classmethod
    def _unique(cls, value: tuple[TrustKeyPolicy, ...]) -> tuple[TrustKeyPolicy, ...]:
        names = [key.name for key in value]
        dup = {name for name in names if names.count(name) > 1}
        if dup:
            raise ValueError(f"key names must be unique: {', '.join(sorted(dup))}")
        return value

    def resolved(self, base: Path) -> TrustPolicy:
        """Key paths made absolute against ``base`` (the policy file's folder)."""
        return self.model_copy(update={"keys": tuple(
            key.model_copy(update={"public_key": key.public_key if key.public_key.is_absolute()
                                   else (base / key.public_key).resolve()})
            for key in self.keys)})

    def store(self) -> TrustStore:
        """The ``TrustStore`` the verifier uses."""
        return TrustStore(
            tuple(TrustedKey(k.name, k.public_key, k.algorithm, k.not_before, k.not_after)
                  for k in self.keys),
            frozenset(self.revoked))


class StorePolicy(StrictModel):
    """``[store]``: ``root`` (the store folder); ``allow_owner_serve`` (default false) lets a
    non-root user serve a store it owns, with a warning: the ownership check
    (``appliance.store._ownership``) is off. Only for a developer's own store and for test
    runs as a non-root user; never in production."""

    root: Path = DEFAULT_STORE
    allow_owner_serve: bool = False

    def resolved(self, base: Path) -> StorePolicy:
        return self if self.root.is_absolute() else self.model_copy(
            update={"root": (base / self.root).resolve()})
