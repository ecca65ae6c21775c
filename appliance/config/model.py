"""``[model]``: the served model's public name and its trusted signer key.

``served_name`` (1-64 of ``[A-Za-z0-9._-]``, the name clients send as ``model``),
``public_key`` (PEM path, relative to the policy file; ``serve --public-key`` overrides).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from appliance.config.base import StrictModel


class ModelPolicy(StrictModel):
    served_name: str = Field(default="appliance-model", pattern=r"^[A-Za-z0-9._-]{1,64}$")
    public_key: Path | None = None  # trusted signer key; `serve --public-key` overrides
