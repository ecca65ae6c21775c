"""``[gateway]``: the listener (``host``, ``port``), request bounds, the audit log and
transport (``allow_plaintext``, ``[gateway.tls]`` in :mod:`appliance.config.tls`).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, StrictBool

from appliance.config.base import StrictModel
from appliance.config.tls import TlsPolicy


class GatewayPolicy(StrictModel):
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    max_body_bytes: int = Field(default=8 << 20, ge=1024, le=1 << 30)
    max_messages: int = Field(default=1024, ge=1, le=100_000)
    max_tokens_cap: int = Field(default=4096, ge=1, le=1_048_576)
    max_n: int = Field(default=4, ge=1, le=16)  # bound on a request's `n` (choices)
    request_timeout_s: float = Field(default=600.0, gt=0, le=86_400)
    audit_log: Path | None = None
    allow_plaintext: StrictBool = False  # non-loopback host without TLS (TLS proxy on host)
    tls: TlsPolicy | None = None
