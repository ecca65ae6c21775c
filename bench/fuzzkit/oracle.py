"""Run one generated case through the scanner as a user would (a file on disk,
``scanner.api.scan_target``) and classify the outcome against the three oracles:

- ``crash``: ``scan_target`` raised, gave no verdict, or reported
  ``scanner.internal_error`` (a crash the scanner caught is still a bug to fix);
- ``hang``: the scan ran past the per-file limit (``Limits.seconds_per_target``; a
  watchdog interrupts it at ``WATCHDOG`` times the limit), or the scanner's own deadline
  fired on the case (a small input that needs the whole per-file budget is a hang too);
- ``missed``: the verdict is ``clean`` but the independent reference
  (``fuzzkit.reference.would_run``) says the loader picked by the file's name would still
  run code from it.
- ``known``: a ``missed`` case of the one gap this tree is known to have, while its canary
  (``TEXT_PICKLE_CANARY``) still scans clean: a text-looking pickle (protocol 0-1 ops are
  printable) in a file ``torch.load`` reads by name (``pytorch_model.bin``) is judged as
  text. Issue 30's loader-aware verdicts close it; once the canary is refused, such cases
  count as ``missed`` again.

Nothing from a case is ever unpickled, imported or executed.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from types import FrameType

from scanner.api import scan_target
from scanner.core.context import Limits
from scanner.core.model import Verdict

from .reference import would_run

WATCHDOG = 3.0  # the alarm fires at this multiple of the per-file limit (plus 1 s)
KINDS = ("ok", "crash", "hang", "missed", "known")
PICKLE_LOADER_NAMES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".joblib")


@dataclass(frozen=True)
class Case:
    """One input: the file's base name (the loader is picked by it), its bytes, and the
    seed it was made from (``"gen:..."`` for generated, ``"mal:..."`` for a malicious
    seed, ``"ok:..."`` for a benign one)."""

    name: str
    data: bytes
    seed: str


TEXT_PICKLE_CANARY = Case("pytorch_model.bin", b"(0cos\nsystem\n(S'echo canary'\ntR.",
                          "canary")


@dataclass(frozen=True)
class Outcome:
    kind: str  # one of KINDS
    detail: str
    verdict: str | None
    seconds: float


_CANARY: dict[str, bool] = {}


def text_pickle_gap(workdir: str) -> bool:
    """True while the scanner calls ``TEXT_PICKLE_CANARY`` clean (checked once)."""
    if "open" not in _CANARY:
        path = os.path.join(workdir, TEXT_PICKLE_CANARY.name)
        with open(path, "wb") as handle:
            handle.write(TEXT_PICKLE_CANARY.data)
        try:
            _CANARY["open"] = scan_target(path).verdict is Verdict.CLEAN
        finally:
            os.unlink(path)
    return _CANARY["open"]


def _text_pickle(case: Case) -> bool:
    if not case.name.lower().endswith(PICKLE_LOADER_NAMES):
        return False
    try:
        case.data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class _Watchdog(Exception):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _Watchdog


def run_case(case: Case, workdir: str, limits: Limits, judge: bool = True) -> Outcome:
    """Write ``case`` to ``workdir/<name>``, scan it and classify the result (``judge``
    False: crash and hang oracles only). Uses SIGALRM as a watchdog when called from the
    main thread."""
    path = os.path.join(workdir, case.name)
    with open(path, "wb") as handle:
        handle.write(case.data)
    watch = limits.seconds_per_target * WATCHDOG + 1.0
    armed = False
    try:
        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, watch)
        armed = True
    except ValueError:  # not the main thread: no watchdog
        previous = None
    started = time.monotonic()
    try:
        result = scan_target(path, limits)
    except _Watchdog:
        return Outcome("hang", f"still scanning after {watch:.1f} s (watchdog)", None,
                       time.monotonic() - started)
    except BaseException as exc:  # noqa: BLE001 - scan_target must never raise
        return Outcome("crash", f"raised {type(exc).__name__}: {exc}"[:500], None,
                       time.monotonic() - started)
    finally:
        if armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        os.unlink(path)
    seconds = time.monotonic() - started
    verdict = None if result.verdict is None else result.verdict.name.lower()
    internal = [f for f in result.findings if f.rule_id == "scanner.internal_error"]
    if result.verdict is None or internal:
        detail = internal[0].evidence if internal else (result.error or "no verdict")
        return Outcome("crash", detail, verdict, seconds)
    deadline = [f for f in result.findings if f.rule_id == "scanner.limit_exceeded"
                and f.evidence == "seconds_per_target"]
    if deadline or seconds > limits.seconds_per_target:
        return Outcome("hang", f"{seconds:.2f} s (per-file limit "
                       f"{limits.seconds_per_target} s)", verdict, seconds)
    if judge and result.verdict is Verdict.CLEAN:
        reason = would_run(case.name, case.data)
        if reason is not None:
            kind = "known" if _text_pickle(case) and text_pickle_gap(workdir) else "missed"
            return Outcome(kind, f"clean, but a loader would run {reason}", verdict, seconds)
    return Outcome("ok", "", verdict, seconds)
