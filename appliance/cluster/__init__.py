"""One model across nodes on vLLM's own multiprocessing backend (no Ray), locked down.

Public surface (``docs/cluster.md``):

- :func:`node_role`: this host's rank and cluster interface from ``[cluster] nodes``;
- :func:`read_secret`, :class:`ClusterError`;
- :class:`ClusterSupervisor`: the authenticated same-model handshake before every engine
  start, the link watched as part of the engine's health;
- :mod:`firewall <appliance.cluster._firewall>`: the nftables table that refuses TCP from
  anything but the peers (``install``, ``remove``, ``ruleset``).
"""

from appliance.cluster import _firewall as firewall
from appliance.cluster._link import ClusterError, Link, read_secret
from appliance.cluster._node import local_addresses, node_role
from appliance.cluster._supervisor import ClusterSupervisor

__all__ = ["ClusterError", "ClusterSupervisor", "Link", "firewall", "local_addresses",
           "node_role", "read_secret"]
