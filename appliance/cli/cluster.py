"""``appliance cluster-firewall up|down|show``: the ``[cluster]`` nftables table
(:mod:`appliance.engine.cluster.firewall`; root, the systemd cluster units run it as
``ExecStartPre=+`` / ``ExecStopPost=+``; docs/cluster.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def _cmd_cluster_firewall(args: argparse.Namespace) -> int:
    from appliance.config.policy import load_policy
    from appliance.engine.cluster import firewall, node_role
    from appliance.errors import PolicyError

    policy = load_policy(args.policy)
    if policy.cluster is None:
        raise PolicyError("the policy has no [cluster] table", where=str(args.policy),
                          fix="add [cluster] (docs/cluster.md)")
    if args.action == "down":
        firewall.remove()
        return 0
    rank = args.node_rank if args.action == "show" and args.node_rank is not None else \
        node_role(policy.cluster, args.node_rank).node_rank
    ports = tuple(policy.cluster.open_ports)
    if rank == 0:
        ports += (args.port or policy.gateway.port,)
    if args.action == "show":
        print(firewall.ruleset(policy.cluster.nodes, ports), end="")
        return 0
    firewall.install(policy.cluster.nodes, ports)
    print(f"cluster firewall up (node rank {rank}): TCP only from "
          f"{', '.join(policy.cluster.nodes)} or to {sorted(set(ports))}")
    return 0


def register(sub: Any) -> None:
    """Add ``cluster-firewall`` to the ``appliance`` subparsers."""
    p = sub.add_parser("cluster-firewall",
                       help="install/remove the [cluster] nftables table (root; the systemd "
                            "cluster units run it as ExecStartPre=+ / ExecStopPost=+)")
    p.add_argument("action", choices=("up", "down", "show"))
    p.add_argument("--policy", type=Path, required=True, help="policy TOML with [cluster]")
    p.add_argument("--node-rank", type=int, default=None, help="as for serve")
    p.add_argument("--port", type=int, default=None,
                   help="gateway port on the head (default: policy)")
    p.set_defaults(func=_cmd_cluster_firewall)
