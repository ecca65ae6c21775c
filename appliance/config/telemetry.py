"""Policy table ``[telemetry]``: OpenTelemetry traces of the gateway, exported over OTLP
(HTTP/protobuf) to a collector. Off unless ``otlp_endpoint`` is set.

Shape (every key optional)::

    [telemetry]
    otlp_endpoint = "http://127.0.0.1:4318"  # collector base URL (traces go to /v1/traces)
    service_name = "appliance-gateway"
    sample_ratio = 1.0                       # share of requests traced (parent-based)
    export_timeout_s = 1.0                   # one export attempt, retries included
    max_queue_size = 2048                    # spans waiting for export; beyond: dropped
    max_export_batch_size = 512
    schedule_delay_s = 1.0                   # export every this long (or when a batch fills)
    metrics_interval_s = 60.0                # GenAI metrics: OTLP export period (/v1/metrics)
    metrics_by_key = false                   # key_id label on token / duration / tool series
    metrics_max_keys = 100                   # ... at most this many ids, then "_other"
    [telemetry.headers]                      # sent to the collector (e.g. an API token)
    authorization = "Bearer ..."

Export runs in the SDK's worker thread (``BatchSpanProcessor``): a request only appends its
spans to a bounded queue, so a collector that is down, slow or refusing never delays or fails
a request; its spans are dropped after ``export_timeout_s``.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, field_validator

from appliance.config.base import StrictModel


class TelemetryPolicy(StrictModel):
    """``[telemetry]`` (see the module docstring)."""

    otlp_endpoint: str | None = None
    service_name: str = Field(default="appliance-gateway", min_length=1, max_length=128)
    sample_ratio: float = Field(default=1.0, ge=0.0, le=1.0)
    export_timeout_s: float = Field(default=1.0, gt=0, le=60)
    max_queue_size: int = Field(default=2048, ge=1, le=1_000_000)
    max_export_batch_size: int = Field(default=512, ge=1, le=100_000)
    schedule_delay_s: float = Field(default=1.0, gt=0, le=600)
    headers: dict[str, str] = Field(default_factory=dict)
    # GenAI metrics (appliance.gateway.telemetry.genai_metrics): OTLP export period, and key_id
    # labels (bounded to metrics_max_keys values) on /metrics and OTLP
    metrics_interval_s: float = Field(default=60.0, ge=1, le=3600)
    metrics_by_key: bool = False
    metrics_max_keys: int = Field(default=100, ge=1, le=10_000)

    @field_validator("otlp_endpoint")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("otlp_endpoint must be an http:// or https:// URL")
        if parts.query or parts.fragment or parts.username:
            raise ValueError("otlp_endpoint must have no query, fragment or credentials "
                             "(put a token in [telemetry.headers])")
        return value.rstrip("/")

    @property
    def enabled(self) -> bool:
        """True when spans are exported (``otlp_endpoint`` set)."""
        return self.otlp_endpoint is not None

    @property
    def metrics_url(self) -> str:
        """The OTLP/HTTP metrics endpoint: ``otlp_endpoint`` (without a ``/v1/traces``
        tail) + ``/v1/metrics``."""
        base = self.otlp_endpoint or ""
        base = base.removesuffix("/v1/traces")
        return base if base.endswith("/v1/metrics") else base + "/v1/metrics"

    @property
    def traces_url(self) -> str:
        """The OTLP/HTTP traces endpoint: ``otlp_endpoint`` + ``/v1/traces`` (unless it
        already ends so)."""
        base = self.otlp_endpoint or ""
        return base if base.endswith("/v1/traces") else base + "/v1/traces"
