"""``serve``'s cluster setup (``appliance.engine.cluster.join`` / ``firewall_up`` /
``firewall_down``): the secret and role, and when the node installs the nftables table."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.config.cluster import ClusterPolicy
from appliance.engine.cluster import ClusterError, firewall_up, join
from appliance.engine.launcher import ClusterRole
from appliance.errors import PolicyError

NODES = ("10.0.0.1", "10.0.0.2")


def _role(rank: int) -> ClusterRole:
    return ClusterRole(node_rank=rank, nodes=NODES, port=29511, interface="eth0")


def test_firewall_none_or_installed_by_the_unit_is_not_installed_here(
        monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    cluster = ClusterPolicy(nodes=NODES, secret_file=Path("s"), firewall="none")
    assert firewall_up(cluster, _role(0), 8443, said.append) is False
    assert "firewall = none: the operator must refuse" in said[-1]
    monkeypatch.setenv("APPLIANCE_CLUSTER_FIREWALL", "unit")
    cluster = ClusterPolicy(nodes=NODES, secret_file=Path("s"))
    assert firewall_up(cluster, _role(0), 8443, said.append) is False
    assert said[-1] == "cluster: firewall installed by the unit (ExecStartPre=+)"


def test_the_head_needs_a_fixed_gateway_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("APPLIANCE_CLUSTER_FIREWALL", raising=False)
    cluster = ClusterPolicy(nodes=NODES, secret_file=Path("s"))
    with pytest.raises(ClusterError) as info:
        firewall_up(cluster, _role(0), 0, [].append)
    assert (info.value.code, info.value.where) == ("cluster_firewall_failed", "gateway.port")


def test_join_refuses_an_unusable_secret(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    monkeypatch.setattr("appliance.engine.cluster._node.local_addresses",
                        lambda: {"10.0.0.1": "wg0"})  # this host holds the head's address
    local = NODES
    cluster = ClusterPolicy(nodes=local, secret_file=Path("${CREDENTIALS_DIRECTORY}/s"))
    with pytest.raises(PolicyError) as info:
        join(cluster, 0, [].append)
    assert info.value.where == "cluster.secret_file"
    (tmp_path / "s").write_text("short\n")
    with pytest.raises(ClusterError) as short:
        join(ClusterPolicy(nodes=local, secret_file=tmp_path / "s"), 0, [].append)
    assert short.value.code == "cluster_secret_invalid"
    (tmp_path / "s").write_text("0123456789abcdef" * 4 + "\n")
    said: list[str] = []
    role, secret = join(ClusterPolicy(nodes=local, secret_file=tmp_path / "s"), None,
                        said.append)
    assert (role.node_rank, role.interface, len(secret)) == (0, "wg0", 64)
    assert said == ["cluster: node rank 0 of 2 on 10.0.0.1 (wg0)"]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("nft") is None
                    or shutil.which("unshare") is None,
                    reason="needs root, nft (Debian nftables) and unshare")
def test_head_and_worker_tables_in_a_private_namespace() -> None:
    """The head opens the peers, the open ports and its gateway port; a worker only the
    peers and the open ports; firewall_down removes the table."""
    script = (
        "from pathlib import Path\n"
        "from appliance.config.cluster import ClusterPolicy\n"
        "from appliance.engine.cluster import firewall, firewall_down, firewall_up\n"
        "from appliance.engine.launcher import ClusterRole\n"
        f"cluster = ClusterPolicy(nodes={NODES!r}, secret_file=Path('s'), open_ports=(22,))\n"
        "for rank in (0, 1):\n"
        f"    role = ClusterRole(node_rank=rank, nodes={NODES!r}, port=29511, interface='e')\n"
        "    assert firewall_up(cluster, role, 8443, print)\n"
        "    print(firewall.installed_ruleset())\n"
        "    assert firewall_down(print)\n"
        "    print('gone' if firewall.installed_ruleset() is None else 'left')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "APPLIANCE_CLUSTER_FIREWALL"}
    proc = subprocess.run(["unshare", "--net", sys.executable, "-c", script],
                          capture_output=True, text=True, timeout=60, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    head, worker = proc.stdout.split("gone\n")[:2]
    assert "cluster: firewall up: TCP only from 10.0.0.1, 10.0.0.2 or to port(s) 22, 8443" \
        in head and "tcp dport { 22, 8443 } accept" in head
    assert "or to port(s) 22\n" in worker and "tcp dport 22 accept" in worker
    assert proc.stdout.count("gone") == 2
