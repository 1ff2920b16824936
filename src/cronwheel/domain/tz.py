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

The tz database is read through :mod:`zoneinfo` (the packaged ``tzdata`` files);
that is the only I/O here, and it happens when a zone is first loaded.

Transition search assumes two facts about the tz database (true for every zone
since 1900): offset changes are more than 72 hours apart, and no single change
exceeds 24 hours. :func:`transition_near` and :func:`next_instant` rely on them;
the schedule tests check :func:`next_instant` against brute-force enumeration
in zones with 30-minute, 1-hour and 24-hour jumps.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, get_args
from zoneinfo import ZoneInfo, available_timezones

from cronwheel.errors import UnknownTimezoneError

__all__ = [
    "DST_GAP_POLICIES",
    "DST_OVERLAP_POLICIES",
    "DstGap",
    "DstOverlap",
    "Resolved",
    "load_zone",
    "next_instant",
    "offset_at",
    "resolve_wall",
    "transition_near",
]

DstGap = Literal["next_valid", "skip", "shift"]
DstOverlap = Literal["once", "twice"]
DST_GAP_POLICIES: tuple[str, ...] = get_args(DstGap)
DST_OVERLAP_POLICIES: tuple[str, ...] = get_args(DstOverlap)

# Half-width of the window in which transition_near looks: wider than the largest
# offset change (24 h), narrower than half the smallest spacing of changes (72 h).
NEAR = timedelta(hours=36)


# Names a system zoneinfo directory may list that are not zones of the tz database:
# `localtime` is this host's zone (never a default here), `Factory` a placeholder.
_NOT_ZONES = frozenset({"localtime", "posixrules", "Factory"})


@functools.cache
def _zone_names() -> frozenset[str]:
    return frozenset(available_timezones()) - _NOT_ZONES


def load_zone(name: str) -> ZoneInfo:
    """Load the IANA zone ``name`` (``UTC``, ``Europe/Berlin``, links like ``US/Eastern``).

    Only names listed by the tz database are accepted, so paths, offsets such as
    ``UTC+5``, blanks and control characters are all rejected with
    :class:`UnknownTimezoneError` (field ``tz``).
    """
    if not isinstance(name, str) or name not in _zone_names():
        shown = repr(name)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        raise UnknownTimezoneError(
            f"unknown time zone {shown}: use an IANA name such as 'Europe/Berlin' or 'UTC'",
            field="tz",
        )
    return ZoneInfo(name)


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
    wall: datetime, zone: ZoneInfo, gap: DstGap, overlap: DstOverlap
) -> list[Resolved]:
    """The instants (ascending, 0 to 2 of them) at which the naive ``wall`` time occurs.

    An ordinary wall time gives one instant with ``note=None``. In a gap:
    ``next_valid`` gives the transition instant, ``shift`` the wall time moved
    forward by the gap's length, ``skip`` nothing. In an overlap: ``once`` gives
    the first occurrence, ``twice`` both.
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
    transition = _transition_instant(zone, wall - off1, wall - off0)
    note = f"dst_gap:next_valid ({label} does not exist; fired at the transition)"
    return [Resolved(transition, note)]


_TINY = timedelta(microseconds=1)


def next_instant(
    next_wall: Callable[[datetime], datetime | None],
    zone: ZoneInfo,
    gap: DstGap,
    overlap: DstOverlap,
    t: datetime,
) -> Resolved | None:
    """The first instant strictly after the aware ``t`` at which a wall-time pattern fires.

    ``next_wall(w)`` gives the first matching naive wall time strictly after
    ``w`` (``CronExpr.next_wall``). Wall times come in order, but around a
    transition a later wall time can be an earlier instant (an overlap's
    repeated hour, a shifted gap), so the scan starts up to one transition's
    size before ``t``'s wall time and stops once no later wall time can beat the
    best instant found. Away from transitions that is a single ``next_wall``
    call. Wall times resolving to the same instant give it once, un-noted
    preferred. ``None`` when ``next_wall`` is exhausted or time runs out (year 9999).
    """
    try:
        near = transition_near(zone, t)
        back = abs(near[1] - near[0]) if near else timedelta()
        cursor = t.astimezone(zone).replace(tzinfo=None) - back - _TINY
        best: Resolved | None = None
        stop: datetime | None = None
        while True:
            wall = next_wall(cursor)
            if wall is None:
                return best
            if best is not None and stop is not None and _past_stop(wall, stop, best):
                return best
            for candidate in resolve_wall(wall, zone, gap, overlap):
                if candidate.utc > t:
                    if _better(candidate, best):
                        best = candidate
                        stop = _stop_wall(zone, candidate, wall)
                    break
            if best is not None and stop is not None and _past_stop(wall, stop, best):
                return best
            cursor = wall
    except OverflowError:
        return None


def _better(candidate: Resolved, best: Resolved | None) -> bool:
    if best is None or candidate.utc < best.utc:
        return True
    return candidate.utc == best.utc and best.note is not None and candidate.note is None


def _stop_wall(zone: ZoneInfo, best: Resolved, wall: datetime) -> datetime:
    """The wall time from which no wall time can resolve to an instant before ``best``.

    A wall time ``w`` resolves to instants no earlier than ``w - offset`` for
    some offset in force near that instant; only instants near ``best`` can
    compete (the module's assumptions), so with the largest offset there the
    bound is ``best + largest``. With no transition near, that is ``best``'s own
    wall time.
    """
    near = transition_near(zone, best.utc)
    if near is None:
        return wall
    return best.utc.replace(tzinfo=None) + max(near)


def _past_stop(wall: datetime, stop: datetime, best: Resolved) -> bool:
    return wall > stop or (wall == stop and best.note is None)
