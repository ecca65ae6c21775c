"""``[cluster]``: one model across nodes (vLLM's mp backend, no Ray; ``docs/cluster.md``).

Shape (see ``policies/default.toml``)::

    [cluster]
    nodes = ["10.0.0.1", "10.0.0.2"]   # cluster addresses (IPv4), rank order, head first
    port = 29511                   # rendezvous: the engine's store; port + 1: the handshake
    secret_file = "${CREDENTIALS_DIRECTORY}/cluster-secret"   # >= 32 bytes, same on all nodes
    firewall = "nftables"          # or "none" (the operator firewalls; see docs/cluster.md)
    open_ports = [22]              # TCP ports left open to everyone besides the gateway's
    handshake_timeout_s = 600      # seconds the nodes wait for each other before each start
    heartbeat_timeout_s = 10       # seconds without a heartbeat = the link is lost

Used by :mod:`appliance.engine.cluster` (roles, handshake, firewall) and
:mod:`appliance.engine.parallel` (layouts refused with a cluster).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from appliance.config.base import CREDENTIALS_VAR, StrictModel, expand_credential


class ClusterPolicy(StrictModel):
    """One model across ``len(nodes)`` hosts; see the module docstring."""

    nodes: tuple[str, ...] = Field(min_length=2, max_length=64)
    port: int = Field(default=29511, ge=1024, le=65534)  # port + 1: the handshake
    secret_file: Path
    firewall: Literal["nftables", "none"] = "nftables"
    open_ports: tuple[int, ...] = Field(default=(), max_length=32)
    handshake_timeout_s: float = Field(default=600.0, gt=0, le=86_400)
    heartbeat_timeout_s: float = Field(default=10.0, ge=1, le=600)

    @field_validator("nodes")
    @classmethod
    def _addresses(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        seen = set()
        for text in value:
            try:
                address = ipaddress.IPv4Address(text)
            except ValueError:
                raise ValueError(f"{text!r} is not an IPv4 address") from None
            if address.is_unspecified or address.is_multicast or address.is_loopback:
                raise ValueError(f"{text!r} cannot be a cluster address (loopback, "
                                 "unspecified or multicast)")
            if address in seen:
                raise ValueError(f"{text!r} is listed twice")
            seen.add(address)
        return value

    @field_validator("open_ports")
    @classmethod
    def _ports(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        for port in value:
            if not 1 <= port <= 65535:
                raise ValueError(f"port {port} is out of range 1-65535")
        return value

    def resolved(self, base: Path) -> ClusterPolicy:
        text = str(self.secret_file)
        if text.startswith(CREDENTIALS_VAR) or self.secret_file.is_absolute():
            return self
        return self.model_copy(update={"secret_file": (base / self.secret_file).resolve()})

    def secret_path(self) -> Path:
        """``secret_file`` with a leading ``${CREDENTIALS_DIRECTORY}`` expanded. Raises
        ``ValueError`` if the variable is unset."""
        return expand_credential(self.secret_file, "cluster.secret_file")
