"""Which bearer keys the gateway accepts, and under which id and limits.

Two sources, merged:

* plain keys from ``--api-key-file`` / ``$APPLIANCE_API_KEYS`` (hashed on arrival:
  ``GatewaySettings.api_key_sha256``); their id is the first 8 hex digits of the digest and
  their limits are the policy's ``admission.default_limits``;
* the named keys file (:mod:`appliance.config.keys`), re-read by :meth:`KeyStore.reload` on SIGHUP.
  An unreadable or invalid file on reload keeps the previous keys (logged): a typo must not
  lock every user out, and a revoked key stays revoked only once the file is valid again.

:meth:`KeyStore.authenticate` hashes the presented key once and compares it with every
stored digest with ``hmac.compare_digest`` (no early exit); an expired key is refused like
an unknown one.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import logging
from dataclasses import dataclass
from pathlib import Path

from appliance.config.keys import KeyLimits, load_keys
from appliance.errors import ApplianceError

LOG = logging.getLogger("appliance.gateway")
# Bounds of a bearer key's length (characters): hash_api_key and the bearer check.
MIN_API_KEY_CHARS = 16
MAX_API_KEY_CHARS = 512


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """An accepted key: ``id`` (shown in logs/metrics), digest, expiry (epoch s), limits."""

    id: str
    digest: bytes
    expires_at: float | None
    limits: KeyLimits


class KeyStore:
    """The current set of accepted keys (replaced whole on reload)."""

    def __init__(self, plain_digests: tuple[str, ...], default_limits: KeyLimits,
                 keys_file: Path | None) -> None:
        self.keys_file = keys_file
        self.default_limits = default_limits
        self._plain = tuple(KeyEntry(d[:8], bytes.fromhex(d), None, default_limits)
                            for d in plain_digests)
        self.entries: tuple[KeyEntry, ...] = self._plain
        self.reloads = 0
        if keys_file is not None:
            self.entries = self._plain + self._named(keys_file)  # raises at start-up

    @staticmethod
    def _named(path: Path) -> tuple[KeyEntry, ...]:
        records = load_keys(path).keys
        return tuple(KeyEntry(r.id, bytes.fromhex(r.sha256),
                              r.expires.timestamp() if r.expires else None, r.limits)
                     for r in records)

    def reload(self) -> bool:
        """Re-read the keys file; False (old keys kept) when it is unreadable/invalid."""
        if self.keys_file is None:
            return True
        try:
            named = self._named(self.keys_file)
        except ApplianceError as exc:
            LOG.error("keys file reload failed, keeping the previous %d keys: %s",
                      len(self.entries), exc.message)
            return False
        self.entries = self._plain + named
        self.reloads += 1
        LOG.warning("keys file reloaded: %d named keys", len(named))
        return True

    def authenticate(self, token: bytes, now: float | None = None) -> KeyEntry | None:
        """The entry whose digest matches ``token`` and is not expired, else ``None``."""
        digest = hashlib.sha256(token).digest()
        matched: KeyEntry | None = None
        for entry in self.entries:  # compare against every key: no early exit
            if hmac.compare_digest(digest, entry.digest):
                matched = entry
        if matched is None or matched.expires_at is None:
            return matched
        moment = dt.datetime.now(dt.UTC).timestamp() if now is None else now
        return matched if moment < matched.expires_at else None

    def for_certificate(self, key_id: str) -> KeyEntry:
        """The entry for a verified client certificate that the TLS policy maps to
        ``key_id`` (:mod:`.tls`): the named key of that id, for its limits, if the keys file
        has one; else an entry with the default limits. No digest: it never matches a bearer
        key."""
        for entry in self.entries:
            if entry.id == key_id:
                return entry
        return KeyEntry(key_id, b"", None, self.default_limits)
