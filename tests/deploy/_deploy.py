"""Shared pieces of the deployment tests (tests/deploy/test_airgap.py, test_nspawn.py,
test_container.py): the opt-in switch, the cache folder, the bundle and step timing.

The heavy tests run only with ``APPLIANCE_DEPLOY_TESTS=1`` (``.ci/run`` sets it) and as root;
otherwise they skip with the reason. They cache what is slow to make in
``$APPLIANCE_DEPLOY_CACHE`` (default ``~/.cache/appliance-deploy``): the bundle (its wheels
are reused, the project wheel and lock are rebuilt each run) and the Debian root.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("APPLIANCE_DEPLOY_CACHE")
             or Path.home() / ".cache" / "appliance-deploy")
ENGINE_LOCK = Path("/tmp/engine.lock")  # noqa: S108 - the machine's shared engine lock
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)


def require_deploy_tests() -> None:
    """Skip unless deployment tests are switched on and we are root."""
    if os.environ.get("APPLIANCE_DEPLOY_TESTS") != "1":
        pytest.skip("deployment test: set APPLIANCE_DEPLOY_TESTS=1 (.ci/run does; needs root, "
                    "the package registry for the bundle, minutes)")
    if os.geteuid() != 0:
        pytest.skip("deployment test: needs root (unshare, nspawn, dockerd)")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without this checkout's import path or pip settings."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("PIP_")}
    env.update(extra)
    return env


def log_time(step: str, seconds: float) -> None:
    """Print and append ``step: N s`` to CACHE/timings.txt (the issue asks for step times)."""
    line = f"{time.strftime('%FT%T')} {step}: {seconds:.1f} s"
    print(f"deploy-timing {line}", file=sys.stderr, flush=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "timings.txt", "a", encoding="utf-8") as fh:
        fh.write(line + "\n")


@contextmanager
def timed(step: str) -> Iterator[None]:
    start = time.monotonic()
    try:
        yield
    finally:
        log_time(step, time.monotonic() - start)


def run(cmd: list[str], timeout: float, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` (text output captured); a timeout is a failure, never a hang."""
    return subprocess.run(cmd, capture_output=True, text=True, check=False,  # type: ignore[call-overload, no-any-return]
                          timeout=timeout, **kwargs)


def build_bundle() -> Path:
    """``scripts/bundle.sh CACHE/bundle`` (reuses the wheels already there). Returns it."""
    out = CACHE / "bundle"
    if os.environ.get("APPLIANCE_DEPLOY_REUSE_BUNDLE") == "1" and (out / "SHA256SUMS").exists():
        return out  # developer shortcut: CI always rebuilds (the project wheel changes)
    with timed("bundle.sh (connected side)"):
        proc = run(["bash", str(REPO / "scripts" / "bundle.sh"), str(out)], timeout=1800,
                   env={**os.environ, "PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr[-3000:]
    size = sum(f.stat().st_size for f in (out / "wheels").iterdir())
    log_time(f"bundle size {size / 1e6:.0f} MB, {len(list((out / 'wheels').iterdir()))} wheels,"
             " (not a time)", 0)
    return out


def prepared_model() -> tuple[Path, Path]:
    """The signed built-in model folder and its public key (``appliance prepare``)."""
    from appliance.builtin.model import prepare

    model = prepare()
    return model.model_dir, model.public_key
