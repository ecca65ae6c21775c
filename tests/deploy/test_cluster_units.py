"""The cluster systemd units: the head serves with --node-rank 0 and API keys, the worker
without a gateway or keys; both install the firewall from a privileged ExecStartPre=+ and
remove it in ExecStopPost=+, load the cluster secret as a credential, keep the single
unit's hardening, and score as low offline."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from appliance.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
UNITS = {"head": REPO / "systemd" / "appliance-cluster-head.service",
         "worker": REPO / "systemd" / "appliance-cluster-worker.service"}


def _exec(text: str, key: str) -> list[str]:
    return [m.replace("\\\n", " ") for m in
            re.findall(rf"^{key}=(.+?)(?<!\\)$", text, re.M | re.S)]


@pytest.mark.parametrize("role", sorted(UNITS))
def test_cluster_unit(role: str) -> None:
    text = UNITS[role].read_text()
    (start,) = _exec(text, "ExecStart")
    argv = start.split()
    assert argv[:2] == ["/opt/appliance/.venv/bin/appliance", "serve"]
    args = build_parser().parse_args(argv[1:])  # the CLI accepts the unit's arguments
    if role == "head":
        assert args.node_rank == 0 and args.api_key_file is not None
    else:
        assert args.node_rank is None and args.api_key_file is None  # rank from the address
        assert "api-keys" not in text
    (pre,) = _exec(text, r"ExecStartPre")
    (post,) = _exec(text, r"ExecStopPost")
    assert pre.startswith("+") and "cluster-firewall up" in pre
    assert post.startswith("+") and "cluster-firewall down" in post
    build_parser().parse_args(pre[1:].split()[1:])
    for setting in ("Environment=APPLIANCE_CLUSTER_FIREWALL=unit",
                    "LoadCredential=cluster-secret:/etc/appliance/cluster-secret",
                    "NoNewPrivileges=yes", "ProtectSystem=strict", "CapabilityBoundingSet=\n",
                    "PrivateUsers=yes", "IPAddressDeny=any", "Type=notify"):
        assert setting in text
    assert "User=appliance" in text and "AmbientCapabilities=\n" in text


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
@pytest.mark.parametrize("role", sorted(UNITS))
def test_cluster_unit_exposure_score_is_low(role: str) -> None:
    unit = UNITS[role]
    out = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(unit)],
                         capture_output=True, text=True, check=False).stdout
    score = re.search(rf"Overall exposure level for {re.escape(unit.name)}: ([0-9.]+)", out)
    assert score is not None, out[-500:]
    assert float(score.group(1)) <= 1.5


def test_node_rank_needs_a_cluster_policy(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from appliance.cli import main

    assert main(["serve", "--model", "x/y", "--policy", str(REPO / "policies" / "cpu-demo.toml"),
                 "--node-rank", "1"]) == 2
    assert "--node-rank needs a [cluster] table" in capsys.readouterr().err


def test_cluster_firewall_show_prints_the_rules(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from appliance.cli import main

    (tmp_path / "p.toml").write_text(
        'schema_version = 1\n[gateway]\nport = 8443\n[cluster]\n'
        'nodes = ["10.0.0.1", "10.0.0.2"]\nsecret_file = "s"\nopen_ports = [22]\n')
    assert main(["cluster-firewall", "show", "--policy", str(tmp_path / "p.toml"),
                 "--node-rank", "0"]) == 0
    assert "tcp dport { 22, 8443 } accept" in capsys.readouterr().out
    assert main(["cluster-firewall", "show", "--policy", str(tmp_path / "p.toml"),
                 "--node-rank", "1"]) == 0
    assert "tcp dport { 22 } accept" in capsys.readouterr().out  # no gateway on a worker
    # up without the rank: this host holds neither address -> refused, naming them
    assert main(["cluster-firewall", "up", "--policy", str(tmp_path / "p.toml")]) == 1
    assert "cluster_node_rank" in capsys.readouterr().err
