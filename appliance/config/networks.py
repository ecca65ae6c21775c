"""Source-address allow-lists: CIDR lists in the policy and the keys file.

Three places take a list of networks (IPv4 or IPv6 CIDR, a bare address meaning one host):

* ``[gateway] allowed_sources``: every request but the public health probes must come from
  one of them (:mod:`appliance.config.gateway`);
* a named key's ``limits.allowed_sources`` (the keys file, ``appliance keys add
  --sources``) and an OIDC group's ``[auth.groups.<name>] allowed_sources``
  (:class:`appliance.config.keys.KeyLimits`): that key or group is served only from them;
* ``[gateway] trusted_proxies``: the peers whose ``X-Forwarded-For`` (or ``Forwarded``) header
  is believed (:mod:`appliance.gateway.auth.source_address`).

Each entry is parsed with :func:`ipaddress.ip_network` in strict mode: ``10.0.0.1/8`` (host
bits set) is refused with the network it probably meant, so a typo cannot widen or narrow a
list silently. Errors are ``ValueError`` naming the entry and the fix (pydantic turns them
into ``policy_invalid`` / ``keys_invalid`` with the field's path).
"""

from __future__ import annotations

import ipaddress

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_NETWORKS = 1024


def parse_network(entry: object) -> Network:
    """The network for one CIDR string (``"10.0.0.0/8"``, ``"2001:db8::/32"``,
    ``"127.0.0.1"``). Raises ``ValueError`` with the fix for anything else."""
    if not isinstance(entry, str) or not entry or len(entry) > 64:
        raise ValueError(f"{entry!r} is not a CIDR string such as '10.0.0.0/8' or "
                         "'2001:db8::/32'")
    try:
        return ipaddress.ip_network(entry.strip(), strict=True)
    except ValueError as exc:
        try:
            loose = ipaddress.ip_network(entry.strip(), strict=False)
        except ValueError:
            raise ValueError(f"{entry!r} is not an IPv4 or IPv6 network ({exc}); write "
                             "e.g. '10.0.0.0/8', '192.168.1.7' or '2001:db8::/32'") from None
        raise ValueError(f"{entry!r} has host bits set; did you mean '{loose}'?") from None


def check_networks(value: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """Validate a CIDR list (``None`` passes: no list). Raises ``ValueError`` (an empty list
    would refuse everyone: say so, and at most :data:`MAX_NETWORKS` entries)."""
    if value is None:
        return None
    if not value:
        raise ValueError("an empty list would refuse every address; leave the key out to "
                         "allow all, or list networks such as '10.0.0.0/8'")
    if len(value) > MAX_NETWORKS:
        raise ValueError(f"at most {MAX_NETWORKS} networks")
    for entry in value:
        parse_network(entry)
    return value


def networks(value: tuple[str, ...] | None) -> tuple[Network, ...] | None:
    """The parsed networks of a (validated) list, or ``None``."""
    return None if value is None else tuple(parse_network(v) for v in value)


def contains(nets: tuple[Network, ...], address: Address | None) -> bool:
    """True when ``address`` is in one of ``nets`` (an IPv4-mapped IPv6 address counts as
    its IPv4 address); ``None`` (unknown source) is in none."""
    if address is None:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in net for net in nets)
