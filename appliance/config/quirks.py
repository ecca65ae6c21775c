"""The vetted engine-quirk list as data (``policies/engine-quirks.json``); see
:mod:`appliance.gateway.models.quirks` for the file's shape and how the gateway enforces it.

``load_quirks(path) -> tuple[Quirk, ...]`` (raises :class:`QuirkFileError` naming the file and
the offending entry/field); ``active_quirks(quirks, distribution, version)`` keeps the entries
for the installed engine. The gateway's refusal of a request using a quirk's feature is
:func:`appliance.gateway.models.quirks.check_quirks`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version
from pydantic import Field, ValidationError, field_validator

from appliance.config.base import StrictModel


class QuirkFileError(ValueError):
    """The quirks file is missing, not JSON or has a bad entry (message names which)."""


class Quirk(StrictModel):
    """One vetted entry of ``engine-quirks.json`` (see the module docstring)."""

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


class QuirkFile(StrictModel):
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
