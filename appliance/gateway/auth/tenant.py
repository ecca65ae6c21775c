"""Who a request belongs to (its *tenant*) and the engine cache salt that keeps tenants apart.

The engine's prefix cache is shared by every request it serves: a request whose prompt starts
like an earlier one reuses that one's KV blocks and answers its first token much sooner
(measured on the CPU engine: 0.07x the time of a fresh prompt of ~1,000 tokens). Without
salting, any caller can time a guessed document or prefix and learn whether someone else sent
it ("prompt leakage through KV-cache sharing"). vLLM salts its block hashes with the
per-request ``cache_salt`` (vLLM PR 17045; ``ChatCompletionRequest.cache_salt`` and
``ResponsesRequest.cache_salt`` in the installed 0.32 engine, at most 128 characters, none of
``@ / \\`` or NUL): requests with different salts never share cached blocks.

Tenant ids (:func:`tenant_id`), from what the gateway already knows of the caller (its
:class:`~.keystore.KeyEntry`):

=====================  ==========================  ==========================================
caller                 ``cache_isolation = "key"``  ``"group"``
=====================  ==========================  ==========================================
named key ``alice``    ``key:alice``                ``key:alice`` (a key is its own group)
plain key              ``key:<8 hex of its digest>`` the same
client certificate     ``key:<mapped key id>``      the same (the certificate *is* that key)
OIDC token             ``key:oidc:<group>:<subject>`` ``group:<group>``
                       (``key:oidc:<group>`` with
                       ``limits_scope = "group"``)
=====================  ==========================  ==========================================

``"none"`` sets no salt: every caller shares the cache (one trusted team per appliance).

The salt is ``HMAC-SHA256(secret, tenant id)`` as 64 hex digits, so it reveals nothing of
the id, cannot be guessed without the secret, and is the same in every gateway process
(``[gateway] workers``) because they share the secret. The secret (:func:`read_secret`) is
the file ``[gateway] cache_salt_secret`` names (a systemd credential,
``${CREDENTIALS_DIRECTORY}/cache-salt``, >= 32 bytes), else 32 random bytes drawn at start
(:func:`new_secret`): the engine's prefix cache lives in its memory and is gone when the
appliance restarts, so a secret that changes then costs nothing. It is never logged.

A ``cache_salt`` sent by a client is refused (``forbidden_parameter``,
:data:`..openai_fields.REFUSED`): a client-chosen salt could otherwise name another tenant's.

``GET /metrics`` carries series labelled by ``key_id`` (requests, in-flight requests and
admission refusals per key): read by any key, they would tell one tenant when and how much
another works. :func:`own_series` keeps only the caller's own; the key ids in ``[gateway]
metrics_keys`` (the monitoring system's key) see every key's.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from enum import StrEnum
from pathlib import Path

from appliance.config.base import expand_credential
from appliance.errors import PolicyError

from .keystore import KeyEntry

MIN_SECRET_BYTES = 32
MAX_SECRET_BYTES = 4096
OIDC_PREFIX = "oidc:"


class CacheIsolation(StrEnum):
    """``[gateway] cache_isolation``: which callers may share engine cache."""

    KEY = "key"  # each key, certificate or OIDC subject alone (the default)
    GROUP = "group"  # an OIDC group shares; keys and certificates stay alone
    NONE = "none"  # everyone shares (no salt is sent)


def tenant_id(entry: KeyEntry, isolation: CacheIsolation) -> str | None:
    """The tenant of the caller ``entry`` under ``isolation`` (table above); ``None`` for
    ``"none"``."""
    if isolation is CacheIsolation.NONE:
        return None
    if isolation is CacheIsolation.GROUP and entry.id.startswith(OIDC_PREFIX):
        return "group:" + entry.id[len(OIDC_PREFIX):].split(":", 1)[0]
    return "key:" + entry.id


def cache_salt(secret: bytes, tenant: str) -> str:
    """The engine cache salt of ``tenant``: HMAC-SHA256 under ``secret``, 64 hex digits."""
    return hmac.new(secret, tenant.encode(), hashlib.sha256).hexdigest()


def salted(body: bytes, salt: str) -> bytes:
    """The checked request ``body`` (a serialised JSON object without ``cache_salt``: the
    request checks refuse the field) with ``"cache_salt": salt`` added as its last member."""
    end = body.rstrip()
    if not end.endswith(b"}"):
        raise ValueError("the request body is not a JSON object")
    head = end[:-1].rstrip()
    sep = b"" if head.endswith(b"{") else b","
    return head + sep + b'"cache_salt":"' + salt.encode("ascii") + b'"}'


def own_series(text: bytes, key_id: str) -> bytes:
    """The Prometheus text exposition ``text`` without the samples labelled with another
    key's ``key_id`` (``# HELP`` / ``# TYPE`` lines and unlabelled series are kept)."""
    own = key_id.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    mine = b'key_id="' + own.encode() + b'"'
    return b"".join(line for line in text.splitlines(keepends=True)
                    if b'key_id="' not in line or line.startswith(b"#") or mine in line)


def new_secret() -> str:
    """32 random bytes as hex (no secret file configured)."""
    return secrets.token_hex(MIN_SECRET_BYTES)


def read_secret(path: Path) -> str:
    """The secret in the file ``path`` (whitespace stripped), as text.

    Raises :class:`PolicyError` ``cache_salt_secret_invalid`` naming ``path`` when it is
    unreadable, not text, or shorter than 32 bytes. The secret itself is never in the
    message."""
    fix = "create it as root: `openssl rand -hex 32 > FILE`, mode 0600, and load it with " \
          "LoadCredential=cache-salt:FILE"
    try:
        raw = path.read_bytes()[:MAX_SECRET_BYTES + 1].strip()
    except OSError as exc:
        raise PolicyError(f"cannot read the cache salt secret: {exc.strerror}",
                          code="cache_salt_secret_invalid", where=str(path),
                          fix=fix) from None
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise PolicyError("the cache salt secret is not ASCII text",
                          code="cache_salt_secret_invalid", where=str(path), fix=fix) from None
    if not MIN_SECRET_BYTES <= len(text) <= MAX_SECRET_BYTES:
        raise PolicyError(f"the cache salt secret has {len(text)} bytes; it needs "
                          f"{MIN_SECRET_BYTES}..{MAX_SECRET_BYTES}",
                          code="cache_salt_secret_invalid", where=str(path), fix=fix)
    return text


def load_secret(path: Path) -> str:
    """The secret ``[gateway] cache_salt_secret`` names (``${CREDENTIALS_DIRECTORY}/NAME``
    expanded). Raises :class:`PolicyError` ``cache_salt_secret_invalid`` (see
    :func:`read_secret`; also when the credentials folder is not set)."""
    try:
        path = expand_credential(path, "gateway.cache_salt_secret")
    except ValueError as exc:
        raise PolicyError(str(exc), code="cache_salt_secret_invalid",
                          where="gateway.cache_salt_secret",
                          fix="start under systemd with LoadCredential= or use a path") from None
    return read_secret(path)
