"""One model across nodes on vLLM's own multiprocessing backend (no Ray), locked down.

Public surface (``docs/cluster.md``):

- :func:`node_role`: this host's rank and cluster interface from ``[cluster] nodes``;
- :func:`read_secret`, :class:`ClusterError`;
- :func:`join`, :func:`firewall_up`, :func:`firewall_down`: ``serve``'s cluster setup (role
  and secret, the table up after the checks and down at teardown; :mod:`._setup`);
- :class:`ClusterSupervisor`: the authenticated same-model handshake before every engine
  start, the link watched as part of the engine's health;
- :mod:`firewall <appliance.engine.cluster._firewall>`: the nftables table that refuses TCP from
  anything but the peers (``install``, ``remove``, ``ruleset``).

Policy: :mod:`appliance.config.cluster`. May import what :mod:`appliance.engine` may
(:mod:`appliance.config`, :mod:`appliance.errors`) and the engine's own modules; never the
gateway, the CLI or the spine (``appliance serve`` and ``appliance cluster-firewall`` call it).
"""

from appliance.engine.cluster import _firewall as firewall
from appliance.engine.cluster._link import ClusterError, Link, read_secret
from appliance.engine.cluster._node import local_addresses, node_role
from appliance.engine.cluster._setup import firewall_down, firewall_up, join
from appliance.engine.cluster._supervisor import ClusterSupervisor

__all__ = ["ClusterError", "ClusterSupervisor", "Link", "firewall", "firewall_down",
           "firewall_up", "join", "local_addresses", "node_role", "read_secret"]
