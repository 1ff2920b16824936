"""Hard bounds of a schedule search: work, horizon, and datetime's first and last instants.

Work is counted, never timed: a :class:`StepBudget` counts the iterations of the
search loops (cron field jumps, year tables looked up, segments between offset
changes). Over random expressions x zones x DST policies x start instants (hostile
ones included: expressions matching only inside a DST gap, 29 February on a
weekday, per-second expressions next to a change), the count stays under
MAX_STEPS, and the answer is an instant, ``None`` only at the end of time, or
:class:`NoFiringInHorizonError` -- never a budget error.
"""

from __future__ import annotations

import calendar
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cronwheel.domain.schedules import cron, next_firings
from cronwheel.domain.transitions import MAX_STEPS, StepBudget, year_transitions
from cronwheel.domain.tz import HORIZON_YEARS
from cronwheel.domain.tzdb import load_zone, zone_names
from cronwheel.errors import InvalidScheduleError, NoFiringInHorizonError, ScheduleBudgetError

ALL_ZONES = sorted(zone_names())
FIRST = datetime.min.replace(tzinfo=UTC)
LAST = datetime.max.replace(tzinfo=UTC)

HOSTILE = [
    "30 2 * 3 0L",  # Europe's spring-forward Sunday: always in the gap
    "* * 2 * 3 0L",  # every second of it
    "*/7 2 8-14 3 0",  # OR rule: every Sunday and 8-14 March
    "0 2 * 3,10 0#2",  # second Sunday of March (New York's change) and October
    "0 0 29 2 */7",  # 29 February on a Sunday: 28 to 40 years apart
    "0 0 ? 2 1#5",  # the fifth Monday of February, i.e. 29 February on a Monday
    "15 2 * 10 0#1",  # Lord Howe's gap (02:00-02:30), first Sunday of October
    "0 0 30 12 *",  # Apia skipped 2011-12-30
    "* * * * * *",
    "59 59 23 L 12 *",
]
PLAIN = st.builds(
    lambda *f: " ".join(f),
    st.sampled_from(["0", "*", "*/15", "30", "0-5", "59"]),
    st.sampled_from(["*", "0", "1", "2", "3", "1-3", "23", "*/6"]),
    st.sampled_from(["*", "1", "L", "29", "1-7", "15W"]),
    st.sampled_from(["*", "2", "3", "10", "3,10", "1-6"]),
    st.sampled_from(["*", "0", "0L", "0#1", "1-5", "6"]),
)
EXPRS = st.one_of(st.sampled_from(HOSTILE), PLAIN)
INSTANTS = st.one_of(
    st.datetimes(
        min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31), timezones=st.just(UTC)
    ),
    st.builds(
        lambda year, month, day, seconds: (
            datetime(year, month, day, tzinfo=UTC) + timedelta(seconds=seconds)
        ),
        st.integers(1900, 2100),
        st.sampled_from([3, 4, 9, 10, 11, 12]),
        st.integers(1, 28),
        st.integers(0, 3 * 86400),
    ),
    st.sampled_from([FIRST, LAST, datetime(2011, 12, 29, 10, tzinfo=UTC)]),
)
GAPS = st.sampled_from([None, "next_valid", "skip", "shift"])
OVERLAPS = st.sampled_from([None, "once", "twice"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(EXPRS, st.sampled_from(ALL_ZONES), GAPS, OVERLAPS, INSTANTS)
def test_the_work_of_a_search_is_bounded(
    expr: str, zone: str, gap: Any, overlap: Any, t: datetime
) -> None:
    try:
        schedule = cron(expr, zone, dst_gap=gap, dst_overlap=overlap)
    except InvalidScheduleError:
        return
    budget = StepBudget(limit=10**9)  # count, do not stop
    try:
        got = schedule.next_after_with_note(t, budget=budget)
    except NoFiringInHorizonError:
        got = None
    else:
        if got is None:  # exhausted only when no later instant is representable
            assert t > datetime(9950, 1, 1, tzinfo=UTC)
        else:
            assert timedelta(0) < got.utc - t <= timedelta(days=366 * HORIZON_YEARS)
    assert budget.used <= MAX_STEPS


def test_a_search_that_exceeds_its_budget_says_so() -> None:
    schedule = cron("30 2 * 3 0L", "Europe/Berlin", dst_gap="skip")
    with pytest.raises(ScheduleBudgetError) as info:
        schedule.next_after_with_note(datetime(2026, 12, 1, tzinfo=UTC), budget=StepBudget(50))
    assert info.value.field == "schedule"
    assert "budget of 50 steps" in info.value.message
    assert not isinstance(info.value, NoFiringInHorizonError)  # not reported as "never"


@pytest.mark.parametrize(
    ("zone", "gap"),
    [("Europe/Berlin", "skip"), ("Europe/London", "skip"), ("Europe/Paris", "skip")],
)
def test_a_schedule_its_policy_silences_is_refused_cheaply(zone: str, gap: Any) -> None:
    schedule = cron("30 2 * 3 0L", zone, dst_gap=gap)  # 02:30 local: in Europe's gap
    if zone == "Europe/London":  # London's gap is 01:00-02:00: 02:30 exists
        assert schedule.next_after(datetime(2026, 12, 1, tzinfo=UTC)) == datetime(
            2027, 3, 28, 1, 30, tzinfo=UTC
        )
        return
    budget = StepBudget(limit=10**9)
    with pytest.raises(NoFiringInHorizonError) as info:
        schedule.next_after_with_note(datetime(2026, 12, 1, tzinfo=UTC), budget=budget)
    assert info.value.field == "schedule"
    assert budget.used < 2_000  # 50 years: about 100 segments and 50 year tables
    with pytest.raises(NoFiringInHorizonError):  # the preview's path
        next_firings(schedule, datetime(2026, 12, 1, tzinfo=UTC), 5)


def test_rare_calendar_expressions_fit_the_horizon() -> None:
    """29 February on a Sunday recurs up to 40 years apart (2088 -> 2128: 2100 is not leap)."""
    sundays = [
        y for y in range(2080, 2200) if calendar.isleap(y) and calendar.weekday(y, 2, 29) == 6
    ]
    assert sundays[:3] == [2088, 2128, 2156]
    schedule = cron("0 0 29 2 */7")
    got = [r.utc.year for r in next_firings(schedule, datetime(2088, 3, 1, tzinfo=UTC), 3)]
    assert got == sundays[1:4]


# --- the tz database facts the search relies on ----------------------------------


def _check_changes(zone: str, years: range) -> None:
    changes = [c for year in years for c in year_transitions(load_zone(zone), year)]
    for a, b in itertools.pairwise(changes):
        assert b.at - a.at > timedelta(hours=72), zone
    for change in changes:
        assert abs(change.after - change.before) <= timedelta(hours=24), zone
        probe = load_zone(zone)
        assert (change.at - timedelta(seconds=1)).astimezone(probe).utcoffset() == change.before
        assert change.at.astimezone(probe).utcoffset() == change.after


# Zones with the tz database's largest changes: whole days (Samoa 2011, Kwajalein
# 1993, Alaska 1867), two-hour ones (Troll), Ramadan (Casablanca), 30 minutes.
EXTREME = [
    "Pacific/Apia",
    "Pacific/Kwajalein",
    "Pacific/Kiritimati",
    "America/Sitka",
    "America/Juneau",
    "America/Metlakatla",
    "Asia/Manila",
    "Antarctica/Troll",
    "Africa/Casablanca",
    "Australia/Lord_Howe",
    "Europe/Moscow",
]


@pytest.mark.parametrize("zone", EXTREME)
def test_offset_changes_are_far_apart_and_at_most_a_day(zone: str) -> None:
    _check_changes(zone, range(1800, 2101))


def test_offset_changes_of_every_zone_these_decades() -> None:
    """Every zone over 2020-2040 (the same check over 1800-2100 held on 2026-12-01, in
    about a minute: too slow for every run)."""
    for zone in ALL_ZONES:
        _check_changes(zone, range(2020, 2041))


# --- datetime's bounds, in every zone ----------------------------------------------


def _offset(zone: str, instant: datetime) -> timedelta:
    offset = instant.astimezone(load_zone(zone)).utcoffset()
    assert offset is not None
    return offset


def _next_wall_minute(t: datetime, offset: timedelta) -> datetime:
    """The first instant after ``t`` whose wall time (``+ offset``) is a whole minute."""
    into = ((t - FIRST) + offset) % timedelta(minutes=1)
    return t + (timedelta(minutes=1) - into)


def _next_wall_noon(t: datetime, offset: timedelta) -> datetime:
    """The first instant after ``t`` whose wall time is 12:00 (day arithmetic from year 1)."""
    wall = (t - FIRST) + offset  # wall time, as a span from 0001-01-01 00:00 (may be < 0)
    noon = timedelta(hours=12)
    days = (wall - noon) // timedelta(days=1) + 1
    return t + (noon + days * timedelta(days=1) - wall)


def test_every_zone_keeps_one_offset_until_1800() -> None:
    for zone in ALL_ZONES:
        offsets = {_offset(zone, datetime(y, 6, 1, tzinfo=UTC)) for y in (2, 401, 1000, 1799)}
        assert len(offsets) == 1, zone


@pytest.mark.parametrize("zone", ALL_ZONES)
def test_year_one_fires_in_every_zone(zone: str) -> None:
    offset = _offset(zone, FIRST + timedelta(days=10))  # local mean time, constant
    for t in (FIRST, FIRST + timedelta(hours=7, minutes=30, seconds=5), FIRST + timedelta(days=5)):
        assert cron("* * * * *", zone).next_after(t) == _next_wall_minute(t, offset)
        assert cron("0 12 * * *", zone).next_after(t) == _next_wall_noon(t, offset)
    # 1 January 00:00 wall time: west of UTC that is in year 1's first hours; east, a year on
    new_year = cron("0 0 1 1 *", zone).next_after(FIRST)
    expected = -offset if offset < timedelta(0) else timedelta(days=365) - offset
    assert new_year == FIRST + expected


@pytest.mark.parametrize("zone", ALL_ZONES)
def test_year_9999_fires_then_ends_in_every_zone(zone: str) -> None:
    t = datetime(9999, 12, 30, 0, 0, 30, tzinfo=UTC)
    offset = _offset(zone, t)
    assert all(c.at.month < 12 for c in year_transitions(load_zone(zone), 9999))
    noon = _next_wall_noon(t, offset)
    assert cron("0 12 * * *", zone).next_after(t) == noon
    minute = _next_wall_minute(t, offset)
    assert cron("* * * * *", zone).next_after(t) == minute
    # the last wall minute whose instant is representable, then the end of time
    assert offset % timedelta(minutes=1) == timedelta(0)
    last_minute = datetime(9999, 12, 31, 23, 59, tzinfo=UTC)
    assert cron("* * * * *", zone).next_after(last_minute - timedelta(seconds=1)) == last_minute
    assert cron("* * * * *", zone).next_after(last_minute) is None
    # 1 January 10000 00:00 wall time: east of UTC its instant is still in 9999
    new_year = cron("0 0 1 1 *", zone).next_after(t)
    if offset > timedelta(0):
        assert new_year == datetime(9999, 12, 31, tzinfo=UTC) + (timedelta(days=1) - offset)
    else:
        assert new_year is None


def test_a_preview_stops_where_local_time_ends() -> None:
    """1 January 10000 00:00 in Tokyo is 9999-12-31T15:00Z: the schedule fires then,
    but its local time cannot be shown, so the preview ends before it."""
    schedule = cron("0 0 1 1 *", "Asia/Tokyo")
    after = datetime(9999, 12, 31, tzinfo=UTC)
    assert schedule.next_after(after) == datetime(9999, 12, 31, 15, tzinfo=UTC)
    assert next_firings(schedule, after, 3) == []
    daily = next_firings(cron("0 0 * * *", "Asia/Tokyo"), datetime(9999, 12, 29, tzinfo=UTC), 5)
    assert [r.utc for r in daily] == [
        datetime(9999, 12, 29, 15, tzinfo=UTC),
        datetime(9999, 12, 30, 15, tzinfo=UTC),
    ]
