"""``appliance check``: the advisory list in force (serial, date, age, origin; a warning past
``[preflight] advisories_max_age_days``), preflight (package floors, environment) and the
gateway listener's TLS view, without starting anything. Exit 0 ok, 1 refused (each problem an
``error[code]``). The checks are :func:`appliance.preflight.sequence.run_sequence`, the
sequence ``serve`` runs too; this module only prints what it found."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.cli._common import default_policy

if TYPE_CHECKING:
    from appliance.config.models import ServedModel
    from appliance.config.policy import Policy


def _cmd_check(args: argparse.Namespace) -> int:
    from appliance.config.policy import load_policy
    from appliance.preflight.sequence import Checked, run_sequence

    policy = load_policy(args.policy)
    print(f"policy: {policy.source} (sha256 {policy.sha256[:16]}...)")
    models = _print_models(policy)
    checked: Checked[None] = run_sequence(policy, models, policy.gateway.host)  # as serve
    print("\n".join(checked.advisories))
    for line in checked.packages:
        print(f"  {line}")
    if checked.kernels is not None:
        print(f"  {checked.kernels}")
    for line in checked.listener:  # the gateway listener's TLS view
        print(f"  {line}")
    if checked.stale:
        print(checked.stale, file=sys.stderr)
    for problem in checked.problems:
        print(problem.render(), file=sys.stderr)
    if checked.problems:
        return 1
    print("preflight: ok")
    return 0


def _print_models(policy: Policy) -> tuple[ServedModel, ...]:
    """``[[models]]``: one line per model (name, source, its engine's resources); returns
    them for the sequence's host check (``models_over_host``, an error as at serve time)."""
    from appliance.config.models import served_models
    from appliance.store import is_store_ref

    if not policy.models:
        return ()
    models = served_models(policy, None, is_store_ref)
    for model in models:
        engine = model.engine
        where = (f"cores {engine.cpu.omp_threads_bind}, KV cache "
                 f"{engine.cpu.kvcache_space_gib} GiB" if engine.device == "cpu" else
                 f"GPUs {list(engine.gpu.devices) if engine.gpu.devices else 'all'}")
        print(f"  model {model.served_name}: {model.source} ({engine.device}, {where}, "
              f"max_model_len {engine.max_model_len})")
    return models


def register(sub: Any) -> None:
    """Add ``check`` to the ``appliance`` subparsers."""
    p = sub.add_parser("check", help="preflight: package floors, environment, gateway TLS")
    p.add_argument("--policy", type=Path, default=default_policy("default.toml"),
                   help="policy TOML (default policies/default.toml)")
    p.set_defaults(func=_cmd_check)
