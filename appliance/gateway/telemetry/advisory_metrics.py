"""The advisory list in force, on ``/metrics``: how old the version floors are.

``appliance serve`` passes the list it checked the engine against
(:func:`appliance.preflight.in_force.in_force_of`) as ``GatewaySettings.advisory_list``; the
gateway exports

* ``appliance_advisory_list_timestamp_seconds``: the list's ``date`` (Unix time, s);
* ``appliance_advisory_list_serial``: its serial (``YYYYMMDDNN``, only ever grows);
* ``appliance_advisory_list_max_age_seconds``: ``[preflight] advisories_max_age_days`` in
  seconds, so the shipped alert (``policies/prometheus-rules.yml``,
  ``ApplianceAdvisoryListStale``) fires at the policy's own threshold:
  ``time() - appliance_advisory_list_timestamp_seconds >
  appliance_advisory_list_max_age_seconds``.

Nothing is exported when no list was passed (a gateway started on its own).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from pydantic import Field

from appliance.config.base import StrictModel


class AdvisoryListInfo(StrictModel):
    """The advisory list in force: ``timestamp`` (its date, Unix s), ``serial``,
    ``max_age_days`` (the policy's staleness threshold)."""

    timestamp: float = Field(ge=0)
    serial: int = Field(ge=1)
    max_age_days: int = Field(ge=1)


class AdvisoryCollector(Collector):
    """The three gauges of the module docstring for ``info``."""

    def __init__(self, info: AdvisoryListInfo) -> None:
        self.info = info

    def collect(self) -> Iterator[GaugeMetricFamily]:
        info = self.info
        yield GaugeMetricFamily("appliance_advisory_list_timestamp_seconds", "Date of the "
                                "advisory list in force (Unix time)", value=info.timestamp)
        yield GaugeMetricFamily("appliance_advisory_list_serial", "Serial of the advisory "
                                "list in force", value=info.serial)
        yield GaugeMetricFamily("appliance_advisory_list_max_age_seconds", "[preflight] "
                                "advisories_max_age_days, in seconds",
                                value=info.max_age_days * 86400.0)
