"""One model's files before serving: verified (signed manifest), staged read-only, scanned.

:func:`check_model` is the per-model step of :func:`appliance.preflight.sequence.run_sequence`
for ``serve``: a store model is checked in place (:func:`appliance.store.served_folder`), a
folder is verified into a staged read-only copy (:func:`appliance.signing.verify_and_stage`);
then the manifest must be servable and sign the policy's chat template, the caller's
``layout`` check runs on the verified folder (the engine's parallel layout), and
:func:`scan_model` — the same code path as ``appliance scan`` — must say ``clean``.

Raises ``SigningError`` / ``StoreError`` (verification), ``PolicyError`` (layout),
``ScanRefused`` (any verdict but clean). Times are wall seconds (``time.monotonic``).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance import signing
from appliance.config.engine import EnginePolicy
from appliance.config.models import ServedModel
from appliance.config.policy import Policy
from appliance.errors import ScanRefused, SigningError

__all__ = ["CheckedModel", "check_model", "discard_stages", "scan_model"]


@dataclass(frozen=True)
class CheckedModel:
    """The verified folder ``staged`` (a store model's own folder, or the staged copy), the
    signed manifest's root ``digest``, and the seconds verification and the scan took."""

    staged: Path
    digest: str
    verify_s: float
    scan_s: float


def scan_model(model_dir: Path, deep: bool) -> None:
    """Run the pre-deploy scan; raise ``ScanRefused`` unless the verdict is clean."""
    from scanner.api import scan_paths
    from scanner.readers import Limits

    report = scan_paths([model_dir], limits=Limits(deep=deep))
    result = report.targets[0]
    verdict = result.verdict
    if verdict is None or verdict.label != "clean":
        lines = [f"  {f.rule_id} {f.path}: {f.message}" for f in result.findings[:20]]
        label = verdict.label if verdict is not None else "no verdict"
        raise ScanRefused(f"scan verdict is {label}:\n" + "\n".join(lines),
                          where=str(model_dir),
                          fix="run `appliance scan` on the model folder and remove what it flags")


def check_model(policy: Policy, model: ServedModel, stage: Path, public_key: Any,
                report: Callable[[str], None],
                layout: Callable[[EnginePolicy, Path], None]) -> CheckedModel:
    """Verify ``model`` (in place from the store, else into the new folder ``stage``),
    require a servable manifest that signs the chat template, run ``layout`` on the verified
    folder, scan it. ``public_key``: a PEM key path, or a ``signing.TrustStore`` for store
    models. ``report`` gets the progress lines (``verify: ok ...``, ``scan: clean ...``),
    prefixed with the model's name when the policy has ``[[models]]``."""
    label = f"{model.served_name}: " if policy.models else ""
    t0 = time.monotonic()
    if model.ref is not None:  # serve in place from the store (no copy)
        from appliance.store import served_folder

        served = served_folder(policy.store.root, model.ref, public_key,
                               allow_owner=policy.store.allow_owner_serve)
        staged, manifest = served.path, served.manifest
        for warning in served.warnings:
            report(f"{label}store: warning: {warning}")
        report(f"{label}store: {served.name}@{served.digest[:16]} checked by {served.method}")
    else:  # a signed folder (``source`` is its path): verified into the staged copy
        staged, manifest = stage, signing.verify_and_stage(Path(model.source), public_key, stage)
    signing.require_servable(manifest)
    template = model.engine.chat_template
    if template not in manifest:
        raise SigningError(f"chat template {template!r} is not in the signed manifest",
                           code="chat_template_unsigned", where=model.source,
                           fix="add the vetted chat template to the folder and re-sign")
    verify_s = time.monotonic() - t0
    layout(model.engine, staged)
    report(f"{label}verify: ok ({len(manifest)} signed files, {verify_s:.2f} s)")
    t0 = time.monotonic()
    scan_model(staged, policy.scan.deep)
    scan_s = time.monotonic() - t0
    report(f"{label}scan: clean ({scan_s:.2f} s)")
    return CheckedModel(staged, manifest.root_digest, verify_s, scan_s)


def discard_stages(runtime_dir: Path) -> None:
    """Remove the staged copies (``model``, ``model-1``, ...: read-only, so made writable
    first, :func:`appliance.signing.discard_stage`) and then all of ``runtime_dir``."""
    for staged in runtime_dir.glob("model*"):
        signing.discard_stage(staged)
    shutil.rmtree(runtime_dir, ignore_errors=True)
