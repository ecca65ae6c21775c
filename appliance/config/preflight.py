"""``[preflight]``: the advisory file, the packages checked against its floors, the
installed signed advisory feed (``advisory_feed``) and the age in days past which ``appliance
check`` warns (``advisories_max_age_days``), and the vetted engine-quirk list (paths relative
to the policy file; see :mod:`appliance.preflight`).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from appliance.config.base import StrictModel
from appliance.resources import policy_path

DEFAULT_ADVISORY_FEED = Path("/var/lib/appliance/advisories/feed.json")


class PreflightPolicy(StrictModel):
    advisories: Path = Path("advisories.json")
    # Signed feed installed by `appliance advisories import` (appliance.preflight.feed); used
    # instead of `advisories` when its serial is higher. `appliance check` warns when the list
    # in force is older than advisories_max_age_days.
    advisory_feed: Path = DEFAULT_ADVISORY_FEED
    advisories_max_age_days: int = Field(default=90, ge=1, le=3650)
    packages: tuple[str, ...] = ("vllm", "torch", "transformers", "xgrammar")
    # The vetted engine-quirk list (appliance.gateway.models.quirks). Default: the one shipped with
    # the appliance (package data, appliance.resources), so a policy copied to /etc needs no
    # copy of it; a relative path is resolved against the policy's folder like the others.
    engine_quirks: Path = Field(default_factory=lambda: policy_path("engine-quirks.json"))
