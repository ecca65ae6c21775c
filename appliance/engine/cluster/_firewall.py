"""The cluster firewall: one nftables table that refuses TCP from anything but the peers.

Why nftables and not the unit's ``IPAddressAllow=``/``IPAddressDeny=``: those filter every
socket of the unit by address only (the gateway's clients would have to be listed, and a
port cannot be singled out), they need cgroup-BPF on a full cgroup v2 (not testable on
hybrid hosts), and the engine's ports are ephemeral, so only a host rule by peer address
covers them. The table (``inet appliance_cluster``, input hook, priority filter - 10)::

    iif "lo" accept
    ct state established,related accept
    ip saddr { <every node's cluster address> } accept
    tcp dport { <gateway port on the head>, <open_ports> } accept
    meta l4proto tcp reject with tcp reset

i.e. on every interface, a new TCP connection from a non-peer is refused unless it is for
the gateway (head) or an operator-listed port (``[cluster] open_ports``, e.g. 22); UDP and
other protocols are untouched. Installed with ``nft -f -`` (atomic: the table is replaced
as a whole) and deleted on exit. Needs ``CAP_NET_ADMIN`` and the ``nft`` tool (Debian
package ``nftables``).
"""

from __future__ import annotations

import shutil
import subprocess

from appliance.engine.cluster._link import ClusterError

TABLE = "appliance_cluster"
CAP_NET_ADMIN = 12


def ruleset(peers: tuple[str, ...], open_ports: tuple[int, ...]) -> str:
    """The nftables script that (re)creates the table (module docstring)."""
    ports = sorted(set(open_ports))
    lines = [
        f"table inet {TABLE}",  # make sure it exists, so the delete below cannot fail
        f"delete table inet {TABLE}",
        f"table inet {TABLE} {{",
        "  chain input {",
        "    type filter hook input priority filter - 10; policy accept;",
        '    iif "lo" accept',
        "    ct state established,related accept",
        f"    ip saddr {{ {', '.join(peers)} }} accept",
    ]
    if ports:
        lines.append(f"    tcp dport {{ {', '.join(str(p) for p in ports)} }} accept")
    lines += ["    meta l4proto tcp reject with tcp reset", "  }", "}", ""]
    return "\n".join(lines)


def has_net_admin(status_path: str = "/proc/self/status") -> bool:
    """Whether this process's effective capabilities include CAP_NET_ADMIN."""
    try:
        with open(status_path, encoding="ascii") as handle:
            for line in handle:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> CAP_NET_ADMIN & 1)
    except (OSError, ValueError):
        pass
    return False


def _nft(script: str | None, *args: str) -> None:
    nft = shutil.which("nft") or shutil.which("nft", path="/usr/sbin:/sbin")
    if nft is None:
        raise ClusterError("the nft tool is not installed", code="cluster_firewall_failed",
                           where="cluster.firewall",
                           fix="apt-get install nftables, or set firewall = \"none\" and "
                               "firewall the cluster ports yourself (docs/cluster.md)")
    proc = subprocess.run([nft, *args], input=script, capture_output=True, text=True,  # noqa: S603
                          timeout=30, check=False)
    if proc.returncode:
        raise ClusterError(f"nft {' '.join(args)} failed: {proc.stderr.strip()[:500]}",
                           code="cluster_firewall_failed", where="cluster.firewall",
                           fix="run as root (CAP_NET_ADMIN) or install the rules with "
                               "`appliance cluster-firewall up` (docs/cluster.md)")


def install(peers: tuple[str, ...], open_ports: tuple[int, ...]) -> None:
    """Install (or replace) the table. Raises ``ClusterError`` (``cluster_firewall_failed``)."""
    if not has_net_admin():
        raise ClusterError("installing the cluster firewall needs CAP_NET_ADMIN",
                           code="cluster_firewall_failed", where="cluster.firewall",
                           fix="run `appliance cluster-firewall up` as root before serve "
                               "(the systemd units do, ExecStartPre=+), or run serve as root")
    _nft(ruleset(peers, open_ports), "-f", "-")


def remove() -> None:
    """Delete the table (no error when it is already gone)."""
    _nft(f"table inet {TABLE}\ndelete table inet {TABLE}\n", "-f", "-")


def installed_ruleset() -> str | None:
    """The table as ``nft list`` prints it, or ``None`` when absent or not readable."""
    nft = shutil.which("nft") or shutil.which("nft", path="/usr/sbin:/sbin")
    if nft is None:
        return None
    proc = subprocess.run([nft, "list", "table", "inet", TABLE], capture_output=True,  # noqa: S603
                          text=True, timeout=30, check=False)
    return proc.stdout if proc.returncode == 0 else None
