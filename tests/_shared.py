"""Where the read-only shared data lives: ``$APPLIANCE_SHARED``, else ``shared/`` beside the
checkout (``/work/shared`` for ``/work/main``; CI lays a copy beside its clone)."""

import os
from pathlib import Path
from typing import Any

SHARED = Path(os.environ.get("APPLIANCE_SHARED") or Path(__file__).resolve().parents[2] / "shared")
CORPUS = Path(os.environ.get("APPLIANCE_CORPUS") or SHARED / "corpus")


class GuardedBlob:
    """A blob that fails the test on any read outside [0, size) and records reads."""

    def __init__(self, name: str, data: bytes) -> None:
        self.name, self.data, self.size = name, data, len(data)
        self.reads: list[tuple[int, int]] = []

    def read_at(self, offset: int, length: int) -> bytes:
        assert 0 <= offset and 0 <= length and offset + length <= self.size, (offset, length)
        self.reads.append((offset, length))
        return self.data[offset : offset + length]


def regex_dfa_blowup_bodies(model: str = "appliance-model", n: int = 40) -> list[dict[str, Any]]:
    """The three request bodies of public bug regex-dfa-blowup, rebuilt from its generator."""
    pattern = f"[ab]*a[ab]{{{n}}}"
    alternation = "^(" + "|".join(f"w{i:05d}" for i in range(5000)) + ")$"
    msg = [{"role": "user", "content": "reply"}]

    def schema(p: str) -> dict[str, Any]:
        return {"type": "object", "properties": {"s": {"type": "string", "pattern": p}},
                "required": ["s"]}

    def rf(p: str) -> dict[str, Any]:
        return {"type": "json_schema", "json_schema": {"name": "r", "schema": schema(p)}}

    return [
        {"model": model, "messages": msg, "response_format": rf(pattern)},
        {"model": model, "messages": msg, "response_format": rf(alternation)},
        {"model": model, "messages": msg, "tool_choice": "required",
         "tools": [{"type": "function", "function": {"name": "f", "parameters": schema(pattern)}}]},
    ]
