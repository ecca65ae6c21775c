"""Trust store: named signer keys with a validity window, and revocation by fingerprint.

A bundle is accepted only when it verifies with a key that is listed, of the listed
algorithm, not revoked and inside its ``[not_before, not_after]`` window *now* (the time of
verification, not of signing: a bundle carries no trusted time). So a model signed by an old
key keeps verifying after a new key is added, until the old key expires or is revoked
(rotation: add the new key, re-sign and re-import, then let the old key expire or revoke it).

Every refusal is a ``SigningError`` whose message and ``where`` name the key and the reason.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ec

from appliance.errors import SigningError
from appliance.signing._bundle import Envelope, check_signature
from appliance.signing._keys import algorithm, fingerprint, key_hint, load_public_key


@dataclass(frozen=True)
class TrustedKey:
    """One ``[[trust.keys]]`` entry. ``algorithm`` is ``P-256`` or ``P-384``; the window
    bounds are timezone-aware (``None``: unbounded)."""

    name: str
    public_key: Path
    algorithm: str
    not_before: dt.datetime | None = None
    not_after: dt.datetime | None = None


@dataclass(frozen=True)
class TrustStore:
    """The keys a deployment trusts and the fingerprints it has revoked (lowercase hex
    SHA-256 of the DER SubjectPublicKeyInfo, see ``_keys.fingerprint``)."""

    keys: tuple[TrustedKey, ...]
    revoked: frozenset[str] = frozenset()

    @classmethod
    def single(cls, public_key: Path) -> TrustStore:
        """A store holding one key with no window (the ``--public-key`` path)."""
        key = load_public_key(Path(public_key))
        return cls((TrustedKey(Path(public_key).name, Path(public_key), algorithm(key)),))


@dataclass(frozen=True)
class Signer:
    """The trust-store key that authenticated a bundle."""

    name: str
    fingerprint: str
    algorithm: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "fingerprint": self.fingerprint,
                "algorithm": self.algorithm}


def _loaded(entry: TrustedKey) -> ec.EllipticCurvePublicKey:
    try:
        key = load_public_key(entry.public_key)
    except SigningError as exc:
        raise SigningError(
            f"trust-store key '{entry.name}' cannot be used: {exc.message}",
            code="trust_key_invalid", where=f"trust.keys[{entry.name}]: {entry.public_key}",
            fix="fix or remove this [[trust.keys]] entry",
        ) from None
    if algorithm(key) != entry.algorithm:
        raise SigningError(
            f"trust-store key '{entry.name}' is {algorithm(key)}, but the policy says "
            f"{entry.algorithm}", code="trust_key_invalid",
            where=f"trust.keys[{entry.name}]: {entry.public_key}",
            fix="set algorithm to the key's real curve, or point at the right PEM file",
        )
    return key


def _refuse(entry: TrustedKey, print_: str, code: str, reason: str, fix: str) -> SigningError:
    return SigningError(
        f"signer key '{entry.name}' (fingerprint {print_}) is refused: {reason}",
        code=code, where=f"trust.keys[{entry.name}]", fix=fix,
    )


def check_status(entry: TrustedKey, print_: str, revoked: frozenset[str],
                 now: dt.datetime) -> None:
    """Refuse a revoked key (``key_revoked``), one before ``not_before``
    (``key_not_yet_valid``) or after ``not_after`` (``key_expired``)."""
    if print_ in revoked:
        raise _refuse(entry, print_, "key_revoked", "its fingerprint is in [trust] revoked",
                      "obtain the model signed by a current key and import it again")
    if entry.not_before is not None and now < entry.not_before:
        raise _refuse(entry, print_, "key_not_yet_valid",
                      f"it is valid only from {entry.not_before.isoformat()} "
                      f"(now {now.isoformat(timespec='seconds')})",
                      "wait until not_before, or correct the key's window in the policy")
    if entry.not_after is not None and now > entry.not_after:
        raise _refuse(entry, print_, "key_expired",
                      f"it expired at {entry.not_after.isoformat()} "
                      f"(now {now.isoformat(timespec='seconds')})",
                      "obtain the model signed by a current key and import it again")


def authenticate(envelope: Envelope, trust: TrustStore, source: str,
                 now: dt.datetime | None = None) -> Signer:
    """Find the trust-store key that signed ``envelope`` and check its status at ``now``
    (default: the current UTC time).

    The bundle's key hint selects the key; a bundle without a hint is tried against every
    listed key. Raises ``SigningError``: ``trust_key_invalid`` (a listed key unreadable or
    of another algorithm), ``key_untrusted`` (no listed key matches), ``key_revoked``,
    ``key_not_yet_valid``, ``key_expired``, ``signature_invalid`` (naming the key)."""
    when = now or dt.datetime.now(dt.UTC)
    loaded = [(entry, _loaded(entry)) for entry in trust.keys]
    if envelope.hint is not None:
        candidates = [(e, k) for e, k in loaded if key_hint(k) == envelope.hint]
    else:
        candidates = loaded
    if not candidates:
        names = ", ".join(entry.name for entry in trust.keys) or "none"
        raise SigningError(
            f"signature '{source}' was made by a key that is not in the trust store (key "
            f"hint {(envelope.hint or '?')[:16]}…; trusted keys: {names})",
            code="key_untrusted", where=source,
            fix="add the publisher's public key as a [[trust.keys]] entry, or obtain a "
                "signature made by a trusted key",
        )
    last: SigningError | None = None
    for entry, key in candidates:
        print_ = fingerprint(key)
        try:
            check_signature(envelope, key, source)
        except SigningError as exc:
            last = SigningError(
                f"{exc.message} (trust-store key '{entry.name}', fingerprint {print_})",
                code=exc.code, where=exc.where, fix=exc.fix)
            continue
        check_status(entry, print_, trust.revoked, when)
        return Signer(entry.name, print_, algorithm(key))
    if last is None:  # pragma: no cover - candidates is not empty
        raise SigningError("no candidate key", code="key_untrusted", where=source)
    raise last
