"""``appliance advisories export|import|show``: the signed advisory feed on the command line
(:mod:`appliance.advisory_feed`), and the lines ``appliance check`` prints about the list in
force. ``register(subparsers)`` adds the commands (one line in ``appliance/cli.py``).

- ``export --private-key K [--serial N] [--date ISO] [--list FILE] OUT``: sign the packaged
  list (or ``--list``) as a feed with a higher serial; prints serial, date and count.
- ``import [--policy P] FILE``: verify against the policy's ``[trust]`` keys and install it
  at ``[preflight] advisory_feed``; exit 1 with ``error[feed_*]`` when refused.
- ``show [--policy P]``: the list in force, its serial, age and origin.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.errors import ApplianceError

if TYPE_CHECKING:
    from appliance.advisory_feed import ListInForce
    from appliance.policy import Policy


def _default_policy() -> Path:
    from appliance.resources import policy_path

    return policy_path("default.toml")


def in_force_of(policy: Policy, now: dt.datetime | None = None) -> ListInForce:
    """The advisory list ``policy`` puts in force (packaged, or a newer installed feed)."""
    from appliance.advisory_feed import list_in_force

    return list_in_force(policy.preflight.advisories, policy.preflight.advisory_feed,
                         policy.trust.store(), now)


def describe(in_force: ListInForce, max_age_days: int, now: dt.datetime | None = None,
             ) -> tuple[list[str], str | None]:
    """Lines for ``appliance check`` (serial, date, age, origin, mitigated open advisories)
    and the ``warning[advisories_stale]`` text when the list is older than
    ``max_age_days`` (else ``None``)."""
    adv = in_force.advisories
    age = adv.age_days(now)
    lines = [f"advisories: serial {adv.serial}, dated {adv.date.date().isoformat()} "
             f"({age:.1f} days old), {len(adv.advisories)} entries, {in_force.origin}"]
    if in_force.superseded:
        lines.append("  (an installed feed is not newer than the packaged list: not used)")
    open_ones = [a for a in adv.advisories if a.fixed is None and a.mitigation]
    if open_ones:
        lines.append(f"  {len(open_ones)} advisories without a fixed version, mitigated: "
                     + "; ".join(f"{a.id} ({', '.join(m.describe() for m in a.mitigation)})"
                                 for a in open_ones[:4])
                     + (f"; and {len(open_ones) - 4} more" if len(open_ones) > 4 else ""))
    warning = None
    if age > max_age_days:
        warning = (f"warning[advisories_stale]: the advisory list in force (serial "
                   f"{adv.serial}) is {age:.0f} days old, more than [preflight] "
                   f"advisories_max_age_days = {max_age_days}\n"
                   "  fix: import a newer signed feed (`appliance advisories import FILE`) "
                   "or install a newer release")
    return lines, warning


def _cmd_export(args: argparse.Namespace) -> int:
    from appliance.advisory_feed import export_feed
    from appliance.cli_store import read_passphrase
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
    from appliance.advisory_feed import import_feed
    from appliance.policy import load_policy

    policy = load_policy(args.policy)
    feed = import_feed(args.file, policy.preflight.advisories, policy.preflight.advisory_feed,
                       policy.trust.store())
    adv = feed.advisories
    print(f"installed {feed.path}: advisory feed serial {adv.serial}, dated "
          f"{adv.date.isoformat()}, {len(adv.advisories)} advisories, signed by "
          f"'{feed.signer.name}' (fingerprint {feed.signer.fingerprint[:16]}...)")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from appliance.policy import load_policy
    from appliance.preflight import feed_problems

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


def register(sub: Any) -> None:
    """Add ``advisories export|import|show`` to the ``appliance`` subparsers ``sub``."""
    from appliance import cli_store

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
    cli_store.add_passphrase_args(p, "decrypt")
    p.set_defaults(func=_cmd_export)

    p = commands.add_parser("import", help="verify a feed and install it for preflight")
    p.add_argument("file", type=Path, help="feed file written by `advisories export`")
    p.add_argument("--policy", type=Path, default=_default_policy(),
                   help="policy TOML whose [trust] keys decide and whose [preflight] "
                        "advisory_feed is written (default policies/default.toml)")
    p.set_defaults(func=_cmd_import)

    p = commands.add_parser("show", help="the advisory list in force: serial, age, origin")
    p.add_argument("--policy", type=Path, default=_default_policy(),
                   help="policy TOML (default policies/default.toml)")
    p.set_defaults(func=_cmd_show)
    for command in (group, *commands.choices.values()):
        command.set_defaults(parser=command)
