"""``appliance scan``: the scanner's own command line (:mod:`scanner.cli`), unchanged."""

from __future__ import annotations

import argparse
from typing import Any


def _cmd_scan(args: argparse.Namespace) -> int:
    from scanner import cli as scan_cli

    return scan_cli.run(args)


def register(sub: Any) -> None:
    """Add ``scan`` to the ``appliance`` subparsers."""
    from scanner import cli as scan_cli

    p = sub.add_parser("scan", help="scan model files/folders without executing them")
    scan_cli.add_scan_arguments(p)
    p.set_defaults(func=_cmd_scan)
