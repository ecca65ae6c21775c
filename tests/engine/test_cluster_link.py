"""The cluster link (appliance.engine.cluster._link) on loopback addresses: the authenticated
same-model handshake, refusals on both sides, a wrong secret, liveness; the nftables
ruleset (and, as root, that nft accepts it inside a private network namespace); node
roles from this host's addresses."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from appliance.config.cluster import ClusterPolicy
from appliance.engine.cluster import ClusterError, firewall, node_role, read_secret
from appliance.engine.cluster._link import head_handshake, worker_handshake

NODES = ("127.0.0.1", "127.0.0.2")
SECRET = b"s" * 32
DIGEST_A = "a" * 64
DIGEST_B = "b" * 64


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pair(head_digest: str, worker_digest: str, worker_secret: bytes = SECRET,
          timeout: float = 10.0):  # type: ignore[no-untyped-def]
    port = _free_port()
    out: dict[str, object] = {}

    def worker() -> None:
        try:
            out["worker"] = worker_handshake(NODES, 1, port, worker_secret, worker_digest,
                                             timeout, 5.0)
        except ClusterError as exc:
            out["worker"] = exc

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        out["head"] = head_handshake(NODES, port, SECRET, head_digest, timeout, 5.0)
    except ClusterError as exc:
        out["head"] = exc
    thread.join(timeout + 5)
    return out["head"], out["worker"]


def test_same_model_handshake_then_liveness() -> None:
    head, worker = _pair(DIGEST_A, DIGEST_A)
    assert not isinstance(head, Exception) and not isinstance(worker, Exception)
    head.announce_ready()
    assert worker.ready.wait(5)
    time.sleep(1.5)  # heartbeats flow both ways
    assert not head.dead and not worker.dead
    worker.close()  # a worker going away is seen by the head at once
    deadline = time.monotonic() + 5
    while not head.dead and time.monotonic() < deadline:
        time.sleep(0.05)
    assert head.dead and "lost" in head.reason
    head.close()


def test_different_models_are_refused_on_both_sides_naming_both_digests() -> None:
    head, worker = _pair(DIGEST_A, DIGEST_B)
    for err in (head, worker):
        assert isinstance(err, ClusterError), err
        assert err.code == "cluster_model_mismatch"
        assert DIGEST_A in str(err) and DIGEST_B in str(err)


def test_a_wrong_secret_does_not_pass_for_a_node() -> None:
    head, worker = _pair(DIGEST_A, DIGEST_A, worker_secret=b"x" * 32, timeout=4.0)
    assert isinstance(worker, ClusterError) and worker.code == "cluster_handshake_failed"
    assert "proof" in str(worker)
    assert isinstance(head, ClusterError) and head.code == "cluster_handshake_failed"
    assert "[1] did not complete" in str(head)


def test_an_unlisted_address_is_not_heard() -> None:
    """A connection from an address not listed for a worker rank is closed unread."""
    port = _free_port()
    result: dict[str, object] = {}

    def head() -> None:
        try:
            result["head"] = head_handshake(NODES, port, SECRET, DIGEST_A, 3.0, 5.0)
        except ClusterError as exc:
            result["head"] = exc

    thread = threading.Thread(target=head)
    thread.start()
    time.sleep(0.5)
    with socket.socket() as sock:
        sock.bind(("127.0.0.3", 0))
        sock.settimeout(3)
        sock.connect((NODES[0], port))
        sock.sendall(b'{"v":1,"rank":1,"nonce":"00","digest":"' + DIGEST_A.encode() + b'"}\n')
        try:
            answer = sock.recv(100)
        except ConnectionResetError:
            answer = b""
        assert answer == b""  # closed without an answer
    thread.join(10)
    assert isinstance(result["head"], ClusterError)


def test_secret_must_be_long_enough(tmp_path: Path) -> None:
    (tmp_path / "s").write_text("short\n")
    with pytest.raises(ClusterError) as info:
        read_secret(tmp_path / "s")
    assert info.value.code == "cluster_secret_invalid"
    with pytest.raises(ClusterError):
        read_secret(tmp_path / "missing")
    (tmp_path / "s").write_text("0123456789abcdef" * 4 + "\n")
    assert len(read_secret(tmp_path / "s")) == 64


def test_node_role_from_addresses() -> None:
    cluster = ClusterPolicy(nodes=("10.0.0.1", "10.0.0.2"), secret_file=Path("s"))
    role = node_role(cluster, None, {"10.0.0.2": "wg0", "127.0.0.1": "lo"})
    assert (role.node_rank, role.interface, role.address, role.head) == \
        (1, "wg0", "10.0.0.2", "10.0.0.1")
    for rank, local in ((None, {"10.0.0.9": "eth0"}), (2, {"10.0.0.1": "eth0"}),
                        (1, {"10.0.0.1": "eth0"})):
        with pytest.raises(ClusterError) as info:
            node_role(cluster, rank, local)
        assert info.value.code == "cluster_node_rank"


def test_ruleset_accepts_only_peers_and_open_ports() -> None:
    text = firewall.ruleset(("10.0.0.1", "10.0.0.2"), (8443, 22, 8443))
    assert "ip saddr { 10.0.0.1, 10.0.0.2 } accept" in text
    assert "tcp dport { 22, 8443 } accept" in text
    lines = [line.strip() for line in text.splitlines()]
    assert lines.index("meta l4proto tcp reject with tcp reset") > \
        lines.index("ip saddr { 10.0.0.1, 10.0.0.2 } accept")
    assert "tcp dport" not in firewall.ruleset(("10.0.0.1", "10.0.0.2"), ())


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("nft") is None
                    or shutil.which("unshare") is None,
                    reason="needs root, nft (Debian nftables) and unshare")
def test_nft_installs_and_removes_the_table_in_a_private_namespace() -> None:
    script = (
        "import sys; from appliance.engine.cluster import firewall\n"
        "firewall.install(('10.0.0.1', '10.0.0.2'), (8443,))\n"
        "print(firewall.installed_ruleset())\n"
        "firewall.remove(); print('gone' if firewall.installed_ruleset() is None else 'left')\n"
    )
    proc = subprocess.run(["unshare", "--net", sys.executable, "-c", script],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": os.environ.get("PATH", "") + ":/usr/sbin"})
    assert proc.returncode == 0, proc.stderr
    assert "10.0.0.1" in proc.stdout and "8443" in proc.stdout and "reject" in proc.stdout
    assert proc.stdout.strip().endswith("gone")
