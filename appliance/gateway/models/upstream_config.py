"""The served-model routing table's rows: served name -> its engine (upstream).

:class:`UpstreamModel` is one row of ``GatewaySettings.models`` (a served name and how to
reach that model's engine: a loopback ``http://`` URL or a Unix socket, and the engine's
API key). A gateway built with the single-model keys (``served_model_name``,
``upstream_url`` / ``upstream_uds``, ``upstream_api_key``) has the one row they describe:
there is one routing path for one model or several.

At run time each row is a :class:`.model_table.Upstream` (its engine status and session).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from appliance.config.tls import is_loopback

MAX_MODELS = 16


def check_upstream(url: str | None, uds: Path | None) -> None:
    """Raise ``ValueError`` unless exactly one of ``url`` / ``uds`` is set and ``url`` is a
    plain ``http://`` loopback address with a port (the engine is local)."""
    if (url is None) == (uds is None):
        raise ValueError("set exactly one of upstream_url and upstream_uds")
    if url is not None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or parts.port is None:
            raise ValueError("upstream_url must look like http://127.0.0.1:PORT")
        if not is_loopback(parts.hostname):
            raise ValueError("upstream_url must be a loopback address (engine is local)")
        if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
            raise ValueError("upstream_url must have no path, query or credentials")


class UpstreamModel(BaseModel):
    """One served model: ``name`` (what clients send as ``model``) and its engine."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=256)
    upstream_url: str | None = None
    upstream_uds: Path | None = None
    upstream_api_key: SecretStr | None = None

    @model_validator(mode="after")
    def _local(self) -> UpstreamModel:
        check_upstream(self.upstream_url, self.upstream_uds)
        return self

    @property
    def base(self) -> str:
        """Base URL for engine requests (``http://localhost`` over a UDS)."""
        if self.upstream_url is not None:
            return self.upstream_url.rstrip("/")
        return "http://localhost"
