"""Who is calling: a bearer API key, an OIDC token or a mapped client certificate -> a key
entry, or 401.

Every route but the public probes needs ``Authorization: Bearer <key>`` (exactly one such
header); the key's SHA-256 is compared with every stored digest using
``hmac.compare_digest`` with no early exit (:meth:`.keystore.KeyStore.authenticate`). A
verified client certificate that the TLS policy maps to a key id (``scope[TLS_KEY_ID]``,
set by the listener, :mod:`appliance.gateway.auth.tls`) stands in for the key, with that key
id's limits. With ``[auth.oidc]``, a bearer value that is no static key but has the shape
of a JWT is checked as an identity provider's token (:mod:`.oidc`): its refusals carry their
own codes (``token_expired``, ``token_wrong_audience`` ...). Anything else is 401
``unauthorized`` with ``WWW-Authenticate: Bearer``.
"""

from __future__ import annotations

from starlette.types import Scope

from ..errors import GatewayError
from .keystore import MAX_API_KEY_CHARS, KeyEntry, KeyStore
from .oidc import OidcVerifier, looks_like_jwt
from .tls import TLS_KEY_ID

CHALLENGE = ((b"www-authenticate", b'Bearer realm="appliance"'),)


def bearer_entry(keys: KeyStore, header: bytes) -> KeyEntry | None:
    """The key entry for a valid, unexpired ``Bearer <key>`` header value, else ``None``
    (wrong scheme, empty or over-long token, unknown or expired key)."""
    if header[:7].lower() != b"bearer ":
        return None
    token = header[7:].strip()
    if not token or len(token) > MAX_API_KEY_CHARS:
        return None
    return keys.authenticate(token)


def unauthorized() -> GatewayError:
    """401 ``unauthorized`` with the ``Bearer`` challenge."""
    return GatewayError.of("unauthorized", "a valid 'Authorization: Bearer <API key>' "
                           "header is required", headers=CHALLENGE)


def authenticate(keys: KeyStore, scope: Scope, authorization: bytes | None,
                 count: int, oidc: OidcVerifier | None = None) -> KeyEntry | GatewayError:
    """The caller's key entry, or the 401 (403) to send.

    ``authorization``: the (last) ``Authorization`` header value; ``count``: how many such
    headers the request has (anything but one is refused). A certificate key id in
    ``scope`` takes precedence over the header; a static key over a token.
    """
    cert_id: str | None = scope.get(TLS_KEY_ID)
    entry: KeyEntry | None
    if cert_id is not None:
        entry = keys.for_certificate(cert_id)
    elif count == 1 and authorization is not None:
        entry = bearer_entry(keys, authorization)
        if entry is None and oidc is not None and authorization[:7].lower() == b"bearer ":
            token = authorization[7:].strip()
            if looks_like_jwt(token):
                return oidc.authenticate(token)
    else:
        entry = None
    return unauthorized() if entry is None else entry
