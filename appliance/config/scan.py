"""``[scan]``: ``deep`` (bool) runs the scanner's deep checks before serving."""

from __future__ import annotations

from appliance.config.base import StrictModel


class ScanPolicy(StrictModel):
    deep: bool = False
