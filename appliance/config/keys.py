"""Named API keys: the keys file and ``appliance keys add|list|revoke``.

The file (JSON, mode 0600, written atomically) holds only SHA-256 digests, never a key::

    {"schema_version": 1, "keys": [
        {"id": "alice", "sha256": "<64 hex>", "created": "2026-12-01T09:00:00Z",
         "expires": "2027-01-01T00:00:00Z" | null,
         "limits": {"rpm": 600, "tpm": 200000, "concurrent": 8, "max_tokens": 1024,
                    "models": ["appliance-model"]}}]}

``id`` is what logs, the audit log and metrics show (``key_id``); every limit is optional
(``None`` = unlimited): ``rpm`` requests per minute, ``tpm`` tokens per minute (charged at
admission as prompt bytes / 4 + ``max_tokens``), ``concurrent`` requests in flight,
``max_tokens`` cap on a request's ``max_tokens``; ``tokens_per_day`` / ``tokens_per_month``
quotas (tokens charged like ``tpm``, per UTC calendar day / month, kept across restarts:
:mod:`appliance.gateway.admission.quotas`); ``models`` the served model names the key may use
(``None``: all; a request for another is 403 ``model_not_allowed``, and ``/v1/models`` lists
only these); ``allowed_sources`` the source networks (CIDR, IPv4 or IPv6) the key may call
from (``None``: any; from elsewhere 403 ``source_not_allowed``,
:mod:`appliance.gateway.auth.source_address`). The same :class:`KeyLimits` object is what any
other principal (an OIDC group, a client certificate) resolves to.
``add`` prints the plaintext key once.
Errors are :class:`~appliance.errors.ApplianceError` with code ``keys_invalid`` /
``key_exists`` / ``key_not_found`` naming the file and entry.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import secrets
from pathlib import Path

from pydantic import Field, ValidationError, field_validator

from appliance.atomic_file import replace_file
from appliance.config.base import StrictModel
from appliance.config.networks import check_networks
from appliance.errors import ApplianceError

KEY_ID_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"
KEY_PREFIX = "sk-appl-"


class KeyLimits(StrictModel):
    """Per-key limits; ``None`` = unlimited (see the module docstring for units)."""

    rpm: int | None = Field(default=None, ge=1, le=10_000_000)
    tpm: int | None = Field(default=None, ge=1, le=10_000_000_000)
    concurrent: int | None = Field(default=None, ge=1, le=100_000)
    max_tokens: int | None = Field(default=None, ge=1, le=1_048_576)
    tokens_per_day: int | None = Field(default=None, ge=1, le=10**15)
    tokens_per_month: int | None = Field(default=None, ge=1, le=10**15)
    models: tuple[str, ...] | None = Field(default=None, max_length=256)
    # source networks (CIDR) the key / group is served from (appliance.config.networks)
    allowed_sources: tuple[str, ...] | None = None

    @field_validator("allowed_sources")
    @classmethod
    def _sources(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return check_networks(value)

    @field_validator("models")
    @classmethod
    def _model_names(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for name in value or ():
            if not 1 <= len(name) <= 256 or not name.isprintable():
                raise ValueError("model names are 1-256 printable characters")
        return value

    def allows(self, model: str) -> bool:
        """True when ``model`` (a served name) is on the allow-list (or there is none)."""
        return self.models is None or model in self.models


class KeyRecord(StrictModel):
    id: str = Field(pattern=KEY_ID_PATTERN)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    created: dt.datetime | None = None
    expires: dt.datetime | None = None
    limits: KeyLimits = KeyLimits()

    @field_validator("created", "expires")
    @classmethod
    def _aware(cls, value: dt.datetime | None) -> dt.datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("times need a time zone (e.g. 2027-01-01T00:00:00Z)")
        return value

    def expired(self, now: dt.datetime | None = None) -> bool:
        moment = now or dt.datetime.now(dt.UTC)
        return self.expires is not None and self.expires <= moment


class KeysFile(StrictModel):
    schema_version: int = Field(default=1, ge=1, le=1)
    keys: tuple[KeyRecord, ...] = ()


def _error(path: Path, message: str, code: str = "keys_invalid",
           fix: str = "fix the entry or recreate the file with `appliance keys add`"
           ) -> ApplianceError:
    return ApplianceError(message, code=code, where=str(path), fix=fix)


def load_keys(path: Path) -> KeysFile:
    """Read and validate a keys file (unique ids and digests)."""
    try:
        data = json.loads(path.read_bytes())
    except OSError as exc:
        raise _error(path, f"cannot read keys file: {exc.strerror}",
                     fix="pass an existing keys file (create one with `appliance keys add`)"
                     ) from None
    except ValueError as exc:
        raise _error(path, f"keys file is not valid JSON: {exc}") from None
    try:
        parsed = KeysFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise _error(path, f"invalid keys file field {where!r}: {first['msg']}") from None
    ids = [k.id for k in parsed.keys]
    digests = [k.sha256 for k in parsed.keys]
    if len(set(ids)) != len(ids) or len(set(digests)) != len(digests):
        raise _error(path, "keys file repeats a key id or digest")
    return parsed


def save_keys(path: Path, keys: KeysFile) -> None:
    """Write atomically (temp file + rename in the same folder), mode 0600."""
    write_private(path, json.dumps(keys.model_dump(mode="json"), indent=2) + "\n")


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) in one step, mode 0600
    (:func:`appliance.atomic_file.replace_file`; raises its ``OSError``). Used for the keys
    file and the gateway's quota state (:mod:`appliance.gateway.admission.quotas`)."""
    replace_file(path, text.encode("utf-8"), 0o600)


