"""Time zones: load IANA zones and map wall-clock times to UTC instants under a DST policy.

A cron expression matches *wall* times; a wall time in a zone is 0, 1 or 2 instants:

- **gap** — the wall time does not exist that day (spring forward). Policies:
  ``next_valid`` fires once at the first instant after the gap, i.e. the
  transition instant; ``skip`` does not fire; ``shift`` moves the wall time
  forward by the length of the gap.
- **overlap** — the wall time occurs twice (fall back). Policies: ``once`` fires
  at the first occurrence only; ``twice`` fires at both.

Worked example, Europe/Berlin (CET +01:00, CEST +02:00)::

    2026-03-29: at 01:00Z clocks jump 02:00 CET -> 03:00 CEST; 02:30 does not exist
      next_valid  02:30 -> 2026-03-29T01:00Z (03:00 CEST, the transition instant)
      skip        02:30 -> (nothing)
      shift       02:30 -> 2026-03-29T01:30Z (03:30 CEST: moved by the 1 h gap)
    2026-10-25: at 01:00Z clocks fall 03:00 CEST -> 02:00 CET; 02:30 happens twice
      once        02:30 -> 2026-10-25T00:30Z (02:30 CEST)
      twice       02:30 -> 2026-10-25T00:30Z (02:30 CEST), 2026-10-25T01:30Z (02:30 CET)

Gap lengths are whatever the tz database says: 30 minutes on Lord Howe Island,
a whole day in Samoa on 2011-12-30.

**Which tz database** (:mod:`cronwheel.domain.tzdb`, re-exported here). Every zone
is loaded by :func:`load_zone` from one tz
database chosen explicitly (:func:`use_tz_database`), never from wherever
:mod:`zoneinfo`'s TZPATH points: ``bundled`` (the default: the ``tzdata`` package's
files, version ``tzdata.IANA_VERSION``), ``system`` (``/usr/share/zoneinfo``, its
version read from the ``# version`` line of its ``tzdata.zi``) or a directory of
compiled zones holding such a ``tzdata.zi`` (tests, pinning). Without a choice
the environment variable ``CRONWHEEL_TZDATA`` decides, else ``bundled``. Reading
zone files is the only I/O here; it happens when a zone is first loaded.

The search for the next firing (:func:`next_instant`) walks the segments between
the zone's offset changes (:mod:`cronwheel.domain.transitions`), a bounded number
of cron jumps per segment, whatever the expression; it relies on two facts about
the tz database, checked over every zone by the unit tests: offset changes are
more than 72 hours apart, and no single change exceeds 24 hours. It is checked
against the previous, enumerating implementation (test_tz_stepping.py) and
against brute-force enumeration (test_schedules.py). Its work is bounded (a
:class:`~cronwheel.domain.transitions.StepBudget`) and so is its reach: a first
firing more than :data:`HORIZON_YEARS` (50) years after the start raises
:class:`~cronwheel.errors.NoFiringInHorizonError`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, get_args
from zoneinfo import ZoneInfo

from cronwheel.domain.transitions import (
    MAX_JUMP,
    StepBudget,
    Transition,
    first_transition,
    last_transition,
)
from cronwheel.domain.tzdb import (
    SYSTEM_TZDIR,
    TZDATA_ENV,
    TzDatabase,
    load_zone,
    open_tz_database,
    tz_database,
    use_tz_database,
    zone_digests,
    zone_names,
)
from cronwheel.errors import NoFiringInHorizonError

__all__ = [
    "DST_GAP_POLICIES",
    "DST_OVERLAP_POLICIES",
    "HORIZON_YEARS",
    "SYSTEM_TZDIR",
    "TZDATA_ENV",
    "DstGap",
    "DstOverlap",
    "Resolved",
    "TzDatabase",
    "load_zone",
    "next_instant",
    "offset_at",
    "open_tz_database",
    "resolve_wall",
    "transition_near",
    "tz_database",
    "use_tz_database",
    "zone_digests",
    "zone_names",
]

DstGap = Literal["next_valid", "skip", "shift"]
DstOverlap = Literal["once", "twice"]
DST_GAP_POLICIES: tuple[str, ...] = get_args(DstGap)
DST_OVERLAP_POLICIES: tuple[str, ...] = get_args(DstOverlap)

# Half-width of the window in which transition_near looks: wider than the largest
# offset change (24 h), narrower than half the smallest spacing of changes (72 h).
NEAR = timedelta(hours=36)


@dataclass(frozen=True, slots=True)
class Resolved:
    """One instant a wall time resolves to.

    ``utc`` is aware UTC; ``note`` is ``None`` for an ordinary instant, else a
    short text starting with a stable code: ``dst_gap:next_valid``,
    ``dst_gap:shift``, ``dst_overlap:first`` or ``dst_overlap:second``.
    """

    utc: datetime
    note: str | None = None


def offset_at(zone: ZoneInfo, instant: datetime) -> timedelta:
    """The UTC offset of ``zone`` at the aware ``instant``."""
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def transition_near(zone: ZoneInfo, instant: datetime) -> tuple[timedelta, timedelta] | None:
    """``(offset_before, offset_after)`` if the zone changes offset within 36 h of ``instant``.

    Returns ``None`` when the offset is the same 36 h before and after (by the
    module's assumptions there is then no change in that window).
    """
    try:
        before = offset_at(zone, instant - NEAR)
        after = offset_at(zone, instant + NEAR)
    except OverflowError:
        return None
    return None if before == after else (before, after)


def _hhmm(wall: datetime) -> str:
    return wall.strftime("%H:%M:%S" if wall.second else "%H:%M")


def _span(delta: timedelta) -> str:
    minutes = int(delta.total_seconds()) // 60
    hours, minutes = divmod(minutes, 60)
    if hours and minutes:
        return f"{hours} h {minutes} min"
    return f"{hours} h" if hours else f"{minutes} min"


def _transition_instant(zone: ZoneInfo, before: datetime, after: datetime) -> datetime:
    """First whole-second instant in ``(before, after]`` with the offset at ``after``.

    ``before``/``after`` are naive UTC; the offset at ``before`` differs from the
    one at ``after`` and changes exactly once in between.
    """
    low = before.replace(microsecond=0)
    base = low.replace(tzinfo=UTC)
    old = offset_at(zone, base)
    lo, hi = 0, int((after - low).total_seconds()) + 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if offset_at(zone, base + timedelta(seconds=mid)) == old:
            lo = mid
        else:
            hi = mid
    return base + timedelta(seconds=hi)


def resolve_wall(
    wall: datetime,
    zone: ZoneInfo,
    gap: DstGap,
    overlap: DstOverlap,
    *,
    change_at: datetime | None = None,
) -> list[Resolved]:
    """The instants (ascending, 0 to 2 of them) at which the naive ``wall`` time occurs.

    An ordinary wall time gives one instant with ``note=None``. In a gap:
    ``next_valid`` gives the transition instant, ``shift`` the wall time moved
    forward by the gap's length, ``skip`` nothing. In an overlap: ``once`` gives
    the first occurrence, ``twice`` both. ``change_at``, when the caller knows
    it, is the instant of the offset change next to ``wall`` (saves its search).
    """
    if wall.tzinfo is not None:
        raise ValueError("resolve_wall takes a naive wall-clock datetime")
    if gap not in DST_GAP_POLICIES or overlap not in DST_OVERLAP_POLICIES:
        raise ValueError(f"unknown DST policy {gap!r}/{overlap!r}")
    off0 = wall.replace(tzinfo=zone, fold=0).utcoffset()
    off1 = wall.replace(tzinfo=zone, fold=1).utcoffset()
    assert off0 is not None
    assert off1 is not None
    first = (wall - off0).replace(tzinfo=UTC)
    if off0 == off1:
        return [Resolved(first)]
    if off0 > off1:  # the clock went back: this wall time happens twice
        label = _hhmm(wall)
        if overlap == "once":
            return [
                Resolved(
                    first, f"dst_overlap:first ({label} occurs twice; fired once, at the first)"
                )
            ]
        return [
            Resolved(first, f"dst_overlap:first ({label} occurs twice; first of two)"),
            Resolved(
                (wall - off1).replace(tzinfo=UTC),
                f"dst_overlap:second ({label} occurs twice; second of two)",
            ),
        ]
    # The clock jumped forward over this wall time. With the pre-jump offset it
    # would be `first` (at or after the jump); with the post-jump one, before it.
    if gap == "skip":
        return []
    label = _hhmm(wall)
    if gap == "shift":
        shifted = _hhmm((first + off1).replace(tzinfo=None))
        note = f"dst_gap:shift ({label} does not exist; moved by {_span(off1 - off0)} to {shifted})"
        return [Resolved(first, note)]
    transition = change_at or _transition_instant(zone, wall - off1, wall - off0)
    note = f"dst_gap:next_valid ({label} does not exist; fired at the transition)"
    return [Resolved(transition, note)]


_TINY = timedelta(microseconds=1)
# 400 Gregorian years: dates and weekdays repeat, so do a zone's rules before its
# first offset change (local mean time) and after its last explicit one (its
# yearly POSIX rule). Searches within a few days of datetime's bounds run 400
# years away from them and shift the answer back.
PERIOD = timedelta(days=146097)
# A search that finds nothing within this horizon raises NoFiringInHorizonError:
# longer than the longest silence of any expression parse_cron accepts (40 years:
# 29 February on a given weekday, across a century year that is not a leap year).
HORIZON_YEARS = 50
# Start a later segment this far before the next matching wall's instant: more
# than the largest change (24 h) plus twice the largest offset (16 h).
_SKIP_MARGIN = timedelta(days=3)
_EDGE = timedelta(days=4)
_FIRST = datetime.min.replace(tzinfo=UTC)
_LAST = datetime.max.replace(tzinfo=UTC)

NextWall = Callable[..., "datetime | None"]


class _EndOfTime(Exception):
    """The search ran past the last representable wall time or instant."""


def next_instant(
    next_wall: NextWall,
    zone: ZoneInfo,
    gap: DstGap,
    overlap: DstOverlap,
    t: datetime,
    *,
    budget: StepBudget | None = None,
) -> Resolved | None:
    """The first instant strictly after the aware ``t`` at which a wall-time pattern fires.

    ``next_wall(w, until=..., budget=...)`` gives the first matching naive wall
    time strictly after ``w`` (``CronExpr.next_wall``). The search walks the
    *segments* between the zone's offset changes: inside one, wall time and
    instants move together, so one ``next_wall`` call finds its first firing;
    at a change, a gap's wall times (``next_valid``: the change's instant;
    ``shift``: moved by the gap) and an overlap's repeated ones (``twice``:
    also after the change) are each one more call. The cost is a handful of
    calls per segment crossed, whatever the expression's density; segments
    without a matching wall time are jumped over.

    Wall times resolving to the same instant give it once, un-noted preferred.
    ``None`` when no firing instant is representable after ``t`` (year 9999).
    Raises :class:`NoFiringInHorizonError` when the first firing is more than
    HORIZON_YEARS after ``t``, and :class:`ScheduleBudgetError` when the search
    exceeds ``budget`` (default: a fresh :class:`StepBudget`).
    """
    budget = StepBudget() if budget is None else budget
    t = t.astimezone(UTC)
    if t - _FIRST < _EDGE:  # local mean time: the same 400 years later
        found = _search(next_wall, zone, gap, overlap, t + PERIOD, budget)
        return Resolved(found.utc - PERIOD, found.note)
    try:
        return _search(next_wall, zone, gap, overlap, t, budget)
    except (_EndOfTime, OverflowError):
        if t.year < 2500:  # no match in 400 years: parse_cron refuses such expressions
            raise _no_firing(zone, gap, overlap, t) from None
    # near year 9999: the zone's yearly rule gives the same 400 years earlier
    try:
        found = _search(next_wall, zone, gap, overlap, t - PERIOD, budget)
    except _EndOfTime:
        return None
    try:
        return Resolved(found.utc + PERIOD, found.note)
    except OverflowError:
        return None


def _naive(instant: datetime, offset: timedelta) -> datetime:
    return (instant + offset).replace(tzinfo=None)


def _search(
    next_wall: NextWall,
    zone: ZoneInfo,
    gap: DstGap,
    overlap: DstOverlap,
    t: datetime,
    budget: StepBudget,
) -> Resolved:
    if t.year + HORIZON_YEARS > 9999:
        limit = _LAST
    elif t.month == 2 and t.day == 29:
        limit = t.replace(year=t.year + HORIZON_YEARS, day=28)
    else:
        limit = t.replace(year=t.year + HORIZON_YEARS)
    pos = t  # the segment searched starts here (at t, or at an offset change after t)
    start_change = last_transition(zone, t - MAX_JUMP, t, budget)
    while True:
        budget.spend()
        change = start_change  # the offset change at or just before pos, if any
        offset = offset_at(zone, pos) if change is None else change.after
        found: list[tuple[datetime, datetime]] = []  # (instant, wall time)
        if change is not None and change.after > change.before and gap != "skip":
            gap_start, gap_end = _naive(change.at, change.before), _naive(change.at, change.after)
            if gap == "next_valid" and change.at > t:
                wall = next_wall(gap_start - _TINY, until=gap_end - _TINY, budget=budget)
                if wall is not None:
                    found.append((change.at, wall))
            elif gap == "shift":
                after = max(gap_start - _TINY, _naive(t, change.before))
                wall = next_wall(after, until=gap_end - _TINY, budget=budget)
                if wall is not None:
                    found.append(((wall - change.before).replace(tzinfo=UTC), wall))
        after = _naive(t, offset) if pos == t else _naive(pos, offset) - _TINY
        if change is not None and change.before > change.after and overlap == "once":
            after = max(after, _naive(change.at, change.before) - _TINY)  # no second times
        wall = next_wall(after, budget=budget)
        end: Transition | None = None
        if wall is not None:
            instant = (wall - offset).replace(tzinfo=UTC)
            end = first_transition(zone, pos, instant + MAX_JUMP, budget)
            behind = change is None or (pos == t and _clear_of(change, True, t, gap, overlap))
            if not found and behind and _clear_of(end, False, instant, gap, overlap):
                # no gap or overlap reaches this instant: an ordinary one, un-noted
                if instant > limit:
                    raise _no_firing(zone, gap, overlap, t)
                return Resolved(instant)
            if end is None or instant < end.at:
                found.append((instant, wall))
        if found:
            best = _pick(found, zone, gap, overlap, None if change is None else change.at)
            if best.utc > limit:
                raise _no_firing(zone, gap, overlap, t)
            return best
        if end is None:
            raise _EndOfTime
        if end.at > limit:
            raise _no_firing(zone, gap, overlap, t)
        if pos > t and instant - end.at > _SKIP_MARGIN:
            # No wall time after this segment's start matches before `wall`: start
            # near its instant. (Not from t's own segment: the overlap at its end
            # repeats wall times from before t's, which the next segment searches.)
            pos, start_change = instant - _SKIP_MARGIN, None
        else:
            pos, start_change = end.at, end


def _clear_of(
    change: Transition | None, behind: bool, instant: datetime, gap: DstGap, overlap: DstOverlap
) -> bool:
    """Whether ``change`` leaves a stream candidate at ``instant`` ordinary (un-noted, and
    no other candidate from the change can come first).

    ``behind``: the change is at or before ``t`` = ``instant`` (the search start); its
    shifted gap instants and its repeated wall times' second instants lie within the
    change's size after it, and are excluded anyway unless the policy is ``shift``
    or ``twice``. Ahead (after ``instant``): the instant must be before it, and before
    an overlap by its size (those wall times repeat: the first of two gets a note).
    """
    if change is None:
        return True
    size = abs(change.after - change.before)
    is_gap = change.after > change.before
    if behind:
        kept = gap == "shift" if is_gap else overlap == "twice"
        return not kept or instant >= change.at + size
    return instant < change.at if is_gap else instant + size < change.at


def _pick(
    found: list[tuple[datetime, datetime]],
    zone: ZoneInfo,
    gap: DstGap,
    overlap: DstOverlap,
    change_at: datetime | None,
) -> Resolved:
    """The earliest candidate, un-noted preferred, with the note resolve_wall gives it."""
    best: Resolved | None = None
    first = min(instant for instant, _ in found)
    for instant, wall in found:
        if instant != first:
            continue
        for candidate in resolve_wall(wall, zone, gap, overlap, change_at=change_at):
            if candidate.utc == instant and (
                best is None
                or candidate.utc < best.utc
                or (candidate.utc == best.utc and best.note is not None and candidate.note is None)
            ):
                best = candidate
    assert best is not None
    return best


def _no_firing(zone: ZoneInfo, gap: DstGap, overlap: DstOverlap, t: datetime) -> Exception:
    return NoFiringInHorizonError(
        f"does not fire within {HORIZON_YEARS} years after "
        f"{t.strftime('%Y-%m-%dT%H:%M:%SZ')} in {zone.key} under dst_gap={gap}, "
        f"dst_overlap={overlap} (its wall times fall where this DST policy drops them, "
        f"or it matches less often than that)",
        field="schedule",
    )
