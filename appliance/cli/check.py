"""``appliance check``: the advisory list in force (serial, date, age, origin; a warning past
``[preflight] advisories_max_age_days``), preflight (package floors, environment) and the
gateway listener's TLS view, without starting anything. Exit 0 ok, 1 refused (each problem an
``error[code]``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.cli._common import default_policy

if TYPE_CHECKING:
    from appliance.config.policy import Policy
    from appliance.preflight import Problem


def _cmd_check(args: argparse.Namespace) -> int:
    from appliance.config.policy import load_policy
    from appliance.preflight import describe_packages, run_preflight
    from appliance.preflight.advisories import floors
    from appliance.preflight.in_force import describe, in_force_of
    from appliance.preflight.kernels import check_kernels

    policy = load_policy(args.policy)
    print(f"policy: {policy.source} (sha256 {policy.sha256[:16]}...)")
    _print_models(policy)
    in_force = in_force_of(policy)  # packaged advisories.json, or a newer signed feed
    lines, stale = describe(in_force, policy.preflight.advisories_max_age_days)
    print("\n".join(lines))
    pkg_floors = floors(list(in_force.advisories.advisories))
    for line in describe_packages(pkg_floors, policy.preflight.packages):
        print(f"  {line}")
    kernels, _ = check_kernels(policy.preflight.packages)  # probed once; preflight reuses it
    if kernels is not None:
        print(f"  {kernels.render()}")
    problems = run_preflight(in_force, policy.preflight.packages)
    problems += _listener_problems(policy)
    if stale:
        print(stale, file=sys.stderr)
    for problem in problems:
        print(problem.render(), file=sys.stderr)
    if problems:
        return 1
    print("preflight: ok")
    return 0


def _print_models(policy: Policy) -> None:
    """``[[models]]``: one line per model (name, source, its engine's resources), then the
    host check (``models_over_host``, raised as the error it is at serve time)."""
    from appliance.config.models import check_host, served_models
    from appliance.store import is_store_ref

    if not policy.models:
        return
    models = served_models(policy, None, is_store_ref)
    for model in models:
        engine = model.engine
        where = (f"cores {engine.cpu.omp_threads_bind}, KV cache "
                 f"{engine.cpu.kvcache_space_gib} GiB" if engine.device == "cpu" else
                 f"GPUs {list(engine.gpu.devices) if engine.gpu.devices else 'all'}")
        print(f"  model {model.served_name}: {model.source} ({engine.device}, {where}, "
              f"max_model_len {engine.max_model_len})")
    check_host(models)


def _listener_problems(policy: Policy) -> list[Problem]:
    """TLS / plaintext view of ``[gateway]`` for ``appliance check``
    (appliance.preflight.tls_files)."""
    from appliance.preflight import Problem
    from appliance.preflight.tls_files import describe_tls

    gw = policy.gateway
    lines, found = describe_tls(gw.host, gw.tls, gw.allow_plaintext)
    for line in lines:
        print(f"  {line}")
    return [Problem(code, "gateway", message, "gateway listener", fix)
            for code, message, fix in found]


def register(sub: Any) -> None:
    """Add ``check`` to the ``appliance`` subparsers."""
    p = sub.add_parser("check", help="preflight: package floors, environment, gateway TLS")
    p.add_argument("--policy", type=Path, default=default_policy("default.toml"),
                   help="policy TOML (default policies/default.toml)")
    p.set_defaults(func=_cmd_check)
