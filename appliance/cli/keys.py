"""``appliance keys add|list|revoke`` (named API keys, :mod:`appliance.config.keys`)."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from appliance.config.keys import KeyLimits, add_key, describe, load_keys, revoke_key
from appliance.errors import ApplianceError


def _expiry(args: argparse.Namespace) -> dt.datetime | None:
    if args.expires is not None:
        try:
            when = dt.datetime.fromisoformat(args.expires)
        except ValueError:
            raise ApplianceError(f"--expires {args.expires!r} is not an ISO date/time",
                                 code="usage", fix="e.g. --expires 2027-01-01T00:00:00Z"
                                 ) from None
        return when if when.tzinfo else when.replace(tzinfo=dt.UTC)
    if args.days is not None:
        return (dt.datetime.now(dt.UTC) + dt.timedelta(days=args.days)).replace(microsecond=0)
    return None


def _cmd_add(args: argparse.Namespace) -> int:
    models = tuple(m.strip() for m in args.models.split(",") if m.strip()) \
        if args.models is not None else None
    sources = tuple(m.strip() for m in args.sources.split(",") if m.strip()) \
        if args.sources is not None else None
    try:
        limits = KeyLimits(rpm=args.rpm, tpm=args.tpm, concurrent=args.concurrent,
                           max_tokens=args.max_tokens, models=models,
                           tokens_per_day=args.tokens_per_day,
                           tokens_per_month=args.tokens_per_month, allowed_sources=sources)
    except ValidationError as exc:
        first = exc.errors()[0]
        option = {"allowed_sources": "sources"}.get(str(first["loc"][0]), str(first["loc"][0]))
        raise ApplianceError(f"--{option.replace('_', '-')}: {first['msg']}",
                             code="usage", fix="e.g. --sources 10.0.0.0/8,2001:db8::/32"
                             ) from None
    plain = add_key(args.file, args.id, limits, _expiry(args))
    print(plain)
    print(f"added key {args.id!r} to {args.file}; the key above is shown once and not "
          "stored (only its SHA-256). Send SIGHUP to a running appliance to load it.",
          file=sys.stderr)
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    for record in load_keys(args.file).keys:
        print(describe(record))
    return 0


def _cmd_revoke(args: argparse.Namespace) -> int:
    revoke_key(args.file, args.id)
    print(f"revoked key {args.id!r} in {args.file}; send SIGHUP to a running appliance",
          file=sys.stderr)
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def register(sub: Any) -> None:
    """Register ``keys`` and its subcommands on the CLI's subparsers object."""
    keys = sub.add_parser("keys", help="manage named API keys (keys file)")
    actions = keys.add_subparsers(dest="keys_command", required=True)
    for name, func, text in (("add", _cmd_add, "create a key; prints it once"),
                             ("list", _cmd_list, "list key ids, digests, expiry, limits"),
                             ("revoke", _cmd_revoke, "remove a key")):
        p = actions.add_parser(name, help=text)
        p.add_argument("--file", type=Path, required=True, help="keys file (JSON, 0600)")
        if name != "list":
            p.add_argument("--id", required=True, help="key id ([A-Za-z0-9._-]{1,64})")
        if name == "add":
            p.add_argument("--rpm", type=_positive, help="requests per minute")
            p.add_argument("--tpm", type=_positive, help="tokens per minute")
            p.add_argument("--concurrent", type=_positive, help="requests in flight")
            p.add_argument("--max-tokens", type=_positive, help="cap on max_tokens")
            p.add_argument("--models", help="served model names the key may use, comma-"
                           "separated (default: all)")
            p.add_argument("--sources", help="source networks (CIDR, IPv4/IPv6) the key "
                           "may call from, comma-separated (default: any)")
            p.add_argument("--tokens-per-day", type=_positive, help="daily token quota (UTC)")
            p.add_argument("--tokens-per-month", type=_positive,
                           help="monthly token quota (UTC calendar month)")
            when = p.add_mutually_exclusive_group()
            when.add_argument("--expires", help="ISO date/time (UTC if no zone)")
            when.add_argument("--days", type=_positive, help="expires after N days")
        p.set_defaults(func=func, parser=p)
