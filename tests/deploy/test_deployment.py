"""Deployment files: the systemd unit runs `appliance serve` hardened; the Dockerfile runs
the same command as a non-root user."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
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


def _stage(text: str, name: str) -> str:
    """The Dockerfile lines of stage ``name`` (its FROM up to the next FROM)."""
    match = re.search(rf"^FROM \S+ AS {name}\n(.*?)(?=^FROM |\Z)", text, re.M | re.S)
    assert match is not None, name
    return match.group(1)


def _commands(stage: str) -> list[str]:
    """The shell commands of a stage's RUN instructions (continuations joined, split at &&)."""
    joined = re.sub(r"\\\n\s*", " ", stage)
    runs = [line[4:] for line in joined.splitlines() if line.startswith("RUN ")]
    return [cmd.strip() for run in runs for cmd in run.split("&&")]


def test_no_dockerfile_step_hides_a_failure() -> None:
    """A failed install must fail the build: no ``|| true`` / ``|| :`` in any RUN."""
    text = (REPO / "Dockerfile").read_text()
    commands = _commands(_stage(text, "runtime")) + _commands(_stage(text, "cpu"))
    assert len(commands) > 5
    assert not [c for c in commands if re.search(r"\|\|\s*(true|:)(\s|$)", c)]


def test_gpu_stage_installs_only_the_hash_lock_then_the_project_offline() -> None:
    gpu = _stage((REPO / "Dockerfile").read_text(), "runtime")
    installs = [c for c in _commands(gpu) if re.search(r"\bpip\b.*\binstall\b", c)]
    assert len(installs) == 2, installs
    assert "--require-hashes" in installs[0] and "-r requirements-gpu.lock" in installs[0]
    assert "--no-deps" in installs[0]
    assert all(flag in installs[1] for flag in ("--no-index", "--no-deps", "."))
    assert "[gpu]" not in gpu  # never resolved from the index at build time


def test_gpu_lock_pins_the_gpu_extra_with_a_hash_on_every_line() -> None:
    """requirements-gpu.lock (scripts/gpu_lock.sh) holds exactly the [gpu] extra's pins."""
    lock = (REPO / "requirements-gpu.lock").read_text().splitlines()
    pins = {}
    for line in lock:
        if not line.strip() or line.startswith("#"):
            continue
        m = re.match(r"^([a-z0-9-]+)==(\S+) --hash=sha256:[0-9a-f]{64}\b", line)
        assert m is not None, line
        pins[m.group(1)] = m.group(2)
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())[
        "project"]["optional-dependencies"]["gpu"]
    for req in extra:
        name, _, version = req.partition("==")
        if version:
            assert pins.get(name) == version, (name, pins.get(name), version)
        else:
            assert re.sub(r"[<>=!~].*", "", req) in pins, req
    assert "setuptools" in pins  # the project builds offline from source in the image
    assert not {"torchvision", "torchaudio", "torchcodec", "model-appliance"} & set(pins)
