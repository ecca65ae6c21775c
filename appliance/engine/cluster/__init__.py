"""One model across nodes on vLLM's own multiprocessing backend (no Ray), locked down.

Public surface (``docs/cluster.md``):

- :func:`node_role`: this host's rank and cluster interface from ``[cluster] nodes``;
- :func:`read_secret`, :class:`ClusterError`;
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
from appliance.engine.cluster._supervisor import ClusterSupervisor

__all__ = ["ClusterError", "ClusterSupervisor", "Link", "firewall", "local_addresses",
           "node_role", "read_secret"]
