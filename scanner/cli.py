"""Command line: ``python -m scanner PATH...`` (and ``appliance scan``, which reuses
``add_scan_arguments`` and ``run``).

Machine output (the report in ``--format``) goes to stdout or ``--output``; everything for
humans (summary, progress, errors) goes to stderr, and the progress display only when
stderr is a terminal. Exit codes: 0 every target clean; 1 some target not clean
(policy, malformed or malicious); 2 no verdict (usage error, nothing scanned, a missing
path, or an internal error). Errors are :class:`~scanner.diagnostic.Diagnostic` lines with
a code from :data:`CLI_CODES`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from typing import NoReturn

from scanner import __version__
from scanner.api import ProgressHook, ScanProgress, ScanReport, scan_paths
from scanner.core.context import Limits
from scanner.core.diagnostic import CodeRegistry, Diagnostic
from scanner.core.lazy import defer
from scanner.report import FORMATS, render, summary_line, write_json
from scanner.report._text import safe
from scanner.scan.dispatch import load_all_rules
from scanner.scan.parallel import default_jobs

EXIT_CLEAN, EXIT_FINDINGS, EXIT_NO_VERDICT = 0, 1, 2

CLI_CODES = CodeRegistry("scanner CLI", {
    "usage": "the command line is malformed (unknown option, bad value)",
    "no_path": "no PATH given: nothing to scan",
    "no_verdict": "a target could not be scanned (missing path, nothing to scan in it)",
    "output_unwritable": "the --output file cannot be written",
    "internal_error": "the scan crashed before giving a verdict (a bug: report it)",
})
"""Codes of the scanner CLI's own errors (exit status 2); findings use rule ids instead."""


def _report(diagnostic: Diagnostic) -> None:
    print(diagnostic.render(), file=sys.stderr)


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose usage errors follow the diagnostics format:
    usage, then ``error[usage]: message`` and a ``fix:`` line, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        usage = Diagnostic("usage", message, fix=f"see '{self.prog} --help'")
        self.exit(EXIT_NO_VERDICT, usage.render() + "\n")


