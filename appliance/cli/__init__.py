"""The ``appliance`` command line: one module per command group, registered in one list.

``main(argv) -> int`` (the ``appliance`` entry point, also ``python -m appliance.cli``);
``build_parser()`` builds the parser from :data:`COMMANDS`, in order: each entry is a module
with ``register(sub)``, which adds its subcommands to the top-level subparsers and sets
``func`` (``args -> exit status``) on each. A new command group is one module here plus one
line in :data:`COMMANDS`; ``tests/appliance/test_appliance_layout.py`` holds the list complete.

May import every layer below it (config, preflight, engine, gateway, builtin, toolbench, the
spine :mod:`appliance.serve`, scanner), lazily inside the command functions so that
``appliance --help`` stays fast; nothing imports the CLI.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType

from appliance import __version__
from appliance.cli import (
    advisories,
    audit,
    builtin,
    check,
    cluster,
    convert,
    keys,
    scan,
    serve,
    signing,
    store,
)
from appliance.cli.check import _listener_problems
from appliance.engine.stopping import Stopped
from appliance.errors import ApplianceError
from appliance.toolbench import cli as bench

__all__ = ["COMMANDS", "DESCRIPTION", "_listener_problems", "build_parser", "main"]

DESCRIPTION = (
    "``appliance`` command line. ``main(argv) -> int``; exit 0 ok/clean, 1 refused/not clean,\n"
    "2 usage error or no verdict. Errors print ``error[<code>]`` diagnostics, never a traceback.")

# The command groups, in the order ``appliance --help`` lists them.
COMMANDS: tuple[ModuleType, ...] = (scan, signing, check, serve, cluster, store, builtin, keys,
                                     bench, audit, convert, advisories)


def build_parser() -> argparse.ArgumentParser:
    from scanner import cli as scan_cli

    parser = scan_cli.ArgumentParser(prog="appliance", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"appliance {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    for command_parser in sub.choices.values():  # so main() can report errors with its usage
        command_parser.set_defaults(parser=command_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # name the subcommand whose options were wrong, not the top-level usage
        args.parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return int(args.func(args))
    except ApplianceError as exc:
        print(exc.diagnostics(), file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        return 130
    except Stopped as exc:  # serve/demo: a stop signal, everything started already stopped
        print(f"appliance: {exc}; exit status {exc.exit_status}", file=sys.stderr)
        return exc.exit_status
