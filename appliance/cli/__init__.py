"""The ``appliance`` command line: one module per command group, registered in one table.

``main(argv) -> int`` (the ``appliance`` entry point, also ``python -m appliance.cli``);
``build_parser(argv=None)`` builds the parser from :data:`GROUPS`, in order: each entry
names a module with ``register(sub)``, which adds its subcommands to the top-level
subparsers and sets ``func`` (``args -> exit status``) on each, and the top-level command
names it registers. A new command group is one module here plus one line in
:data:`GROUPS`; ``tests/test_appliance_layout.py`` holds the table complete and
its names true.

Command groups load lazily: when ``argv`` names a command (``appliance scan DIR``), only
that command's group is imported and registered, so a scan pays for the scanner and not
for pydantic, the policy models, API keys or numpy (issue 30: ~0.13 s of imports before
any file was read). Without a command (``appliance --help``, a typo, no arguments) every
group is registered, so help, usage and "invalid choice" errors list every command as
before. :data:`COMMANDS` (every group module, imported) stays available for callers that
want the modules.

May import every layer below it (config, preflight, engine, gateway, builtin, toolbench, the
spine :mod:`appliance.serve`, scanner), lazily inside the command functions so that
``appliance --help`` stays fast; nothing imports the CLI.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any, NamedTuple

from appliance import __version__

# The collector is off while these import (the scanner's model and diagnostics among them:
# ~20 ms, 11 collections, 1.7 ms of them, before ``main`` can pause it for a scan); they
# make no reference cycles. It is on again after them only if it was on before.
_COLLECTING = gc.isenabled()
gc.disable()
try:
    from appliance.engine.stopping import SIGNALS, Stopped
    from appliance.errors import ApplianceError
finally:
    if _COLLECTING:
        gc.enable()

__all__ = ["COMMANDS", "DESCRIPTION", "GROUPS", "build_parser", "main"]

DESCRIPTION = (
    "``appliance`` command line. ``main(argv) -> int``; exit 0 ok/clean, 1 refused/not clean,\n"
    "2 usage error or no verdict. Errors print ``error[<code>]`` diagnostics, never a traceback.")


class Group(NamedTuple):
    """A command group: its module (with ``register(sub)``) and the top-level command
    names that ``register`` adds."""

    module: str
    commands: tuple[str, ...]


# The command groups, in the order ``appliance --help`` lists them.
GROUPS: tuple[Group, ...] = (
    Group("appliance.cli.scan", ("scan",)),
    Group("appliance.cli.signing", ("keygen", "sign", "verify")),
    Group("appliance.cli.check", ("check",)),
    Group("appliance.cli.serve", ("serve",)),
    Group("appliance.cli.cluster", ("cluster-firewall",)),
    Group("appliance.cli.store", ("import", "models")),
    Group("appliance.cli.builtin", ("prepare", "demo")),
    Group("appliance.cli.keys", ("keys",)),
    Group("appliance.toolbench.cli", ("bench",)),
    Group("appliance.cli.audit", ("audit",)),
    Group("appliance.cli.convert", ("convert",)),
    Group("appliance.cli.advisories", ("advisories",)),
)
_BY_COMMAND: dict[str, Group] = {name: g for g in GROUPS for name in g.commands}


def __getattr__(name: str) -> Any:
    """``COMMANDS`` (every group module, imported now), loaded on first use (PEP 562)."""
    if name == "COMMANDS":
        return tuple(importlib.import_module(g.module) for g in GROUPS)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _command(argv: Sequence[str]) -> Group | None:
    """The group of the command ``argv`` names: its first argument that is not an option
    (the top-level parser has only ``-h`` and ``--version``, which take no value)."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return _BY_COMMAND.get(arg)
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``appliance`` parser: every group, or only the group of the command ``argv``
    names (see the module docstring); parsing ``argv`` with it behaves the same."""
    from scanner import cli as scan_cli

    parser = scan_cli.ArgumentParser(prog="appliance", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"appliance {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    only = _command(argv) if argv is not None else None
    for group in (only,) if only is not None else GROUPS:
        module: ModuleType = importlib.import_module(group.module)
        module.register(sub)
    for command_parser in sub.choices.values():  # so main() can report errors with its usage
        command_parser.set_defaults(parser=command_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` names (``None``: this process's own arguments) and return
    its exit status.

    ``appliance scan`` run as the process's command (``argv`` ``None``) is tuned like
    ``python -m scanner`` (see ``scanner/__main__.py``): the cyclic collector is off while
    the scanner imports, the import-time objects are then frozen out of collections, the
    standard-library modules picklescan imports but a scan never uses are deferred
    (``scanner.cli.defer_unused_imports``), and the process leaves through ``os._exit``
    once its output is flushed (interpreter teardown of a fleet scan's findings does
    nothing this process needs). Called with an ``argv`` (tests, embedding), nothing of
    that happens.
    """
    fast = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    fast = fast and _command(argv) is _BY_COMMAND["scan"]
    if fast:
        gc.disable()
        from scanner.cli import defer_unused_imports

        defer_unused_imports()  # as python -m scanner does (http: an enum of ~60 members)
    try:
        parser = build_parser(argv)
    finally:
        if fast:
            gc.freeze()
            gc.enable()
    args, extra = parser.parse_known_args(argv)
    if extra:  # name the subcommand whose options were wrong, not the top-level usage
        args.parser.error(f"unrecognized arguments: {' '.join(extra)}")
    code = _run(args)
    if fast:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):  # a closed or broken stream: the normal exit reports it
            return code
        os._exit(code)
    return code


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args))
    except ApplianceError as exc:
        print(exc.diagnostics(), file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        return 130
    except Stopped as exc:  # serve/demo: a stop signal, everything started already stopped
        SIGNALS.caught(exc)
        print(f"appliance: {exc}; exit status {exc.exit_status}", file=sys.stderr)
        return exc.exit_status
