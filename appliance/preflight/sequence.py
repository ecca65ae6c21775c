"""The preflight sequence: the one entry point of ``appliance check`` and ``serve``.

:func:`run_sequence` runs, in this order:

1. the gateway listener on ``host`` (skipped with ``host=None``, a cluster worker):
   plaintext off loopback (``plaintext_not_allowed``) and the TLS files
   (:mod:`.tls_files`);
2. ``serving.before_models`` (``serve`` only: the checks of the layers above this one, e.g.
   API keys, the cache salt secret, the engines' tool-call parsers);
3. the host check of several models (``models_over_host``, :func:`~appliance.config.models
   .check_host`);
4. ``serving.model`` for each model in order (``serve`` only: verify, stage, scan,
   :mod:`.model_files`), whose results become :attr:`Checked.runs`;
5. the advisory list in force (:mod:`.in_force`) and every rule of
   :data:`appliance.preflight.RULES` (package floors, environment, engine kernels).

Two modes. ``serving`` given (``serve``): the first refusal raises its ``ApplianceError``
(the rules together as one ``PreflightError``, :func:`~appliance.preflight.preflight_error`).
``serving=None`` (``appliance check``): the listener and the rules are described and their
problems collected into :attr:`Checked.problems` (rules first, then the listener), nothing is
raised for them; a bad policy or advisory file (``PolicyError``) and ``models_over_host``
still raise. Nothing is printed here: the callers print what :class:`Checked` holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from appliance.config.models import ServedModel, check_host
from appliance.config.policy import Policy
from appliance.config.tls import require_tls_for_host
from appliance.preflight import Problem, describe_packages, preflight_error, run_preflight
from appliance.preflight.advisories import floors
from appliance.preflight.feed import ListInForce
from appliance.preflight.in_force import describe, in_force_of
from appliance.preflight.kernels import check_kernels
from appliance.preflight.tls_files import describe_tls, inspect_tls

__all__ = ["Checked", "Serving", "check_listener", "run_sequence"]

R = TypeVar("R")


@dataclass(frozen=True)
class Serving(Generic[R]):
    """The steps ``serve`` adds (see the module docstring): ``before_models()`` and
    ``model(served_model, index)`` -> one checked run."""

    before_models: Callable[[], None]
    model: Callable[[ServedModel, int], R]


@dataclass(frozen=True)
class Checked(Generic[R]):
    """What the sequence found. ``advisories``: the lines describing the list in force
    (serial, date, age, origin); ``stale``: the ``warning[advisories_stale]`` text or
    ``None``; ``packages`` / ``kernels`` / ``listener``: ``appliance check``'s lines (empty
    for ``serve``); ``problems``: ``appliance check``'s refusals (rules, then listener);
    ``runs``: ``serving.model``'s results in model order; ``seconds``: wall time of step 5."""

    in_force: ListInForce
    advisories: list[str]
    stale: str | None
    seconds: float
    packages: list[str] = field(default_factory=list)
    kernels: str | None = None
    listener: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    runs: list[R] = field(default_factory=list)


def check_listener(policy: Policy, host: str, strict: bool = True,
                   ) -> tuple[list[str], list[Problem]]:
    """Step 1, the gateway listener on ``host``: ``strict`` raises the first refusal
    (``PolicyError`` ``plaintext_not_allowed``, ``TlsError``) and returns ``([], [])``;
    otherwise ``appliance check``'s lines and problems (:func:`.tls_files.describe_tls`)."""
    gw = policy.gateway
    if strict:
        require_tls_for_host(host, gw.tls, gw.allow_plaintext)
        if gw.tls is not None:
            inspect_tls(gw.tls)
        return [], []
    lines, found = describe_tls(host, gw.tls, gw.allow_plaintext)
    return lines, [Problem(code, "gateway", message, "gateway listener", fix)
                   for code, message, fix in found]


def run_sequence(policy: Policy, models: Sequence[ServedModel], host: str | None,
                 serving: Serving[R] | None = None) -> Checked[R]:
    """Run the sequence for ``policy`` and its ``models`` (``appliance check``: the
    ``[[models]]`` entries, or none) with the listener on ``host``. Raises the first
    ``ApplianceError`` with ``serving``; otherwise see the module docstring."""
    listener: tuple[list[str], list[Problem]] = ([], [])
    if host is not None:
        listener = check_listener(policy, host, strict=serving is not None)
    if serving is not None:
        serving.before_models()
    check_host(tuple(models))
    runs = [serving.model(model, index) for index, model in enumerate(models)] \
        if serving is not None else []
    t0 = time.monotonic()
    pre = policy.preflight
    in_force = in_force_of(policy)  # packaged advisories.json, or a newer signed feed
    problems = run_preflight(in_force, pre.packages)
    if serving is not None and problems:
        raise preflight_error(problems)
    lines, stale = describe(in_force, pre.advisories_max_age_days)
    seconds = time.monotonic() - t0
    if serving is not None:
        return Checked(in_force, lines, stale, seconds, runs=runs)
    kernels, _ = check_kernels(pre.packages)  # probed once: the rule above reused it
    return Checked(in_force, lines, stale, seconds,
                   packages=describe_packages(floors(list(in_force.advisories.advisories)),
                                              pre.packages),
                   kernels=kernels.render() if kernels is not None else None,
                   listener=listener[0], problems=problems + listener[1])
