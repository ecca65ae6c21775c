"""Where a request comes from, and the source-address allow-lists (403 ``source_not_allowed``).

The source address is the TCP peer (``scope["client"]``), unless that peer is one of
``[gateway] trusted_proxies``: then the proxy's forwarded-for header (``forwarded_header``:
``X-Forwarded-For``, or RFC 7239 ``Forwarded``'s ``for=``; only the one header the proxies
are declared to set, so a client-supplied header of the other kind is never read) is walked
from the right, skipping trusted proxies, and the first untrusted hop is the source (the
"rightmost untrusted hop": everything left of it was written by the client and proves
nothing). A header from a peer that is not a trusted proxy is ignored. A hop that is not an
address (``unknown``, an obfuscated ``_name``, garbage) makes the source unknown, and an
unknown source is in no allow-list (fail closed); with no peer address (a Unix socket
listener) the same holds.

Allow-lists (:mod:`appliance.config.networks`): ``[gateway] allowed_sources`` for every route
but the public health probes (checked before the key, so outsiders learn nothing of the
keys), then the caller's ``allowed_sources`` (a named key's limits, an OIDC group's, or
``admission.default_limits`` for plain keys). The uvicorn listener runs with
``proxy_headers=False`` (:mod:`..http.server`): this module is the only reader of those headers.

The forwarded-header parsing is written here rather than taken from a proxy-headers
middleware because it decides an access control: it must trust exactly the configured
proxies, walk from the right and fail closed on a hop it cannot read.
"""

from __future__ import annotations

import functools
import ipaddress
from typing import Any

from appliance.config.networks import Address, Network, contains, networks

from ..errors import GatewayError

MAX_HOPS = 64
SOURCE_KEY = "appliance.gateway.source"


@functools.lru_cache(maxsize=1024)
def parsed(value: tuple[str, ...]) -> tuple[Network, ...]:
    """The networks of a validated CIDR list (cached: the lists are few and immutable)."""
    return networks(value) or ()


def _address(text: str) -> Address | None:
    """An address from one hop: ``1.2.3.4``, ``1.2.3.4:port``, ``2001:db8::1``,
    ``[2001:db8::1]:port`` (quotes stripped); ``None`` for anything else."""
    text = text.strip().strip('"').strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        text = text[1:end]
    elif text.count(":") == 1:  # IPv4 with a port
        text = text.split(":", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _hops(scope: Any, header: bytes) -> list[str]:
    """The hops of every ``header`` line in order (a proxy may append a second line)."""
    hops: list[str] = []
    for name, value in scope["headers"]:
        if name != header:
            continue
        for element in value.decode("latin-1").split(","):
            if header == b"forwarded":
                fors = [p.split("=", 1)[1] for p in element.split(";")
                        if p.strip().lower().startswith("for=")]
                hops.append(fors[0] if fors else "")
            else:
                hops.append(element)
    return hops[-MAX_HOPS:] if len(hops) > MAX_HOPS else hops


def source_of(scope: Any, trusted: tuple[Network, ...] | None,
              header: str = "x-forwarded-for") -> Address | None:
    """The request's source address (module docstring), ``None`` when unknown."""
    client = scope.get("client")
    peer = _address(client[0]) if client else None
    if not trusted or peer is None or not contains(trusted, peer):
        return peer
    for hop in reversed(_hops(scope, header.encode())):
        address = _address(hop)
        if address is None:
            return None
        if not contains(trusted, address):
            return address
        peer = address
    return peer


def refusal(source: Address | None, who: str) -> GatewayError:
    """403 ``source_not_allowed`` for ``source`` (``who``: "this gateway" or the key)."""
    shown = str(source) if source is not None else "an unknown address"
    return GatewayError.of("source_not_allowed", f"requests from {shown} are not allowed "
                           f"for {who} (source-address allow-list)")


class SourcePolicy:
    """The gateway's allow-list and trusted proxies, parsed once (``settings``: a
    :class:`~..settings.GatewaySettings`)."""

    def __init__(self, settings: Any) -> None:
        self.allowed = parsed(settings.allowed_sources) \
            if settings.allowed_sources is not None else None
        self.trusted = parsed(settings.trusted_proxies) \
            if settings.trusted_proxies is not None else None
        self.header = settings.forwarded_header

    def source(self, scope: Any) -> Address | None:
        """The request's source address (kept in the scope: computed once)."""
        if SOURCE_KEY not in scope:
            scope[SOURCE_KEY] = source_of(scope, self.trusted, self.header)
        found: Address | None = scope[SOURCE_KEY]
        return found

    def gateway_refusal(self, scope: Any) -> GatewayError | None:
        """403 when ``[gateway] allowed_sources`` leaves the source out, else ``None``."""
        if self.allowed is None:
            return None
        source = self.source(scope)
        return None if contains(self.allowed, source) else refusal(source, "this gateway")

    def key_refusal(self, scope: Any, key_id: str,
                    allowed: tuple[str, ...] | None) -> GatewayError | None:
        """403 when the caller's ``allowed_sources`` leaves the source out, else ``None``."""
        if allowed is None:
            return None
        source = self.source(scope)
        return None if contains(parsed(allowed), source) else \
            refusal(source, f"key {key_id!r}")

    def shown(self, scope: Any) -> str | None:
        """The source address for the audit record (the peer's host when nothing needed
        parsing)."""
        if SOURCE_KEY in scope or self.trusted is not None:
            source = self.source(scope)
            return str(source) if source is not None else None
        client = scope.get("client")
        return str(client[0]) if client else None
