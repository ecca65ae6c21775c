"""The audit chain's rules, shared by the writer (:mod:`.writer`) and the verifier
(:mod:`.verify`): what links a record to the previous one and what a checkpoint signs.

* Every record is one line of compact JSON whose first two members are ``"seq"`` (0, 1, 2 ...
  without gaps, continued across rotated files) and ``"prev"`` (lower-case hex SHA-256 of the
  previous record's line, its UTF-8 bytes without the newline; :data:`GENESIS`, 64 zeros,
  for ``seq`` 0). The hash is over the bytes as written, never a re-serialisation, so the
  verifier needs no canonical JSON.
* A checkpoint is a record ``{"seq", "prev", "ts", "event": "audit_checkpoint", "key": <key
  fingerprint>, "sig": <base64 DER ECDSA signature>}`` signed by the appliance's audit key
  (ECDSA P-256 or P-384, as :mod:`appliance.signing`) over :func:`checkpoint_message`
  (``seq``, ``prev``, ``ts``): since ``prev`` is the hash of everything before it, one
  signature covers the whole chain up to it.

What this catches, and what it cannot: an edited, deleted, inserted or reordered record
breaks a ``prev`` link or the ``seq`` run; rewriting the chain from some record on needs a
new signature on every later checkpoint, which needs the private key. Records after the last
checkpoint are linked but not yet signed, so cutting off that tail is not detectable
(checkpoints come every ``checkpoint_every`` records, every ``checkpoint_interval_s``
seconds, at rotation and at shutdown; ``appliance audit verify`` reports the unsigned tail).
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec

from appliance.signing import fingerprint, load_public_key, signature_hash

GENESIS = "0" * 64
CHECKPOINT_EVENT = "audit_checkpoint"
MESSAGE_PREFIX = b"appliance-audit-checkpoint/v1\n"


def line_hash(line: bytes) -> str:
    """SHA-256 hex of one record line (without its newline)."""
    return hashlib.sha256(line).hexdigest()


def checkpoint_message(seq: int, prev: str, ts: float) -> bytes:
    """The bytes a checkpoint signs: prefix, then ``seq``, ``prev`` and ``ts`` (as written
    in the record, ``repr`` of the float), one per line."""
    return MESSAGE_PREFIX + f"{seq}\n{prev}\n{ts!r}".encode()


def sign_checkpoint(key: ec.EllipticCurvePrivateKey, seq: int, prev: str,
                    ts: float) -> str:
    """Base64 DER ECDSA signature of :func:`checkpoint_message`."""
    public = key.public_key()
    raw = key.sign(checkpoint_message(seq, prev, ts), ec.ECDSA(signature_hash(public)))
    return base64.b64encode(raw).decode("ascii")


def checkpoint_valid(key: ec.EllipticCurvePublicKey, seq: int, prev: str, ts: float,
                     sig: str) -> bool:
    """True when ``sig`` is ``key``'s signature of the checkpoint's message."""
    try:
        raw = base64.b64decode(sig, validate=True)
        key.verify(raw, checkpoint_message(seq, prev, ts), ec.ECDSA(signature_hash(key)))
    except (InvalidSignature, ValueError):
        return False
    return True


def public_key(path: Path) -> ec.EllipticCurvePublicKey:
    """The audit public key (PEM, as ``appliance keygen`` writes it); ``SigningError``."""
    return load_public_key(path)


def key_fingerprint(key: ec.EllipticCurvePublicKey) -> str:
    """SHA-256 hex of the key's DER SubjectPublicKeyInfo (as ``appliance keygen`` prints)."""
    return fingerprint(key)
