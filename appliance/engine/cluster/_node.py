"""This host's place in the cluster: its rank and the interface holding its address.

Addresses come from ``ip -j -4 addr show`` (iproute2's JSON output), so secondary
addresses count too.
"""

from __future__ import annotations

import json
import shutil
import subprocess

from appliance.config.cluster import ClusterPolicy
from appliance.engine.cluster._link import ClusterError
from appliance.engine.launcher import ClusterRole


def local_addresses() -> dict[str, str]:
    """IPv4 address -> interface name, for every address on this host (network namespace)."""
    ip = shutil.which("ip") or shutil.which("ip", path="/usr/sbin:/sbin")
    if ip is None:
        raise ClusterError("the ip tool (iproute2) is not installed", code="cluster_node_rank",
                           fix="apt-get install iproute2, or pass --node-rank")
    proc = subprocess.run([ip, "-j", "-4", "addr", "show"], capture_output=True, text=True,  # noqa: S603
                          timeout=10, check=False)
    try:
        links = json.loads(proc.stdout or "[]")
    except ValueError:
        links = []
    found: dict[str, str] = {}
    for link in links if isinstance(links, list) else []:
        for info in link.get("addr_info", []) if isinstance(link, dict) else []:
            if isinstance(info, dict) and info.get("family") == "inet":
                found[str(info.get("local"))] = str(link.get("ifname"))
    return found


def node_role(cluster: ClusterPolicy, node_rank: int | None,
              addresses: dict[str, str] | None = None) -> ClusterRole:
    """The :class:`ClusterRole` for ``node_rank`` (default: the position of the one listed
    address this host holds). Raises ``ClusterError`` (``cluster_node_rank``)."""
    local = local_addresses() if addresses is None else addresses
    nodes = cluster.nodes
    if node_rank is None:
        mine = [rank for rank, addr in enumerate(nodes) if addr in local]
        if len(mine) != 1:
            raise ClusterError(
                f"this host holds {len(mine)} of the cluster addresses {list(nodes)}",
                code="cluster_node_rank", where="cluster.nodes",
                fix="pass --node-rank R, or give this host exactly one listed address")
        node_rank = mine[0]
    if not 0 <= node_rank < len(nodes):
        raise ClusterError(f"node rank {node_rank} is outside 0-{len(nodes) - 1}",
                           code="cluster_node_rank", where="--node-rank",
                           fix=f"use a rank below {len(nodes)} (the cluster.nodes index)")
    address = nodes[node_rank]
    if address not in local:
        raise ClusterError(f"node rank {node_rank} is {address}, which this host does not hold",
                           code="cluster_node_rank", where="cluster.nodes",
                           fix="run each rank on the host holding its address, or fix "
                               "--node-rank")
    return ClusterRole(node_rank=node_rank, nodes=nodes, port=cluster.port,
                       interface=local[address])
