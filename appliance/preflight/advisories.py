"""Offline advisory list and version floors.

The floor of a package is the highest ``fixed`` version among its advisories rated
``high`` or ``critical`` (``policies/advisories.json``; entries keep their GHSA/CVE id).
Lower-rated advisories are reported but do not set the floor.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from appliance.errors import PolicyError

BLOCKING = frozenset({"high", "critical"})


@dataclass(frozen=True)
class Advisory:
    id: str
    package: str
    fixed: Version | None
    severity: str
    kind: str
    summary: str


@dataclass(frozen=True)
class Floor:
    """Minimum safe version of ``package`` and the advisory that sets it."""

    package: str
    version: Version
    advisory_id: str


def load_advisories(path: Path) -> list[Advisory]:
    """Parse the advisory file. Raises ``PolicyError`` (``advisories_invalid``)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        entries = doc["advisories"]
        out = []
        for entry in entries:
            fixed = entry.get("fixed")
            out.append(Advisory(
                id=str(entry["id"]), package=str(entry["package"]).lower(),
                fixed=Version(fixed) if fixed else None,
                severity=str(entry["severity"]).lower(), kind=str(entry.get("kind", "")),
                summary=str(entry.get("summary", "")),
            ))
        return out
    except (OSError, ValueError, KeyError, TypeError, InvalidVersion) as exc:
        raise PolicyError(f"advisory file unusable: {type(exc).__name__}: {exc}",
                          code="advisories_invalid", where=str(path),
                          fix="restore policies/advisories.json from the release") from None


def floors(advisories: list[Advisory]) -> dict[str, Floor]:
    """Package -> floor, from high/critical advisories that name a fixed version."""
    out: dict[str, Floor] = {}
    for adv in advisories:
        if adv.severity not in BLOCKING or adv.fixed is None:
            continue
        current = out.get(adv.package)
        if current is None or adv.fixed > current.version:
            out[adv.package] = Floor(adv.package, adv.fixed, adv.id)
    return out
