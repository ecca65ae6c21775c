"""``[preflight]``: the advisory file, the packages checked against its floors, and the
vetted engine-quirk list (paths relative to the policy file; see :mod:`appliance.preflight`).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from appliance.config.base import StrictModel
from appliance.resources import policy_path


class PreflightPolicy(StrictModel):
    advisories: Path = Path("advisories.json")
    packages: tuple[str, ...] = ("vllm", "torch", "transformers", "xgrammar")
    # The vetted engine-quirk list (appliance.gateway.quirks). Default: the one shipped with
    # the appliance (package data, appliance.resources), so a policy copied to /etc needs no
    # copy of it; a relative path is resolved against the policy's folder like the others.
    engine_quirks: Path = Field(default_factory=lambda: policy_path("engine-quirks.json"))
