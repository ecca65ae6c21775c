"""This node's cluster setup for ``serve``: its role and the shared secret before the checks,
the nftables table after them, the table removed again at teardown.

Order in ``serve`` (unchanged): :func:`join` (rank, interface, secret), then the preflight
sequence, then :func:`firewall_up`, then the engines; :func:`firewall_down` when stopping.
Progress lines go to ``report`` (``serve``'s :func:`appliance.engine.sdnotify.say`).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from appliance.config.cluster import ClusterPolicy
from appliance.engine.cluster import _firewall as firewall
from appliance.engine.cluster._link import ClusterError, read_secret
from appliance.engine.cluster._node import node_role
from appliance.engine.launcher import ClusterRole
from appliance.errors import PolicyError

__all__ = ["firewall_down", "firewall_up", "join"]


def join(cluster: ClusterPolicy, node_rank: int | None,
         report: Callable[[str], None]) -> tuple[ClusterRole, bytes]:
    """This node's role (``node_rank``, default from the addresses it holds) and the
    cluster secret's bytes. Raises ``ClusterError`` (``cluster_node_rank``,
    ``cluster_secret_invalid``) or ``PolicyError`` (``cluster.secret_file`` names an
    unset credentials folder)."""
    role = node_role(cluster, node_rank)
    try:
        secret = read_secret(cluster.secret_path())
    except ValueError as exc:
        raise PolicyError(str(exc), where="cluster.secret_file",
                          fix="start under systemd with LoadCredential= or use a path"
                          ) from None
    report(f"cluster: node rank {role.node_rank} of {len(cluster.nodes)} on "
           f"{role.address} ({role.interface})")
    return role, secret


def firewall_up(cluster: ClusterPolicy, role: ClusterRole, gateway_port: int,
                report: Callable[[str], None]) -> bool:
    """Install the cluster's nftables table (:mod:`._firewall`) open to the peers and to
    ``gateway_port`` (not on a worker, rank > 0, which has no gateway) unless the policy says
    ``firewall = "none"`` or the unit installed it (``APPLIANCE_CLUSTER_FIREWALL=unit``, set
    by the systemd cluster units). ``True`` when this call installed it (remove it with
    :func:`firewall_down`). Raises ``ClusterError`` (``cluster_firewall_failed``; also for
    gateway port 0, which the table cannot name)."""
    if cluster.firewall == "none":
        report("cluster: firewall = none: the operator must refuse the cluster ports to "
               "anything but the peers (docs/cluster.md)")
        return False
    if os.environ.get("APPLIANCE_CLUSTER_FIREWALL") == "unit":
        report("cluster: firewall installed by the unit (ExecStartPre=+)")
        return False
    ports = tuple(cluster.open_ports)
    if role.node_rank == 0:
        if gateway_port == 0:
            raise ClusterError("the cluster firewall needs a fixed gateway port",
                               code="cluster_firewall_failed", where="gateway.port",
                               fix="set gateway.port (or --port) to a port number")
        ports += (gateway_port,)
    firewall.install(cluster.nodes, ports)
    report(f"cluster: firewall up: TCP only from {', '.join(cluster.nodes)}"
           + (f" or to port(s) {', '.join(map(str, sorted(set(ports))))}" if ports else ""))
    return True


def firewall_down(report: Callable[[str], None]) -> bool:
    """Remove the table :func:`firewall_up` installed; ``False`` (and a report line, never
    an exception: teardown goes on) when nft refuses."""
    try:
        firewall.remove()
    except ClusterError as exc:
        report(f"cluster: could not remove the firewall table: {exc}")
        return False
    return True
