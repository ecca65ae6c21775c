"""Policies ship as package data: a real wheel build, installed into a fresh venv, runs
`appliance check` and resolves `demo`'s default policy from outside any checkout
(issue 9: a wheel install failed with policy_invalid because policies/ stayed in the tree).

Takes about 10 s (one `pip wheel`, one `pip install --no-deps`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p.name for p in (REPO / "policies").iterdir()
                 if p.suffix in (".toml", ".json", ".yml"))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"  # a clean copy: never build inside the checkout
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "tests"))
    out = work / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--isolated", "wheel", "--no-deps", "--no-index",
         "--no-build-isolation", "-q", "-w", str(out), str(src)],
        capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (built,) = out.glob("model_appliance-*.whl")
    return built


def test_wheel_carries_policies_as_appliance_data(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert sorted(n.split("/")[-1] for n in names if n.startswith("appliance/data/")) == SHIPPED
    assert "appliance/builtin/templates/hermes_chatml.jinja" in names
    assert not any(n.startswith("policies/") for n in names)


def test_packaged_copy_matches_the_source(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        for name in SHIPPED:
            assert zf.read(f"appliance/data/{name}") == (REPO / "policies" / name).read_bytes()


def test_wheel_install_runs_from_any_directory(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--isolated", "--python", str(py), "install", "--no-deps",
         "--no-index", "--ignore-installed", "-q", str(wheel)], env=env, capture_output=True,
        text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # Dependencies come from this interpreter's site-packages, listed after the venv's own
    # (a .pth line adds the folder only: the editable checkout's finder there is not loaded).
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    where = subprocess.run(
        [str(py), "-c", "import appliance.resources as r, appliance; "
         "print(appliance.__file__); print(r.data_dir())"],
        cwd=elsewhere, env=env, capture_output=True, text=True, check=True).stdout.split()
    assert where[0].startswith(site) and where[1] == f"{site}/appliance/data"
    proc = subprocess.run([str(venv / "bin" / "appliance"), "check"], cwd=elsewhere, env=env,
                          capture_output=True, text=True, check=False, timeout=120)
    assert f"policy: {site}/appliance/data/default.toml" in proc.stdout, proc.stderr[-2000:]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    helptext = subprocess.run([str(venv / "bin" / "appliance"), "demo", "--help"], cwd=elsewhere,
                              env=env, capture_output=True, text=True, check=True).stdout
    assert "--policy" in helptext
    # bench tools / raw-vllm default --policy to the packaged copy (it once named
    # policies/ in the source tree, which a wheel install does not have).
    defaults = subprocess.run(
        [str(py), "-c", "from appliance.cli import build_parser as b; "
         "print(b().parse_args(['bench', 'tools']).policy); "
         "print(b().parse_args(['bench', 'raw-vllm']).policy)"],
        cwd=elsewhere, env=env, capture_output=True, text=True, check=True).stdout.split()
    assert defaults == [f"{site}/appliance/data/cpu-demo.toml"] * 2


def test_checkout_falls_back_to_the_top_level_policies() -> None:
    from appliance import resources

    if (Path(resources.__file__).parent / "data").is_dir():
        pytest.skip("appliance is installed from a wheel here")
    assert resources.data_dir() == REPO / "policies"
    assert resources.policy_path("cpu-demo.toml").is_file()
