"""Encode and decode OMS signature files: Sigstore bundle v0.3 JSON holding a DSSE envelope
whose payload is an in-toto Statement v1 with the model_signing v1.0 predicate.

Layout (as written by sigstore/model-transparency ``model_signing`` 1.1.1, key method)::

    {"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
     "verificationMaterial": {"publicKey": {"hint": <hex>}, "tlogEntries": []},
     "dsseEnvelope": {"payload": b64(statement), "payloadType": "application/vnd.in-toto+json",
                      "signatures": [{"sig": b64(DER ECDSA over PAE), "keyid": ""}]}}

DSSE PAE: ``"DSSEv1" SP len(type) SP type SP len(body) SP body`` (secure-systems-lab/dsse
protocol v1.0.0). Every decode error is a ``SigningError``; nothing here trusts the payload
before ``check_signature`` has passed.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec

from appliance.errors import SigningError
from appliance.signing._keys import key_hint, signature_hash
from appliance.signing._manifest import Manifest, check_name, root_digest
from scanner.readers import JSONProblem, loads_strict

BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://model_signing/signature/v1.0"
_HEX64 = re.compile(r"[0-9a-f]{64}")
_RESIGN = "re-sign the model with `appliance sign`"


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding of ``payload`` (lengths in bytes, decimal)."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def encode_statement(model_name: str, manifest: Manifest, ignore_paths: list[str]) -> bytes:
    """The in-toto Statement v1 JSON bytes for ``manifest`` (2-space indent, field order and
    spacing as model_signing 1.1.1 emits them)."""
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": model_name, "digest": {"sha256": manifest.root_digest}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "serialization": {
                "ignore_paths": ignore_paths, "allow_symlinks": False,
                "hash_type": "sha256", "method": "files",
            },
            "resources": [
                {"algorithm": "sha256", "name": name, "digest": digest}
                for name, digest in manifest.items()
            ],
        },
    }
    return json.dumps(statement, indent=2).encode("utf-8")


def encode_bundle(payload: bytes, key: ec.EllipticCurvePrivateKey) -> bytes:
    """Sign ``payload`` (DSSE, in-toto payload type) and return the bundle JSON bytes."""
    sig = key.sign(pae(PAYLOAD_TYPE, payload), ec.ECDSA(signature_hash(key.public_key())))
    bundle = {
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {
            "publicKey": {"hint": key_hint(key.public_key())}, "tlogEntries": [],
        },
        "dsseEnvelope": {
            "payload": base64.b64encode(payload).decode("ascii"),
            "payloadType": PAYLOAD_TYPE,
            "signatures": [{"sig": base64.b64encode(sig).decode("ascii"), "keyid": ""}],
        },
    }
    return json.dumps(bundle, separators=(",", ":")).encode("utf-8")


@dataclass(frozen=True)
class Envelope:
    """The signed parts of a bundle, not yet verified."""

    payload_type: str
    payload: bytes
    signature: bytes
    hint: str | None


def _malformed(where: str, message: str, code: str = "bundle_malformed") -> SigningError:
    return SigningError(message, code=code, where=where, fix=_RESIGN)


def _field(obj: Any, key: str, kind: type, where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise _malformed(where, f"signature bundle lacks required field '{where}'")
    value = obj[key]
    if not isinstance(value, kind):
        raise _malformed(where, f"signature bundle field '{where}' is not a {kind.__name__}")
    return value


def _b64(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        pass
    try:
        return base64.b64decode(text, altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise _malformed(where, f"signature bundle field '{where}' is not base64") from None


def parse_bundle(data: bytes, source: str) -> Envelope:
    """Decode bundle JSON bytes read from ``source``. Raises ``bundle_malformed`` (not JSON,
    duplicate keys, missing/mistyped fields, not base64, not exactly one signature) or
    ``bundle_unsupported`` (other media type or payload type, certificate/Sigstore bundle)."""
    try:
        doc = loads_strict(data)
    except JSONProblem as exc:
        raise _malformed(source, f"signature file '{source}' is not a valid bundle: {exc}",
                         ) from None
    if not isinstance(doc, dict):
        raise _malformed(source, f"signature file '{source}' is not a JSON object")
    media = _field(doc, "mediaType", str, "mediaType")
    if media != BUNDLE_MEDIA_TYPE:
        raise _malformed("mediaType", f"bundle media type {media!r} is not {BUNDLE_MEDIA_TYPE}",
                         "bundle_unsupported")
    material = _field(doc, "verificationMaterial", dict, "verificationMaterial")
    if "publicKey" not in material:
        raise _malformed(
            "verificationMaterial", "bundle carries no publicKey: only the key method "
            "(no certificate or Sigstore keyless) is supported", "bundle_unsupported")
    public = _field(material, "publicKey", dict, "verificationMaterial.publicKey")
    hint = public.get("hint")
    if hint is not None and not isinstance(hint, str):
        raise _malformed("verificationMaterial.publicKey.hint", "key hint is not a string")
    envelope = _field(doc, "dsseEnvelope", dict, "dsseEnvelope")
    payload_type = _field(envelope, "payloadType", str, "dsseEnvelope.payloadType")
    if payload_type != PAYLOAD_TYPE:
        raise _malformed("dsseEnvelope.payloadType",
                         f"DSSE payload type {payload_type!r} is not {PAYLOAD_TYPE}",
                         "bundle_unsupported")
    payload = _b64(_field(envelope, "payload", str, "dsseEnvelope.payload"),
                   "dsseEnvelope.payload")
    signatures = _field(envelope, "signatures", list, "dsseEnvelope.signatures")
    if len(signatures) != 1:
        raise _malformed("dsseEnvelope.signatures",
                         f"expected exactly 1 DSSE signature, found {len(signatures)}")
    sig = _b64(_field(signatures[0], "sig", str, "dsseEnvelope.signatures[0].sig"),
               "dsseEnvelope.signatures[0].sig")
    return Envelope(payload_type, payload, sig, hint or None)


def check_signature(envelope: Envelope, key: ec.EllipticCurvePublicKey, source: str) -> None:
    """Authenticate the envelope with ``key``. A present hint must equal ``key_hint(key)``
    (``key_mismatch``); a missing hint still requires the ECDSA check (``signature_invalid``)."""
    if envelope.hint is not None and envelope.hint != key_hint(key):
        raise SigningError(
            f"signature '{source}' was made for a different public key (key hint "
            f"{envelope.hint[:16]}… does not match {key_hint(key)[:16]}…)",
            code="key_mismatch", where=source,
            fix="verify with the publisher's public key, or obtain a signature made with it",
        )
    try:
        key.verify(envelope.signature, pae(envelope.payload_type, envelope.payload),
                   ec.ECDSA(signature_hash(key)))
    except InvalidSignature:
        raise SigningError(
            f"signature '{source}' does not verify with the given public key (the bundle "
            "was altered, or signed with another key)",
            code="signature_invalid", where=source,
            fix="obtain an intact signature from the publisher and the matching public key",
        ) from None


def _hashing(serialization: dict[str, Any]) -> list[str]:
    method = _field(serialization, "method", str, "predicate.serialization.method")
    hash_type = _field(serialization, "hash_type", str, "predicate.serialization.hash_type")
    if method != "files" or hash_type != "sha256":
        raise _malformed(
            "predicate.serialization",
            f"serialization {method!r}/{hash_type!r} is not supported (only files/sha256)",
            "unsupported_hashing")
    if serialization.get("allow_symlinks", False) is not False:
        raise SigningError(
            "the signed policy allows symlinks (allow_symlinks != false); refused whatever "
            "the operator configuration says (sigstore/model-transparency PR#667)",
            code="symlink_not_allowed", where="predicate.serialization.allow_symlinks",
            fix="re-sign the model without symlinks and with allow_symlinks false",
        )
    ignore = serialization.get("ignore_paths", [])
    if not isinstance(ignore, list) or not all(isinstance(item, str) for item in ignore):
        raise _malformed("predicate.serialization.ignore_paths", "ignore_paths is not a list "
                         "of strings")
    return list(ignore)


def parse_statement(payload: bytes) -> Manifest:
    """Decode an authenticated payload into a ``Manifest``.

    Raises ``SigningError``: ``bundle_malformed``, ``bundle_unsupported`` (other ``_type`` or
    ``predicateType``), ``unsupported_hashing``, ``symlink_not_allowed`` (signed
    ``allow_symlinks: true``), ``manifest_path_escape``, ``empty_model`` (no resources),
    ``manifest_inconsistent`` (subject digest does not cover the resources)."""
    try:
        doc = loads_strict(payload)
    except JSONProblem as exc:
        raise _malformed("dsseEnvelope.payload", f"signed payload is not valid JSON: {exc}",
                         ) from None
    kind = _field(doc, "_type", str, "_type")
    if kind != STATEMENT_TYPE:
        raise _malformed("_type", f"statement type {kind!r} is not {STATEMENT_TYPE}",
                         "bundle_unsupported")
    predicate_type = _field(doc, "predicateType", str, "predicateType")
    if predicate_type != PREDICATE_TYPE:
        raise _malformed("predicateType", f"predicate type {predicate_type!r} is not "
                         f"{PREDICATE_TYPE}", "bundle_unsupported")
    subjects = _field(doc, "subject", list, "subject")
    if len(subjects) != 1:
        raise _malformed("subject", f"expected exactly 1 subject, found {len(subjects)}")
    name = _field(subjects[0], "name", str, "subject[0].name")
    digests = _field(subjects[0], "digest", dict, "subject[0].digest")
    expected_root = _field(digests, "sha256", str, "subject[0].digest.sha256")
    predicate = _field(doc, "predicate", dict, "predicate")
    ignore = _hashing(_field(predicate, "serialization", dict, "predicate.serialization"))
    resources = _field(predicate, "resources", list, "predicate.resources")
    if not resources:
        raise SigningError(
            "the signed manifest lists no files", code="empty_model",
            where="predicate.resources", fix="sign a model folder that holds the model files",
        )
    files: list[tuple[str, str]] = []
    seen: set[str] = set()
    for index, item in enumerate(resources):
        where = f"predicate.resources[{index}]"
        path = check_name(_field(item, "name", str, where + ".name"))
        algorithm = _field(item, "algorithm", str, where + ".algorithm")
        if algorithm != "sha256":
            raise _malformed(where, f"resource {path!r} uses {algorithm!r}, not sha256",
                             "unsupported_hashing")
        digest = _field(item, "digest", str, where + ".digest")
        if not _HEX64.fullmatch(digest):
            raise _malformed(where, f"resource {path!r} digest is not 64 lowercase hex digits")
        if path in seen:
            raise _malformed(where, f"resource {path!r} is listed twice")
        seen.add(path)
        files.append((path, digest))
    actual_root = root_digest(digest for _, digest in files)
    if actual_root != expected_root:
        raise SigningError(
            f"manifest is inconsistent: subject digest {expected_root} but the resources "
            f"hash to {actual_root}", code="manifest_inconsistent",
            where="subject[0].digest.sha256", fix=_RESIGN,
        )
    return Manifest(name, files, ignore)
