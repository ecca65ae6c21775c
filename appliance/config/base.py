"""The one strict base of every policy table: unknown keys refused, values frozen.

``StrictModel`` is a pydantic ``BaseModel`` with ``extra="forbid"`` (a misspelt key is an
error naming the key, never silently ignored) and ``frozen=True`` (a loaded policy is never
mutated; ``model_copy(update=...)`` makes resolved copies).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
