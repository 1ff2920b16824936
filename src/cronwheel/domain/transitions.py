"""A zone's UTC-offset changes, found through :mod:`zoneinfo`, and the work budget of a search.

:func:`first_transition` and :func:`last_transition` answer "does the offset
change in ``(a, b]``, and where?" from per-year tables. A year's table is built
by sampling the zone's offset every 48 hours and bisecting each change to the
second, so :mod:`zoneinfo` stays the only source of truth; it is cached (a few
thousand zone-years).

The tables rely on two facts about the tz database, checked over every zone by
the unit tests: offset changes are more than 95 hours apart (so a 48-hour window
holds at most one), and none exceeds 24 hours (Samoa skipped 2011-12-30, Alaska
repeated a day in 1867). Before the first change (every zone keeps its local mean
time until 1835 or later) a zone's offset is constant.

:class:`StepBudget` counts the iterations of every loop of a schedule search (a
cron field jump, a year table looked up, a segment between two changes); a
search that exceeds it raises :class:`~cronwheel.errors.ScheduleBudgetError`
instead of running on.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from cronwheel.errors import ScheduleBudgetError

__all__ = [
    "MAX_JUMP",
    "MAX_STEPS",
    "StepBudget",
    "Transition",
    "first_transition",
    "last_transition",
    "year_transitions",
]

# Larger than the largest offset change of the tz database (24 h).
MAX_JUMP = timedelta(hours=26)
# The budget of one schedule computation: well above what the largest search
# needs (a schedule refused for not firing within 50 years in a zone with DST
# uses a few hundred steps, see test_search_bounds.py), far below a runaway loop.
MAX_STEPS = 10_000

_PROBE = timedelta(hours=48)
_LAST = datetime.max.replace(microsecond=0, tzinfo=UTC)
_PERIOD = timedelta(days=146097)  # 400 Gregorian years


class StepBudget:
    """Iterations left to one schedule computation; ``used`` counts those spent."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int = MAX_STEPS) -> None:
        self.limit = limit
        self.used = 0

    def spend(self, steps: int = 1) -> None:
        self.used += steps
        if self.used > self.limit:
            raise ScheduleBudgetError(
                f"the schedule computation exceeded its budget of {self.limit} steps",
                field="schedule",
            )

    @property
    def left(self) -> int:
        return self.limit - self.used


@dataclass(frozen=True, slots=True)
class Transition:
    """The zone's offset is ``before`` until ``at`` (aware UTC, whole second), ``after`` from it."""

    at: datetime
    before: timedelta
    after: timedelta


def _offset(zone: ZoneInfo, instant: datetime) -> timedelta:
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


@functools.lru_cache(maxsize=8192)
def year_transitions(zone: ZoneInfo, year: int) -> tuple[Transition, ...]:
    """The offset changes with ``at`` in ``(Jan 1 of year, Jan 1 of year + 1]`` (UTC).

    Years 1-400 are years 401-800 shifted back by 400 years, and year 9999 is year
    9599 shifted forward (zones keep their local mean time until the 1830s at the
    earliest, and follow their yearly rule at the end): the wall times of the first
    hours of year 1 are not representable west of UTC, nor those of the last hours
    of 9999 east of it.
    """
    if year <= 400:
        return tuple(
            Transition(c.at - _PERIOD, c.before, c.after)
            for c in year_transitions(zone, year + 400)
        )
    if year == 9999:
        return tuple(
            Transition(c.at + _PERIOD, c.before, c.after)
            for c in year_transitions(zone, year - 400)
            if c.at < _LAST - _PERIOD
        )
    low = datetime(year, 1, 1, tzinfo=UTC)
    end = datetime(year + 1, 1, 1, tzinfo=UTC)
    found: list[Transition] = []
    old = _offset(zone, low)
    while low < end:
        high = min(low + _PROBE, end)
        new = _offset(zone, high)
        if new != old:
            lo, hi = 0, int((high - low).total_seconds())
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if _offset(zone, low + timedelta(seconds=mid)) == old:
                    lo = mid
                else:
                    hi = mid
            found.append(Transition(low + timedelta(seconds=hi), old, new))
        low, old = high, new
    return tuple(found)


def first_transition(
    zone: ZoneInfo, after: datetime, until: datetime, budget: StepBudget
) -> Transition | None:
    """The first offset change with ``after < at <= until`` (aware instants), or ``None``."""
    for year in range(after.year, until.year + 1):
        budget.spend()
        for transition in year_transitions(zone, year):
            if transition.at > until:
                return None
            if transition.at > after:
                return transition
    return None


def last_transition(
    zone: ZoneInfo, after: datetime, until: datetime, budget: StepBudget
) -> Transition | None:
    """The last offset change with ``after < at <= until``; meant for short spans."""
    found: Transition | None = None
    for year in range(after.year, until.year + 1):
        budget.spend()
        for transition in year_transitions(zone, year):
            if after < transition.at <= until:
                found = transition
    return found
