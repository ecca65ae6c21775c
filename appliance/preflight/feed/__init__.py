"""Signed advisory feed: new version floors for an air-gapped host without a new release.

The publisher runs ``appliance advisories export --private-key K [--serial N] OUT`` on the
connected side; the operator carries ``OUT`` across the gap and runs ``appliance advisories
import OUT``; preflight (``appliance check``, ``appliance serve``) then uses the installed
list when its serial is higher than the packaged ``policies/advisories.json``.

Format: the same signature machinery as models (:mod:`appliance.signing`, OMS key method): a
Sigstore bundle v0.3 holding a DSSE envelope over an in-toto Statement v1 whose predicate is
the advisory list itself (:mod:`._statement`). Chosen over a detached signature because the
feed is then one self-contained file to carry; the keys, the ``[trust]`` store (validity
windows, revocation), the DSSE pre-authentication encoding and the strict bundle parser are
the ones already used and tested for models; and the predicate type separates the two kinds
of signed document, so one release key can sign both without a model signature ever passing
as a feed or the reverse.

Rules on import (each refusal a :class:`FeedError` with its own code, :data:`FEED_CODES`):
a plain JSON list is ``feed_unsigned``; the bundle must verify with a ``[trust]`` key that is
listed, unrevoked and inside its window (``feed_signature_invalid``, ``feed_key_untrusted``,
``feed_key_revoked``, ``feed_key_expired``, ...); its serial must be higher than the serial of
the list in force, packaged or installed (``feed_rollback``: an old feed cannot be replayed to
lower the floors). The verified bytes are then written atomically to ``[preflight]
advisory_feed``. Preflight verifies the installed feed again each time (a key revoked since
the import refuses it: fail closed) and uses it only when its serial is higher than the
packaged list's (a newer release supersedes an old feed).

Rollback by deletion: every import also raises the *floor*, the highest serial ever
installed, kept beside the feed in the root-owned folder (``<feed>.floor``, :mod:`._state`).
A list in force below the floor (the installed feed deleted, replaced by an older one, or
unreadable, so preflight would fall back to an older list) is refused
(:attr:`ListInForce.rolled_back`, ``feed_below_floor``; preflight's
``advisory_feed_rolled_back``), as is an unreadable floor (``feed_floor_invalid``). Import
accepts a serial equal to the floor (re-installing the feed that was lost) and never lowers
it; :func:`reset_floor` is the deliberate reset (``appliance advisories reset-floor``).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from appliance import signing
from appliance.errors import SigningError
from appliance.preflight.advisories import AdvisoryList, load_list, parse_list
from appliance.preflight.feed._errors import FEED_CODES, FeedError, from_signing
from appliance.preflight.feed._state import (
    floor_path,
    locked,
    read_feed,
    read_floor,
    write_atomic,
    write_floor,
)
from appliance.preflight.feed._statement import FEED_PREDICATE_TYPE, canonical, decode, encode
from scanner.readers import JSONProblem, loads_strict

__all__ = [
    "FEED_CODES", "FEED_PREDICATE_TYPE", "FeedError", "InstalledFeed", "ListInForce",
    "default_serial", "export_feed", "import_feed", "list_in_force", "reset_floor",
    "verify_feed",
]


@dataclass(frozen=True)
class InstalledFeed:
    """A verified feed: its advisory list, where it was read and who signed it."""

    advisories: AdvisoryList
    path: Path
    signer: signing.Signer


@dataclass(frozen=True)
class ListInForce:
    """The advisory list preflight uses: the packaged list or a verified installed feed.

    ``feed`` is set when the installed feed is the list in force; ``rejected`` holds the
    refusal of an installed feed that no longer verifies (preflight reports it as a
    problem); ``superseded`` is true when a valid installed feed is not newer than the
    packaged list. ``floor`` is the highest serial ever installed (``None``: no import
    recorded one); ``rolled_back`` the refusal when the list is below it or the floor is
    unreadable (preflight reports it as a problem)."""

    advisories: AdvisoryList
    packaged: Path
    feed: InstalledFeed | None = None
    rejected: FeedError | None = None
    superseded: bool = False
    floor: int | None = None
    rolled_back: FeedError | None = None

    @property
    def origin(self) -> str:
        """``'feed /path (signed by NAME)'`` or ``'packaged /path'``."""
        if self.feed is not None:
            return f"feed {self.feed.path} (signed by '{self.feed.signer.name}')"
        return f"packaged {self.packaged}"


def default_serial(source_serial: int, now: dt.datetime | None = None) -> int:
    """The serial ``export`` uses without ``--serial``: ``YYYYMMDDHH`` of ``now`` (UTC),
    or ``source_serial + 1`` when that is higher (serials only grow)."""
    when = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    return max(source_serial + 1, int(when.strftime("%Y%m%d%H")))


def export_feed(source: Path, private_key: Path, out: Path, serial: int | None = None,
                date: dt.datetime | None = None, passphrase: bytes | None = None,
                ) -> AdvisoryList:
    """Sign the advisory list ``source`` as a feed with ``serial`` (default
    :func:`default_serial`) and ``date`` (default now, UTC) and write it atomically to
    ``out``. Returns the list as signed.

    Raises ``PolicyError`` (``advisories_invalid``) for a bad source list, ``FeedError``
    (``feed_serial_not_newer`` when ``serial`` is not above the source's,
    ``feed_install_failed`` when ``out`` cannot be written) and the key ``SigningError``
    codes."""
    base = load_list(source)
    when = (date or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).replace(microsecond=0)
    number = default_serial(base.serial, when) if serial is None else serial
    if number <= base.serial:
        raise FeedError(
            f"serial {number} is not above the source list's serial {base.serial}",
            code="feed_serial_not_newer", where="--serial",
            fix=f"pass --serial greater than {base.serial} (YYYYMMDDNN)")
    document: dict[str, Any] = loads_strict(source.read_bytes())
    document["serial"] = number
    document["date"] = when.isoformat().replace("+00:00", "Z")
    signed = parse_list(canonical(document), str(source))  # the exact content signed
    write_atomic(Path(out), signing.sign_payload(encode(document), private_key, passphrase))
    return signed


def _not_a_bundle(data: bytes, source: str) -> FeedError | None:
    """``feed_unsigned`` for a plain advisory list; ``None`` for anything else."""
    try:
        doc = loads_strict(data)
    except JSONProblem:
        return None
    if isinstance(doc, dict) and "advisories" in doc and "dsseEnvelope" not in doc:
        return FeedError(
            f"'{source}' is a plain advisory list, not a signed feed; an unsigned list is "
            "never installed", code="feed_unsigned", where=source,
            fix="ask the publisher for the feed written by `appliance advisories export "
                "--private-key ...`")
    return None


def verify_feed(data: bytes, trust: signing.TrustStore, source: str,
                now: dt.datetime | None = None) -> tuple[AdvisoryList, signing.Signer]:
    """Authenticate feed bytes against ``trust`` and return the advisory list and signer.
    Raises ``FeedError`` with the codes in the module docstring (never ``SigningError``)."""
    unsigned = _not_a_bundle(data, source)
    if unsigned is not None:
        raise unsigned
    if not trust.keys:
        raise FeedError(
            f"cannot check '{source}': the policy's [trust] lists no key",
            code="feed_no_trusted_key", where="trust.keys",
            fix="add the publisher's public key as a [[trust.keys]] entry in the policy")
    try:
        payload, signer = signing.open_payload(data, trust, source, now)
    except SigningError as exc:
        raise from_signing(exc, source) from None
    return decode(payload, source), signer


def _installed(feed_path: Path, trust: signing.TrustStore, now: dt.datetime | None,
               ) -> InstalledFeed | None:
    data = read_feed(feed_path)
    if data is None:
        return None
    advisories, signer = verify_feed(data, trust, str(feed_path), now)
    return InstalledFeed(advisories, feed_path, signer)


def _floored(result: ListInForce, feed_path: Path) -> ListInForce:
    """``result`` with the floor recorded beside ``feed_path`` and, when the list is below
    it, the rollback refusal."""
    try:
        floor = read_floor(feed_path)
    except FeedError as exc:
        return replace(result, rolled_back=exc)
    serial = result.advisories.serial
    if floor is None or serial >= floor or result.rejected is not None:
        return replace(result, floor=floor)  # a refused feed is refused already (rejected)
    if read_feed(feed_path) is None:
        why = "the installed feed is missing"
    else:
        why = "the installed feed is older"
    return replace(result, floor=floor, rolled_back=FeedError(
        f"{why}: the list in force (serial {serial}, {result.origin}) is older than serial "
        f"{floor}, the highest ever installed (floor {floor_path(feed_path)})",
        code="feed_below_floor", where=str(feed_path),
        fix=f"re-import the feed with serial {floor} or newer (`appliance advisories "
            "import FILE`); to go back deliberately, as root: `appliance advisories "
            "reset-floor` (docs/deployment.md#advisory-floor)"))


def list_in_force(packaged: Path, feed_path: Path | None, trust: signing.TrustStore,
                  now: dt.datetime | None = None) -> ListInForce:
    """The advisory list preflight must use (see :class:`ListInForce`), checked against the
    floor beside ``feed_path``. Raises ``PolicyError`` (``advisories_invalid``) for a bad
    packaged list; an installed feed that does not verify is returned in ``rejected``, a
    list below the floor in ``rolled_back``, never raised."""
    if feed_path is None:
        return ListInForce(load_list(packaged), packaged)
    try:
        return _floored(_unfloored(packaged, feed_path, trust, now), feed_path)
    except FeedError as exc:  # the feed vanished or became unreadable between the reads
        return ListInForce(load_list(packaged), packaged, rolled_back=exc)


def _unfloored(packaged: Path, feed_path: Path | None, trust: signing.TrustStore,
               now: dt.datetime | None = None) -> ListInForce:
    base = load_list(packaged)
    if feed_path is None:
        return ListInForce(base, packaged)
    try:
        installed = _installed(feed_path, trust, now)
    except FeedError as exc:
        return ListInForce(base, packaged, rejected=exc)
    if installed is None:
        return ListInForce(base, packaged)
    if installed.advisories.serial <= base.serial:
        return ListInForce(base, packaged, superseded=True)
    return ListInForce(installed.advisories, packaged, feed=installed)


def import_feed(source: Path, packaged: Path, feed_path: Path, trust: signing.TrustStore,
                now: dt.datetime | None = None) -> InstalledFeed:
    """Verify the feed file ``source`` and install it at ``feed_path`` (atomically, under
    a lock). Refuses (``FeedError``) everything :func:`verify_feed` refuses, and
    ``feed_rollback`` when its serial is not above the serial in force (the packaged list's,
    or a still-valid installed feed's). Returns the installed feed."""
    data = read_feed(source)
    if data is None:
        raise FeedError(f"advisory feed '{source}' does not exist", code="feed_unreadable",
                        where=str(source), fix="pass the path of the feed file")
    advisories, signer = verify_feed(data, trust, str(source), now)
    with locked(feed_path):
        current = _unfloored(packaged, feed_path, trust, now)
        in_force = current.advisories.serial  # a superseded feed's serial is lower still
        floor = read_floor(feed_path)  # an unreadable floor refuses the import too
        if advisories.serial <= in_force or (floor is not None and advisories.serial < floor):
            least = max(in_force + 1, floor or 0)
            raise FeedError(
                f"feed serial {advisories.serial} is below serial {least}, the least this "
                f"host accepts (list in force: serial {in_force}, {current.origin}; highest "
                f"ever installed: {floor if floor is not None else 'none recorded'}): "
                "refusing a rollback",
                code="feed_rollback", where=str(source),
                fix="import a feed with a higher serial; an older one is never installed")
        write_atomic(feed_path, data)
        write_floor(feed_path, max(advisories.serial, floor or 0))
    return InstalledFeed(advisories, feed_path, signer)


def reset_floor(packaged: Path, feed_path: Path, trust: signing.TrustStore,
                now: dt.datetime | None = None) -> tuple[int | None, int]:
    """The deliberate reset: record the serial of the list in force now (the installed feed
    if it verifies and is newer, else the packaged list), ignoring the old floor, as the
    floor. Returns ``(old floor or None, new floor)``; an unreadable old floor is replaced.
    Raises ``FeedError`` (``feed_install_failed``) when the floor cannot be written."""
    with locked(feed_path):
        try:
            old = read_floor(feed_path)
        except FeedError:
            old = None
        serial = _unfloored(packaged, feed_path, trust, now).advisories.serial
        write_floor(feed_path, serial)
    return old, serial
