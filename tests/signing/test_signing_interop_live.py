"""Live interop with the real model_signing 1.1.1, both ways, P-256 and P-384.

model_signing is not a project dependency (it pulls the whole Sigstore stack and, in 1.1.1,
imports ``OpenSSL`` without declaring pyOpenSSL). Point
``APPLIANCE_MODEL_SIGNING_PYTHON`` at a Python that has it, e.g.
``python -m venv /tmp/ms && /tmp/ms/bin/pip install model-signing==1.1.1 pyOpenSSL``;
otherwise the test is skipped (the golden files cover the same ground offline). ~3 s.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from signing_helpers import make_model

from appliance.signing import keygen, sign, verify

PYTHON = os.environ.get("APPLIANCE_MODEL_SIGNING_PYTHON", "")
pytestmark = pytest.mark.skipif(
    not PYTHON or not Path(PYTHON).exists(),
    reason="set APPLIANCE_MODEL_SIGNING_PYTHON to a Python with model_signing 1.1.1")

SCRIPT = """
import sys, model_signing
action, model, sig, key, password = sys.argv[1:6]
if action == "sign":
    h = model_signing.hashing.Config().set_ignored_paths(paths=["model.sig"],
                                                        ignore_git_paths=True)
    model_signing.signing.Config().use_elliptic_key_signer(
        private_key=key, password=password.encode() or None).set_hashing_config(h).sign(
        model, sig)
else:
    model_signing.verifying.Config().use_elliptic_key_verifier(public_key=key).verify(
        model, sig)
print("ok")
"""


def _run(*args: str, cwd: Path) -> None:
    out = subprocess.run([PYTHON, "-c", SCRIPT, *args], cwd=cwd, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


@pytest.mark.parametrize("curve", ["p256", "p384"])
def test_both_ways(tmp_path: Path, curve: str) -> None:
    keygen(tmp_path / "k.pem", tmp_path / "k.pub", curve, b"pass phrase")
    ours = make_model(tmp_path, "ours")
    sign(ours, tmp_path / "k.pem", passphrase=b"pass phrase")
    _run("verify", "ours", "ours/model.sig", "k.pub", "", cwd=tmp_path)
    theirs = make_model(tmp_path, "theirs")
    _run("sign", "theirs", "theirs/model.sig", "k.pem", "pass phrase", cwd=tmp_path)
    assert verify(theirs, tmp_path / "k.pub").signer.algorithm == (  # type: ignore[attr-defined]
        "P-256" if curve == "p256" else "P-384")
