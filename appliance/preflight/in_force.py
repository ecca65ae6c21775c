"""The advisory list in force and rule ``advisory_feed``.

The list preflight uses is the packaged ``policies/advisories.json`` or a newer signed feed
installed with ``appliance advisories import`` (:mod:`.feed`). :func:`in_force_of` picks it for
a policy, :func:`describe` gives the lines ``appliance check``, ``appliance advisories show``
and ``appliance serve`` print about it (serial, date, age in days, origin) and the
``advisories_stale`` warning (a :data:`.feed.FEED_CODES` code), and :func:`feed_problems` is the
rule: an installed feed that no longer verifies (say its key was revoked since the import) is
refused (``advisory_feed_rejected``), never silently ignored; and a list older than the
highest feed serial ever installed (the feed deleted or replaced by an older one) is refused
(``advisory_feed_rolled_back``), never a silent fall-back to the packaged list.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from appliance.preflight.feed import ListInForce, list_in_force
from appliance.preflight.problem import Problem

if TYPE_CHECKING:
    from appliance.config.policy import Policy

__all__ = ["describe", "feed_problems", "in_force_of"]


def in_force_of(policy: Policy, now: dt.datetime | None = None) -> ListInForce:
    """The advisory list ``policy`` puts in force (packaged, or a newer installed feed
    verified with the policy's ``[trust]`` keys at ``now``, default the current time).
    Raises ``PolicyError`` (``advisories_invalid``) for a bad packaged list."""
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


def feed_problems(in_force: ListInForce | None) -> list[Problem]:
    """Rule ``advisory_feed``: ``advisory_feed_rejected`` when the installed feed no longer
    verifies, ``advisory_feed_rolled_back`` when the list in force is below the floor (or
    the floor is unreadable); nothing for the packaged list or a valid feed (or ``None``: no
    list in force was given, only the packaged file's path)."""
    if in_force is None:
        return []
    problems = []
    back = in_force.rolled_back
    if back is not None:
        problems.append(Problem("advisory_feed_rolled_back", back.where or "advisory feed",
                                f"advisory rollback refused: {back.message}",
                                f"feed code {back.code}", back.fix or ""))
    if in_force.rejected is None:
        return problems
    err = in_force.rejected
    return problems + [Problem("advisory_feed_rejected", err.where or "advisory feed",
                    f"the installed advisory feed is refused: {err.message}",
                    f"feed code {err.code}",
                    f"{err.fix}; then import a feed signed by a current key "
                    "(`appliance advisories import`), or remove the installed feed file")]
