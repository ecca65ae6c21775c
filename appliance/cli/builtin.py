"""``appliance prepare`` and ``appliance demo``: the built-in model (:mod:`appliance.builtin`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from appliance.cli._common import default_policy


def _cmd_prepare(args: argparse.Namespace) -> int:
    from appliance.builtin.model import prepare

    model = prepare()
    print(f"model_dir={model.model_dir}")
    print(f"public_key={model.public_key}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from appliance.engine.stopping import install

    install(hup_stops=True)  # first: a stop signal in any phase ends the demo (and engine)
    from appliance.builtin.demo import run_demo

    return run_demo(policy_path=args.policy, port=args.port, once=args.once)


def register(sub: Any) -> None:
    """Add ``prepare`` and ``demo`` to the ``appliance`` subparsers."""
    p = sub.add_parser("prepare", help="build the signed built-in model (cached)")
    p.set_defaults(func=_cmd_prepare)

    p = sub.add_parser("demo", help="run the whole spine on the built-in model")
    p.add_argument("--policy", type=Path, default=default_policy("cpu-demo.toml"),
                   help="policy TOML (default policies/cpu-demo.toml)")
    p.add_argument("--port", type=int, default=0, help="gateway port (0: pick a free one)")
    p.add_argument("--once", action="store_true", help="exit after the first tool call")
    p.set_defaults(func=_cmd_demo)