def add_scan_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the scan options to ``parser`` (positional ``PATH...`` plus flags)."""
    parser.add_argument("paths", nargs="*", metavar="PATH",
                        help="model file or folder to scan (each is its own target)")
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="report format on stdout / --output (default: text)")
    parser.add_argument("--output", "-o", metavar="FILE",
                        help="write the report to FILE instead of stdout")
    parser.add_argument("--deep", action="store_true",
                        help="also read tensor data and storage members (slower)")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress display on stderr")
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="no progress and no summary on stderr (errors still shown)")
    parser.add_argument("--jobs", "-j", type=int, default=0, metavar="N",
                        help="processes for folders of 512+ files (default: the CPUs "
                             "idle at start; 1 = sequential)")
    parser.add_argument("--list-rules", action="store_true",
                        help="print every rule id (markdown table, or JSON with "
                             "--format json) and exit")


def _rules_output(fmt: str) -> str:
    rules = sorted(load_all_rules().values(), key=lambda r: r.id)
    if fmt == "text":
        rows = ["| Rule id | Verdict | Severity | Meaning |", "|---|---|---|---|"]
        rows += [f"| `{r.id}` | {r.verdict.label} | {r.severity.label} | "
                 f"{r.title.replace('|', chr(92) + '|')} |" for r in rules]
        return "\n".join(rows) + "\n"
    return json.dumps([{"id": r.id, "verdict": r.verdict.label, "severity": r.severity.label,
                        "title": r.title, "fix": r.fix} for r in rules], indent=2) + "\n"


@contextlib.contextmanager
def _progress(enabled: bool) -> Iterator[ProgressHook | None]:
    """A rich progress display on stderr, or None when disabled or rich is missing."""
    if not enabled:
        yield None
        return
    try:
        from rich.console import Console
        from rich.markup import escape
        from rich.progress import Progress, SpinnerColumn, TextColumn
    except ImportError:
        yield None
        return
    display = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                       console=Console(stderr=True), transient=True)
    task = display.add_task("scanning", total=None)

    def hook(event: ScanProgress) -> None:
        size = f"{event.size / (1 << 20):.1f} MiB" if event.size >= 1 << 20 else f"{event.size} B"
        line = f"{event.index}: {safe(event.target)}: {safe(event.path)} ({size})"
        display.update(task, description=escape(line))

    with display:
        yield hook


def _stream_json(report: ScanReport) -> bool:
    """Write the JSON report to stdout's bytes in pieces (``write_json``: a fleet's report
    is ~2 MB, and building it whole cost three copies of fresh memory); False, writing
    nothing, where stdout has no byte stream (a caller's text buffer)."""
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:
        return False
    sys.stdout.flush()
    write_json(report, buffer.write)
    buffer.flush()
    return True


def _write(text: str, output: str | None) -> None:
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    with open(output, "w", encoding="utf-8") as handle:
        handle.write(text)


def run(args: argparse.Namespace) -> int:
    """Run a scan from parsed arguments; returns the exit code (never raises SystemExit)."""
    if args.list_rules:
        _write(_rules_output(args.format), args.output)
        return EXIT_CLEAN
    if not args.paths:
        _report(Diagnostic("no_path", "no PATH given; nothing to scan",
                           fix="name one or more model files or folders"))
        return EXIT_NO_VERDICT
    show_progress = not (args.quiet or args.no_progress) and sys.stderr.isatty()
    try:
        with _progress(show_progress) as hook:
            jobs = args.jobs if args.jobs > 0 else default_jobs()
            report = scan_paths(args.paths, Limits(deep=args.deep), hook, jobs)
        # JSON to stdout is streamed below; every other report is rendered whole first
        streamed = args.format == "json" and args.output is None
        text = "" if streamed else render(report, args.format)
    except Exception as exc:  # noqa: BLE001 - top-level failure: no verdict, no traceback
        _report(Diagnostic("internal_error", f"{type(exc).__name__}: {exc}",
                           fix="the scan gave no verdict; rerun it, and report the error "
                               "with the command line if it repeats"))
        return EXIT_NO_VERDICT
    try:
        if not (streamed and _stream_json(report)):
            _write(render(report, args.format) if streamed else text, args.output)
    except OSError as exc:
        _report(Diagnostic("output_unwritable",
                           f"cannot write the report: {exc.strerror or exc}", args.output,
                           "write it to a file in an existing folder you can write to"))
        return EXIT_NO_VERDICT
    except Exception as exc:  # noqa: BLE001 - failed while streaming: no verdict, no traceback
        _report(Diagnostic("internal_error", f"{type(exc).__name__}: {exc}",
                           fix="the report was cut short; rerun the scan, and report the "
                               "error with the command line if it repeats"))
        return EXIT_NO_VERDICT
    if not args.quiet and (args.output or args.format != "text"):
        print(summary_line(report), file=sys.stderr)
    for result in report.targets:
        if result.verdict is None:
            _report(Diagnostic("no_verdict", str(result.error), result.target,
                               "name an existing model file, or a folder that holds files"))
    return report.exit_code


def defer_unused_imports() -> None:
    """Defer the standard-library modules a scan's third-party analyzers import but never
    use (``http``, ``http.client``: picklescan's URL helpers; ``scanner.core.lazy``). Only
    for a single-threaded process that scans and exits: ``python -m scanner``, and
    ``appliance scan`` run as the process's command."""
    for name in ("http", "http.client"):
        defer(name)


def main(argv: list[str] | None = None) -> int:
    """``python -m scanner`` entry point; returns the exit code."""
    defer_unused_imports()
    parser = ArgumentParser(
        prog="python -m scanner",
        description="Scan model files and folders without loading them. Exit 0 clean, "
                    "1 findings (policy/malformed/malicious), 2 no verdict.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    add_scan_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else EXIT_NO_VERDICT
    return run(args)
