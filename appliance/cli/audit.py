"""``appliance audit verify FILE... --public-key K``: check an audit log's chain and signed
checkpoints (:mod:`appliance.audit`). Exit 0 intact, 1 broken or missing records (the first
finding printed as ``error[<code>]`` with ``at: FILE:LINE``), 2 usage error.

:func:`register` adds the command group (listed in :data:`appliance.cli.COMMANDS`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

FIXES = {
    "audit_unsigned": "configure [audit] signing_key so the gateway signs checkpoints, and "
                      "pass the matching public key",
    "audit_checkpoint_invalid": "pass the public key of the appliance's [audit] signing_key; "
                                "if it is the right key, the checkpoint was forged or edited",
}
DEFAULT_FIX = ("treat the log as tampered from this record on; restore it from the journald/"
               "syslog copy or a backup; rotated files must be given oldest first")


def _cmd_verify(args: argparse.Namespace) -> int:
    from appliance.audit import verify_files
    from appliance.audit.chain import public_key
    from appliance.audit.errors import AuditError

    key = public_key(args.public_key)
    try:
        report = verify_files(list(args.files), key)
    except OSError as exc:
        raise AuditError(f"cannot read the audit file: {exc.strerror}", code="audit_unreadable",
                         where=str(exc.filename), fix="pass readable files") from None
    problem = report.problem
    if problem is not None:
        seq = f" (seq {problem.seq})" if problem.seq is not None else ""
        raise AuditError(problem.message, code=problem.code,
                         where=f"{problem.file}:{problem.line}{seq}",
                         fix=FIXES.get(problem.code, DEFAULT_FIX))
    print(f"audit: intact: {report.records} records (seq {report.starts_at}.."
          f"{(report.starts_at or 0) + report.records - 1}), {report.checkpoints} signed "
          f"checkpoints verified, in {len(args.files)} file(s)")
    if report.starts_at:
        print(f"note: the chain starts at seq {report.starts_at}: older files were not given, "
              "so the first record's link is not checked")
    for file, line in report.restarts:
        print(f"warning: a new chain begins at {file}:{line} (the writer could not continue "
              "the previous one; records just before it may be lost)")
    if report.unsigned_tail:
        print(f"warning: the last {report.unsigned_tail} record(s) follow the last checkpoint: "
              "linked but not yet signed (cutting them off would not show)")
    return 0


def register(subparsers: Any) -> None:
    """Add ``audit verify`` to the ``appliance`` subcommands."""
    audit = subparsers.add_parser("audit", help="tamper-evident audit log tools")
    sub = audit.add_subparsers(dest="audit_command", required=True)
    p = sub.add_parser("verify", help="verify the audit chain and its signed checkpoints")
    p.add_argument("files", type=Path, nargs="+", metavar="FILE",
                   help="audit files, oldest first (e.g. audit.jsonl.1 audit.jsonl)")
    p.add_argument("--public-key", type=Path, required=True,
                   help="PEM public key of the appliance's [audit] signing_key")
    p.set_defaults(func=_cmd_verify, parser=p)
