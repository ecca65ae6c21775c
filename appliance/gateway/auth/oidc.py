"""OIDC / JWT bearer tokens: an identity provider's signed token -> a key entry with the
limits of the token's group (``[auth.oidc]``, ``[auth.groups]``: :mod:`appliance.config.auth`).

Signature and claim checks are PyJWT's (``PyJWT[crypto]``, pinned in ``pyproject.toml``:
maintained, small, no dependency beyond ``cryptography`` which the appliance already has, and
``jwt.decode`` takes an explicit algorithm list so the token's header never picks it). What
this module decides before PyJWT sees the token, so each refusal has its own stable code:

=========================  ======================================================  ======
code                       when                                                    status
=========================  ======================================================  ======
``token_malformed``        not three base64url parts / header not a JSON object      401
``token_alg_none``         ``alg`` is ``none`` (any case): an unsigned token         401
``token_alg_not_allowed``  ``alg`` not in ``algorithms`` (e.g. ``HS256``: the          401
                           public key used as an HMAC secret), or not the key's type
``token_unknown_kid``      ``kid`` names no key of the JWKS (or no ``kid`` and the   401
                           JWKS has several keys)
``token_bad_signature``    the signature does not verify with that key               401
``token_expired``          ``exp`` + ``clock_skew_s`` is past                        401
``token_not_yet_valid``    ``nbf`` / ``iat`` - ``clock_skew_s`` is in the future     401
``token_wrong_issuer``     ``iss`` is not ``issuer``                                 401
``token_wrong_audience``   ``audience`` is not in ``aud``                            401
``token_missing_claim``    no ``exp``, ``iss``, ``aud`` or subject; subject or groups  401
                           of the wrong shape
``token_group_not_allowed`` valid token, none of its groups is in ``[auth.groups]``  403
                           and no ``default_limits``
=========================  ======================================================  ======

The resulting :class:`~.keystore.KeyEntry` has id ``oidc:<group>:<subject>``
(``limits_scope = "subject"``: each user has the group's limits) or ``oidc:<group>``
(``"group"``: the group shares them); ``<group>`` is ``-`` for ``default_limits``. It
expires with the token. JWKS: read from ``jwks_file`` at start and on SIGHUP
(:meth:`OidcVerifier.reload`), or fetched from ``jwks_url`` over HTTPS trusting only
``jwks_ca``, at start (fails the start) and then every ``jwks_refresh_s`` and after an
unknown ``kid`` (at most every 30 s) in a background thread; a failed fetch keeps the
previous keys. Symmetric (``oct``) keys in a JWKS are refused at load.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import re
import ssl
import threading
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jwt

from appliance.config.auth import AuthPolicy, OidcPolicy
from appliance.errors import ApplianceError

from ..errors import GatewayCode, GatewayError
from .keystore import KeyEntry

LOG = logging.getLogger("appliance.gateway")
MAX_TOKEN_CHARS = 16 * 1024
MAX_JWKS_BYTES = 1 << 20
UNKNOWN_KID_REFETCH_S = 30.0
VERIFIED_CACHE = 4096
JWT_SHAPE = re.compile(rb"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$")
SUBJECT_SHAPE = re.compile(r"^[\x21-\x7e]{1,256}$")
KTY_ALGS = {"RSA": ("RS", "PS"), "EC": ("ES",), "OKP": ("EdDSA",)}
EC_CURVES = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}


def _refusal(code: str, message: str) -> GatewayError:
    """The refusal for ``code`` (its status from :class:`..errors.GatewayCode`) with the
    RFC 6750 challenge: ``invalid_token`` for a 401, ``insufficient_scope`` for the 403."""
    status = GatewayCode.parse(code).status
    challenge = (b'Bearer realm="appliance", error="invalid_token"' if status == 401
                 else b'Bearer realm="appliance", error="insufficient_scope"')
    return GatewayError.of(code, message, headers=((b"www-authenticate", challenge),))


def looks_like_jwt(token: bytes) -> bool:
    """True for ``header.payload.signature`` in base64url (what :meth:`authenticate` takes)."""
    return len(token) <= MAX_TOKEN_CHARS and JWT_SHAPE.match(token) is not None


def _jwks_error(where: str, message: str) -> ApplianceError:
    return ApplianceError(message, code="jwks_invalid", where=where,
                          fix="export the identity provider's JWKS (its jwks_uri document: "
                          '{"keys": [...]}, public keys only)')


def parse_jwks(raw: bytes, where: str) -> dict[str | None, Mapping[str, Any]]:
    """``kid`` -> JWK for a JWKS document; ``None`` is the key of a JWKS with one key and no
    ``kid``. Raises :class:`ApplianceError` ``jwks_invalid`` (not JSON, no ``keys`` list, a
    symmetric or private key, a repeated ``kid``, a key PyJWT cannot load)."""
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise _jwks_error(where, f"JWKS is not JSON: {exc}") from None
    keys = doc.get("keys") if isinstance(doc, dict) else None
    if not isinstance(keys, list) or not keys:
        raise _jwks_error(where, 'JWKS has no "keys" list')
    found: dict[str | None, Mapping[str, Any]] = {}
    for n, jwk in enumerate(keys):
        if not isinstance(jwk, dict) or jwk.get("kty") not in KTY_ALGS:
            raise _jwks_error(f"{where}: keys[{n}]", "JWKS key is not an RSA, EC or OKP public "
                              "key (symmetric 'oct' keys are refused)")
        if "d" in jwk:
            raise _jwks_error(f"{where}: keys[{n}]", "JWKS holds a private key")
        if jwk.get("use", "sig") != "sig":
            continue
        kid = jwk.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise _jwks_error(f"{where}: keys[{n}]", "kid must be a string")
        if kid in found:
            raise _jwks_error(f"{where}: keys[{n}]", f"kid {kid!r} appears twice")
        try:
            jwt.PyJWK(jwk)
        except jwt.PyJWTError as exc:
            raise _jwks_error(f"{where}: keys[{n}]", f"unusable key: {exc}") from None
        found[kid] = jwk
    if None in found and len(found) > 1:
        raise _jwks_error(where, "a JWKS with several keys needs a kid on each")
    return found


def fetch_jwks(url: str, ca_file: Path, timeout_s: float = 10.0) -> bytes:
    """GET ``url`` trusting only ``ca_file`` (no system CAs), at most 1 MiB. Raises
    :class:`ApplianceError` ``jwks_invalid`` on any failure."""
    try:
        context = ssl.create_default_context(cafile=str(ca_file))
    except (OSError, ssl.SSLError) as exc:
        raise _jwks_error(str(ca_file), f"jwks_ca is not a readable PEM CA: {exc}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    handler = urllib.request.HTTPSHandler(context=context)
    opener = urllib.request.build_opener(handler)
    try:
        with opener.open(url, timeout=timeout_s) as resp:  # noqa: S310 - https only (policy)
            raw: bytes = resp.read(MAX_JWKS_BYTES + 1)
    except (OSError, ValueError) as exc:
        raise _jwks_error(url, f"cannot fetch the JWKS: {exc}") from None
    if len(raw) > MAX_JWKS_BYTES:
        raise _jwks_error(url, "JWKS over 1 MiB")
    return raw


def _b64json(part: bytes) -> Any:
    return json.loads(base64.urlsafe_b64decode(part + b"=" * (-len(part) % 4)))


def _alg_fits(alg: str, jwk: Mapping[str, Any]) -> bool:
    """The token's ``alg`` is one the key's type (and its own ``alg``, if any) allows."""
    if jwk.get("alg") not in (None, alg):
        return False
    kty = str(jwk.get("kty"))
    if not alg.startswith(KTY_ALGS.get(kty, ())):
        return False
    return kty != "EC" or EC_CURVES.get(alg) == jwk.get("crv")


class OidcVerifier:
    """Verifies bearer JWTs against ``policy.oidc`` and maps them to limits (module
    docstring). Raises :class:`ApplianceError` ``jwks_invalid`` at construction when the
    JWKS cannot be loaded."""

    def __init__(self, policy: AuthPolicy) -> None:
        if policy.oidc is None:
            raise ValueError("OidcVerifier needs [auth.oidc]")
        self.oidc: OidcPolicy = policy.oidc
        self.groups = policy.groups
        self._refetch = threading.Event()
        self._stop = threading.Event()
        self._last_fetch = 0.0
        # kid -> JWK, (kid, alg) -> loaded key, and SHA-256 of a verified token -> its
        # entry: replaced together (one attribute) by a reload in the refresh thread while
        # the event loop reads them, so no token verified with a dropped key survives it
        self._jwks: tuple[dict[str | None, Mapping[str, Any]],
                          dict[tuple[str | None, str], Any],
                          dict[bytes, KeyEntry]] = (self._load(), {}, {})
        self._thread: threading.Thread | None = None
        if self.oidc.jwks_url is not None:
            self._thread = threading.Thread(target=self._refresh_loop, daemon=True,
                                            name="appliance-jwks")
            self._thread.start()

    def _load(self) -> dict[str | None, Mapping[str, Any]]:
        oidc = self.oidc
        if oidc.jwks_file is not None:
            try:
                raw = oidc.jwks_file.read_bytes()
            except OSError as exc:
                raise _jwks_error(str(oidc.jwks_file),
                                  f"cannot read jwks_file: {exc.strerror}") from None
            return parse_jwks(raw, str(oidc.jwks_file))
        if oidc.jwks_url is None or oidc.jwks_ca is None:  # excluded by OidcPolicy
            raise ValueError("no JWKS source")
        self._last_fetch = time.monotonic()
        return parse_jwks(fetch_jwks(oidc.jwks_url, oidc.jwks_ca), oidc.jwks_url)

    def reload(self) -> bool:
        """SIGHUP: read ``jwks_file`` again (on failure keep the previous keys, ``False``);
        with ``jwks_url`` ask the refresh thread to fetch it (never blocks the caller)."""
        if self.oidc.jwks_url is not None:
            self._refetch.set()
            return True
        return self._reload_now()

    def _reload_now(self) -> bool:
        try:
            keys = self._load()
        except ApplianceError as exc:
            LOG.error("JWKS reload failed, keeping the previous %d keys: %s",
                      len(self.keys), exc.message)
            return False
        self._jwks = (keys, {}, {})
        LOG.warning("JWKS loaded: %d keys", len(keys))
        return True

    @property
    def keys(self) -> dict[str | None, Mapping[str, Any]]:
        """The current JWKS keys by ``kid``."""
        return self._jwks[0]

    def _refresh_loop(self) -> None:
        while not self._stop.is_set():
            self._refetch.wait(self.oidc.jwks_refresh_s)
            if self._stop.is_set():
                return
            self._refetch.clear()
            self._reload_now()

    def close(self) -> None:
        """Stop the refresh thread (URL source)."""
        self._stop.set()
        self._refetch.set()


    def _unknown_kid(self, kid: object) -> GatewayError:
        if self.oidc.jwks_url is not None and \
                time.monotonic() - self._last_fetch > UNKNOWN_KID_REFETCH_S:
            self._last_fetch = time.monotonic()
            self._refetch.set()  # the IdP may have rotated: fetch in the background
        return _refusal("token_unknown_kid", f"the token's key id {kid!r} is not in the "
                        "identity provider's JWKS")

    def authenticate(self, token: bytes) -> KeyEntry | GatewayError:
        """The entry for a valid token, else the 401/403 refusal (module docstring).

        A token that verified is remembered by its SHA-256 (at most
        :data:`VERIFIED_CACHE` tokens, until ``exp`` + ``clock_skew_s``; forgotten when the
        JWKS is reloaded): a client that reuses its token pays for one signature check, not
        one per request. Refusals are never remembered."""
        if not looks_like_jwt(token):
            return _refusal("token_malformed", "the bearer token is not a JWT")
        keys, loaded, verified = self._jwks
        digest = hashlib.sha256(token).digest()
        hit = verified.get(digest)
        if hit is not None and hit.expires_at is not None and \
                time.time() < hit.expires_at + self.oidc.clock_skew_s:
            return hit
        result = self._check(token, keys, loaded)
        if isinstance(result, KeyEntry):
            if len(verified) >= VERIFIED_CACHE:
                verified.clear()
            verified[digest] = result
        return result

    def _check(self, token: bytes, keys: dict[str | None, Mapping[str, Any]],
               loaded: dict[tuple[str | None, str], Any]) -> KeyEntry | GatewayError:
        try:
            header = _b64json(token.split(b".", 1)[0])
        except (ValueError, binascii.Error):
            header = None
        if not isinstance(header, dict):
            return _refusal("token_malformed", "the JWT header is not a base64url JSON object")
        alg = header.get("alg")
        if not isinstance(alg, str) or alg.lower() == "none":
            return _refusal("token_alg_none", "unsigned tokens (alg 'none') are refused")
        if alg not in self.oidc.algorithms:
            return _refusal("token_alg_not_allowed", f"token algorithm {alg[:16]!r} is not "
                            f"allowed (policy: {', '.join(self.oidc.algorithms)})")
        kid = header.get("kid")
        if not isinstance(kid, str | None) or kid not in keys:
            return self._unknown_kid(kid)
        if not _alg_fits(alg, keys[kid]):
            return _refusal("token_alg_not_allowed", f"token algorithm {alg!r} does not fit "
                            f"key {kid!r} ({keys[kid].get('kty')})")
        key = loaded.get((kid, alg))
        if key is None:
            key = loaded[(kid, alg)] = jwt.PyJWK(dict(keys[kid]), alg).key
        return self._verified(token, key, alg)

    def _verified(self, token: bytes, key: Any, alg: str) -> KeyEntry | GatewayError:
        oidc = self.oidc
        try:
            claims = jwt.decode(
                token, key, algorithms=[alg], audience=oidc.audience,
                issuer=oidc.issuer, leeway=oidc.clock_skew_s,
                options={"require": ["exp", "iss", "aud"], "verify_sub": False})
        except jwt.ExpiredSignatureError:
            return _refusal("token_expired", "the token has expired")
        except jwt.ImmatureSignatureError:
            return _refusal("token_not_yet_valid", "the token is not valid yet (nbf/iat)")
        except jwt.InvalidIssuerError:
            return _refusal("token_wrong_issuer", "the token's issuer is not the configured "
                            "identity provider")
        except jwt.InvalidAudienceError:
            return _refusal("token_wrong_audience", "the token is not meant for this "
                            "appliance (aud)")
        except jwt.MissingRequiredClaimError as exc:
            return _refusal("token_missing_claim", f"the token has no {exc.claim!r} claim")
        except jwt.InvalidSignatureError:
            return _refusal("token_bad_signature", "the token's signature does not verify")
        except jwt.PyJWTError as exc:  # DecodeError, InvalidIssuedAtError ...
            return _refusal("token_malformed", f"the token is invalid: {exc}")
        return self._entry(claims)

    def _entry(self, claims: dict[str, Any]) -> KeyEntry | GatewayError:
        oidc = self.oidc
        subject = claims.get(oidc.subject_claim)
        if not isinstance(subject, str) or not SUBJECT_SHAPE.match(subject):
            return _refusal("token_missing_claim", f"the token has no usable "
                            f"{oidc.subject_claim!r} claim (1-256 printable characters)")
        groups = claims.get(oidc.groups_claim, [])
        if isinstance(groups, str):
            groups = [groups]
        if not isinstance(groups, list):
            return _refusal("token_missing_claim", f"the token's {oidc.groups_claim!r} claim "
                            "is not a list of names")
        held = {g for g in groups if isinstance(g, str)}
        group = next((name for name in self.groups if name in held), None)
        if group is not None:
            limits = self.groups[group]
        elif oidc.default_limits is not None:
            group, limits = "-", oidc.default_limits
        else:
            return _refusal("token_group_not_allowed", f"subject {subject!r} is in no group "
                            "this appliance serves ([auth.groups])")
        key_id = f"oidc:{group}" if oidc.limits_scope == "group" else \
            f"oidc:{group}:{subject}"
        exp = claims.get("exp")
        return KeyEntry(key_id, b"", float(exp) if isinstance(exp, int | float) else None,
                        limits)