def _existing(path: Path) -> KeysFile:
    return load_keys(path) if path.exists() else KeysFile()


def add_key(path: Path, key_id: str, limits: KeyLimits,
            expires: dt.datetime | None = None) -> str:
    """Add a new random key; returns its plaintext (the only time it exists)."""
    current = _existing(path)
    if any(k.id == key_id for k in current.keys):
        raise _error(path, f"key id {key_id!r} already exists", code="key_exists",
                     fix="choose another id or revoke the old key first")
    plain = KEY_PREFIX + secrets.token_urlsafe(32)
    try:
        record = KeyRecord(id=key_id, sha256=hashlib.sha256(plain.encode()).hexdigest(),
                           created=dt.datetime.now(dt.UTC).replace(microsecond=0),
                           expires=expires, limits=limits)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise _error(path, f"invalid key {'.'.join(map(str, first['loc']))}: {first['msg']}",
                     fix="key ids match [A-Za-z0-9._-]{1,64}") from None
    save_keys(path, KeysFile(keys=(*current.keys, record)))
    return plain


def revoke_key(path: Path, key_id: str) -> None:
    """Remove ``key_id`` from the file (a running gateway drops it on SIGHUP)."""
    current = load_keys(path)
    kept = tuple(k for k in current.keys if k.id != key_id)
    if len(kept) == len(current.keys):
        raise _error(path, f"no key with id {key_id!r}", code="key_not_found",
                     fix="see `appliance keys list`")
    save_keys(path, KeysFile(keys=kept))


def describe(record: KeyRecord, now: dt.datetime | None = None) -> str:
    """One line for ``appliance keys list`` (never the key, only a digest prefix)."""
    limits = ", ".join(f"{k}={','.join(v) if isinstance(v, tuple | list) else v}"
                       for k, v in record.limits.model_dump().items()
                       if v is not None) or "unlimited"
    state = "EXPIRED" if record.expired(now) else "active"
    expires = record.expires.isoformat() if record.expires else "never"
    return (f"{record.id}\tsha256:{record.sha256[:12]}\t{state}\texpires {expires}\t"
            f"{limits}")
