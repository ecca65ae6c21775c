"""``appliance advisories export|import|show``: the signed advisory feed on the command line
(:mod:`appliance.preflight.feed`; the lines about the list in force come from
:mod:`appliance.preflight.in_force`). ``register(sub)`` adds the commands (one entry in
:data:`appliance.cli.COMMANDS`).

- ``export --private-key K [--serial N] [--date ISO] [--list FILE] OUT``: sign the packaged
  list (or ``--list``) as a feed with a higher serial; prints serial, date and count.
- ``import [--policy P] FILE``: verify against the policy's ``[trust]`` keys and install it
  at ``[preflight] advisory_feed``; exit 1 with ``error[feed_*]`` when refused.
- ``show [--policy P]``: the list in force, its serial, age and origin.
- ``reset-floor [--policy P]``: the deliberate reset of the rollback floor (the highest feed
  serial ever installed) to the serial of the list in force now; run as root after removing
  a feed on purpose (``docs/deployment.md#advisory-floor``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path
from typing import Any

from appliance.cli._common import default_policy
from appliance.cli.store import add_passphrase_args, read_passphrase
from appliance.errors import ApplianceError


def _cmd_export(args: argparse.Namespace) -> int:
    from appliance.preflight.feed import export_feed
    from appliance.resources import policy_path

    source = args.list or policy_path("advisories.json")
    date = None
    if args.date is not None:
        try:
            date = dt.datetime.fromisoformat(args.date)
        except ValueError:
            raise ApplianceError(f"--date {args.date!r} is not an ISO 8601 date-time",
                                 code="usage", where="--date",
                                 fix="pass e.g. 2026-12-03T00:00:00Z") from None
        if date.utcoffset() is None:
            date = date.replace(tzinfo=dt.UTC)
    signed = export_feed(source, args.private_key, args.out, args.serial, date,
                         read_passphrase(args))
    print(f"wrote {args.out}: advisory feed serial {signed.serial}, dated "
          f"{signed.date.isoformat()}, {len(signed.advisories)} advisories (from {source})")
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    from appliance.config.policy import load_policy
    from appliance.preflight.feed import import_feed

    policy = load_policy(args.policy)
    feed = import_feed(args.file, policy.preflight.advisories, policy.preflight.advisory_feed,
                       policy.trust.store())
    adv = feed.advisories
    print(f"installed {feed.path}: advisory feed serial {adv.serial}, dated "
          f"{adv.date.isoformat()}, {len(adv.advisories)} advisories, signed by "
          f"'{feed.signer.name}' (fingerprint {feed.signer.fingerprint[:16]}...)")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from appliance.config.policy import load_policy
    from appliance.preflight.in_force import describe, feed_problems, in_force_of

    policy = load_policy(args.policy)
    in_force = in_force_of(policy)
    lines, warning = describe(in_force, policy.preflight.advisories_max_age_days)
    print("\n".join(lines))
    problems = feed_problems(in_force)
    for problem in problems:
        print(problem.render(), file=sys.stderr)
    if warning:
        print(warning, file=sys.stderr)
    return 1 if problems else 0


def _cmd_reset_floor(args: argparse.Namespace) -> int:
    from appliance.config.policy import load_policy
    from appliance.preflight.feed import reset_floor

    policy = load_policy(args.policy)
    old, new = reset_floor(policy.preflight.advisories, policy.preflight.advisory_feed,
                           policy.trust.store())
    print(f"advisory floor of {policy.preflight.advisory_feed}: "
          f"{old if old is not None else 'none'} -> {new} (the serial of the list in force)")
    return 0


def register(sub: Any) -> None:
    """Add ``advisories export|import|show`` to the ``appliance`` subparsers ``sub``."""
    group = sub.add_parser("advisories", help="signed advisory feed: export, import, show")
    commands = group.add_subparsers(dest="advisories_command", required=True)

    p = commands.add_parser("export", help="sign the advisory list as a feed (connected side)")
    p.add_argument("out", type=Path, help="feed file to write (replaced atomically)")
    p.add_argument("--private-key", type=Path, required=True, help="publisher's PEM key")
    p.add_argument("--serial", type=int, default=None,
                   help="feed serial, YYYYMMDDNN, above the list's (default: the current UTC "
                        "hour as YYYYMMDDHH, or the list's serial + 1)")
    p.add_argument("--date", default=None, help="list date, ISO 8601 (default: now, UTC)")
    p.add_argument("--list", type=Path, default=None,
                   help="advisory list to sign (default: the packaged advisories.json)")
    add_passphrase_args(p, "decrypt")
    p.set_defaults(func=_cmd_export)

    p = commands.add_parser("import", help="verify a feed and install it for preflight")
    p.add_argument("file", type=Path, help="feed file written by `advisories export`")
    p.add_argument("--policy", type=Path, default=default_policy("default.toml"),
                   help="policy TOML whose [trust] keys decide and whose [preflight] "
                        "advisory_feed is written (default policies/default.toml)")
    p.set_defaults(func=_cmd_import)

    p = commands.add_parser("show", help="the advisory list in force: serial, age, origin")
    p.add_argument("--policy", type=Path, default=default_policy("default.toml"),
                   help="policy TOML (default policies/default.toml)")
    p.set_defaults(func=_cmd_show)

    p = commands.add_parser("reset-floor", help="deliberately reset the rollback floor to "
                                                "the serial of the list in force (root)")
    p.add_argument("--policy", type=Path, default=default_policy("default.toml"),
                   help="policy TOML (default policies/default.toml)")
    p.set_defaults(func=_cmd_reset_floor)
    for command in (group, *commands.choices.values()):
        command.set_defaults(parser=command)
