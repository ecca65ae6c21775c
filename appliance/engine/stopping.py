"""One stop path for ``appliance serve`` and ``appliance demo``: SIGTERM and SIGINT (and, for
the demo, SIGHUP: its terminal went away) end the appliance in every phase.

``appliance serve`` / ``demo`` call :func:`install` before anything else (preflight, store
check, engine start, readiness wait, the demo's first call, serving, drain). The first stop
signal sets :attr:`StopSignals.event` and, unless the main thread is inside a
:meth:`StopSignals.critical` section or the serving loop (:meth:`StopSignals.polled`), raises
:class:`Stopped` there at once (like ``KeyboardInterrupt``), so whatever was running unwinds
through the ``except BaseException: stop()`` of :class:`appliance.serve.Appliance`, which
stops every engine's whole process group (SIGTERM, SIGKILL after a bound) before the
process exits. A critical section (starting a child and recording it; ``Appliance.stop``
itself) finishes first and raises on its way out; the serving loop and the demo's first call
poll :attr:`StopSignals.event` instead (an exception raised inside an asyncio loop or a
drain is lost or leaves it half done).

A stop counts as delivered only once the stop path has it in hand, not when the handler
raised it: the handler runs at whatever bytecode the main thread is at, and that may be code
that swallows the raise (a ``__del__``, a weakref or garbage-collector callback or a
generator finalised on collection, where Python prints "Exception ignored in ..." and goes
on; or library code that catches ``BaseException``). The rule:

- the stop path calls :meth:`StopSignals.caught` where it catches :class:`Stopped`
  (``Appliance.start``'s ``except``, the demo's, ``serve``'s around ``wait()``, and the CLI
  where it maps it to the exit status); the end of a :meth:`StopSignals.polled` section
  counts as caught (the poller handled the stop);
- until then every checkpoint raises it again: :meth:`StopSignals.raise_if_requested` (at
  the phase boundaries of ``Appliance.start``: before and after the cluster join, before
  each model's check and after the whole preflight, before each engine start and before the
  gateway; and before ``serve`` enters the serving loop) and the end of every critical
  section. So a stop requested during preflight never lets an engine start, even when its
  first raise was swallowed;
- no checkpoint raises while a :class:`Stopped` is already on its way up (being handled in
  an ``except``, ``finally`` or ``__exit__`` of the main thread), inside a critical or
  polled section, or in any thread but the main thread: the stop path itself
  (``Appliance.stop``, a critical section) is never cut short by a raise again.

A second stop signal while stopping SIGKILLs every engine process group at once (the
impatient Ctrl-C Ctrl-C); the stop path then finishes quickly. The exit status of a stopped
appliance is ``128 + signal number`` (SIGHUP 129, SIGINT 130, SIGTERM 143), in every phase.

Signal handlers run in the main thread only; they write with ``os.write`` (a ``print`` could
re-enter a buffered stream the main thread was writing).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TypeGuard

_Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)


class Stopped(BaseException):  # noqa: N818 - like KeyboardInterrupt, not an error
    """A stop signal ended the appliance; :attr:`exit_status` is ``128 + signum``."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal_name(signum)}")

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class StopSignals:
    """The process's stop request: which signal (:attr:`signum`), when (:attr:`event`), how
    many times :class:`Stopped` was raised for it (:attr:`raised`), and whether the stop path
    has caught it (:attr:`handled`; until then checkpoints raise it again). One instance,
    :data:`SIGNALS`."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum: int | None = None
        self.installed: tuple[int, ...] = ()
        self.count = 0
        self._hold = 0  # > 0: inside critical()/polled(): record, do not raise
        self.raised = 0  # times Stopped was raised for the request (handler, checkpoints)
        self.handled = False  # the stop path caught Stopped (caught()) or a poller handled it
        self._previous: dict[int, _Handler] = {}
        self.on_repeat: list[Callable[[], None]] = []  # second signal (e.g. kill the engines)

    @property
    def requested(self) -> bool:
        return self.event.is_set()

    def install(self, hup_stops: bool = False) -> None:
        """Handle SIGTERM, SIGINT (and SIGHUP when ``hup_stops``) from now on (main thread
        only; elsewhere, and when called again, nothing happens)."""
        if self.installed or threading.current_thread() is not threading.main_thread():
            return
        signals = STOP_SIGNALS + ((signal.SIGHUP,) if hup_stops else ())
        for signum in signals:
            self._previous[signum] = signal.signal(signum, self._handle)
        self.installed = tuple(int(s) for s in signals)

    def uninstall(self) -> None:
        """Restore the handlers :meth:`install` replaced and forget any request (tests)."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
        self.installed = ()
        self.event.clear()
        self.signum, self.count, self._hold = None, 0, 0
        self.raised, self.handled = 0, False

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.count += 1
        if self.count == 1:
            self.signum = signum
            self.event.set()
            if self._hold == 0 and not self.handled:
                self.raised += 1
                raise Stopped(signum)
            return
        _write(f"appliance: {signal_name(signum)} again while stopping: killing the engine "
               "process group(s) now\n")
        for callback in list(self.on_repeat):
            try:
                callback()
            except Exception:  # noqa: BLE001,S110 - a handler must not raise into the stop path
                pass

    @contextlib.contextmanager
    def critical(self) -> Iterator[None]:
        """A section a stop signal must not cut in two (start a child and record it; stop
        everything). A signal is recorded; :class:`Stopped` is raised when the outermost
        section ends (a checkpoint: :meth:`raise_if_requested`), also for a stop whose
        first raise was swallowed. In any thread but the main thread (where handlers run) a
        no-op."""
        with self._holding() as held:
            yield
        if held:
            self.raise_if_requested()

    @contextlib.contextmanager
    def polled(self) -> Iterator[None]:
        """A section that polls :attr:`event` itself and handles the stop (the serving loop,
        the demo's first call): no :class:`Stopped` is raised inside it or at its end.
        Main thread only (elsewhere a no-op)."""
        held = False
        try:
            with self._holding() as held:
                yield
        finally:
            if held and self.requested:
                self.handled = True

    @contextlib.contextmanager
    def _holding(self) -> Iterator[bool]:
        """In the main thread, hold a stop signal for the section (record it, do not raise)
        and yield ``True``; in any other thread (no handler runs there) yield ``False``."""
        if threading.current_thread() is not threading.main_thread():
            yield False
            return
        self._hold += 1
        try:
            yield True
        finally:
            self._hold -= 1

    def caught(self, exc: BaseException) -> TypeGuard[Stopped]:
        """The stop path has caught ``exc``: if it is a :class:`Stopped`, the stop is handled
        from now on (no checkpoint raises it again) and ``True`` is returned."""
        if isinstance(exc, Stopped):
            self.handled = True
            return True
        return False

    def raise_if_requested(self) -> None:
        """A checkpoint: raise :class:`Stopped` now if a stop was requested and the stop
        path has not caught it yet, even when the handler raised it before (that raise may
        have been swallowed). Does nothing inside a critical or polled section, while a
        :class:`Stopped` is being handled (an ``except``, ``finally`` or ``__exit__`` on its
        way up), or in any thread but the main thread."""
        if not self.requested or self.handled or self._hold or self.signum is None \
                or threading.current_thread() is not threading.main_thread() \
                or isinstance(sys.exc_info()[1], Stopped):
            return
        self.raised += 1
        raise Stopped(self.signum)


def _write(text: str) -> None:
    try:
        os.write(2, text.encode())
    except OSError:
        pass


SIGNALS = StopSignals()


def install(hup_stops: bool = False) -> StopSignals:
    """Install the stop handlers of :data:`SIGNALS` (see the module docstring)."""
    SIGNALS.install(hup_stops)
    return SIGNALS
