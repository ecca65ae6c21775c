"""Deployment files: the systemd unit runs `appliance serve` hardened; the Dockerfile runs
the same command as a non-root user."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "appliance.service"


def test_unit_runs_appliance_serve_with_required_arguments() -> None:
    text = UNIT.read_text()
    exec_start = re.search(r"^ExecStart=(.+?)(?<!\\)$", text, re.M | re.S)
    assert exec_start is not None
    command = exec_start.group(1).replace("\\\n", " ")
    assert "appliance serve" in command
    for flag in ("--model", "--policy", "--api-key-file %d/api-keys"):
        assert flag in command
    # issue 8: a store name (served in place, trust from the policy's [trust] keys)
    model = re.search(r"--model\s+(\S+)", command)
    assert model is not None and "/" not in model.group(1)
    assert "--public-key" not in command
    for setting in ("NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateTmp=yes",
                    "CapabilityBoundingSet=", "HF_HUB_OFFLINE=1", "UnsetEnvironment=",
                    "Type=notify", "NotifyAccess=main", "WatchdogSec=",
                    "LoadCredential=api-keys:/etc/appliance/api-keys"):
        assert setting in text
    assert "User=root" not in text


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_unit_exposure_score_is_low() -> None:
    out = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(UNIT)],
                         capture_output=True, text=True, check=False).stdout
    score = re.search(r"Overall exposure level for appliance\.service: ([0-9.]+)", out)
    assert score is not None, out[-500:]
    assert float(score.group(1)) <= 1.5  # issue 9: keep the offline exposure <= 1.5


def test_dockerfile_runs_serve_as_non_root() -> None:
    text = (REPO / "Dockerfile").read_text()
    assert re.search(r"^USER appliance", text, re.M)
    assert '"appliance", "serve"' in text
    assert "HEALTHCHECK" in text and "/health/ready" in text
    assert "STOPSIGNAL SIGTERM" in text
