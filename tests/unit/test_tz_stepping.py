"""The segment-walking search of tz.next_instant against a slow reference.

The reference is the previous implementation: it enumerates every matching wall
time from one transition's size before ``t`` until no later wall time can beat
the best instant found (so a per-second schedule costs an hour of wall times at
a one-hour change). It is slow and simple; the fast search must give the same
instants and the same notes everywhere, and above all next to offset changes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cronwheel.bench.tzsteps import transitions
from cronwheel.domain.cron import parse_cron
from cronwheel.domain.tz import (
    DstGap,
    DstOverlap,
    Resolved,
    next_instant,
    offset_at,
    resolve_wall,
    transition_near,
)
from cronwheel.domain.tzdb import load_zone
from cronwheel.errors import InvalidScheduleError

_TINY = timedelta(microseconds=1)


def reference_next_instant(
    next_wall: Callable[[datetime], datetime | None],
    zone: ZoneInfo,
    gap: DstGap,
    overlap: DstOverlap,
    t: datetime,
) -> Resolved | None:
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
                if (
                    best is None
                    or candidate.utc < best.utc
                    or (
                        candidate.utc == best.utc
                        and best.note is not None
                        and candidate.note is None
                    )
                ):
                    best = candidate
                    near_best = transition_near(zone, candidate.utc)
                    stop = (
                        wall
                        if near_best is None
                        else candidate.utc.replace(tzinfo=None) + max(near_best)
                    )
                break
        if best is not None and stop is not None and _past_stop(wall, stop, best):
            return best
        cursor = wall


def _past_stop(wall: datetime, stop: datetime, best: Resolved) -> bool:
    return wall > stop or (wall == stop and best.note is None)


# Zones with 1-hour, 30-minute (Lord Howe), 45-minute-offset (Chatham), 2-hour
# (Troll), Ramadan (Casablanca) and whole-day (Apia 2011) changes, both hemispheres.
ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "Antarctica/Troll",
    "Africa/Casablanca",
    "America/Santiago",
    "Pacific/Apia",
    "Europe/Moscow",
    "America/St_Johns",
]
SECOND = st.sampled_from(["0", "*", "*/20", "15,45", "59"])
MINUTE = st.sampled_from(["*", "0", "30", "*/15", "*/7", "5,35", "59", "0-10"])
HOUR = st.sampled_from(["*", "*/2", "0", "1", "2", "3", "1-3", "0-3", "23", "2,14"])
DOM = st.sampled_from(["*", "*", "1", "L", "1-7", "29", "26", "8-14"])
MONTH = st.sampled_from(["*", "*", "3,4,9,10,11", "1-6"])
DOW = st.sampled_from(["*", "*", "*", "sun", "0L", "6"])
GAP = st.sampled_from(["next_valid", "skip", "shift"])
OVERLAP = st.sampled_from(["once", "twice"])


@st.composite
def near_change(draw: Any, zone: str) -> datetime:
    """An instant within 40 hours of one of the zone's offset changes."""
    year = 2011 if zone == "Pacific/Apia" else draw(st.integers(2005, 2035))
    found = transitions(
        load_zone(zone), datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)
    )
    if not found:
        found = [datetime(year, 6, 1, tzinfo=UTC)]
    when = draw(st.sampled_from(found))
    seconds = draw(st.integers(-40 * 3600, 40 * 3600))
    micros = draw(st.sampled_from([0, 0, 0, 1, 999_999]))
    return when + timedelta(seconds=seconds, microseconds=micros)


@st.composite
def cases(draw: Any) -> tuple[str, str, str, str, datetime]:
    zone = draw(st.sampled_from(ZONES))
    seconds = draw(st.integers(0, 4)) == 0
    fields = [draw(MINUTE), draw(HOUR), draw(DOM), draw(MONTH), draw(DOW)]
    if seconds:
        fields.insert(0, draw(SECOND))
    return " ".join(fields), zone, draw(GAP), draw(OVERLAP), draw(near_change(zone))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_next_instant_matches_the_reference(case: tuple[str, str, Any, Any, datetime]) -> None:
    expr, zone_name, gap, overlap, t = case
    try:
        parsed = parse_cron(expr)
    except InvalidScheduleError:
        return
    zone = load_zone(zone_name)
    cursor = t
    for _ in range(4):
        expected = reference_next_instant(parsed.next_wall, zone, gap, overlap, cursor)
        got = next_instant(parsed.next_wall, zone, gap, overlap, cursor)
        assert got == expected, (expr, zone_name, gap, overlap, cursor)
        if got is None:
            return
        cursor = got.utc


def test_reference_is_the_slow_one() -> None:
    """The reference walks every wall time of the change: it is an independent path."""
    calls = 0
    parsed = parse_cron("* * * * * *")

    def counting(after: datetime) -> datetime | None:
        nonlocal calls
        calls += 1
        return parsed.next_wall(after)

    zone = load_zone("Europe/Berlin")
    t = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)  # 01:30 CET, 30 minutes before the gap
    got = reference_next_instant(counting, zone, "skip", "twice", t)
    assert got == Resolved(t + timedelta(seconds=1))
    assert calls > 3600  # an hour of wall times, one by one
    assert offset_at(zone, t) == timedelta(hours=1)


def test_an_overlap_after_a_sparse_match_is_not_jumped_over() -> None:
    """Moscow, 2014-10-26 02:00 MSK (+4) -> 01:00 (+3) at 22:00Z: 01:00 happens twice.
    From the first 01:00 the next matching wall time is a year away, yet the second
    01:00 comes an hour later, in the next segment."""
    parsed = parse_cron("0 1 26 10 *")
    zone = load_zone("Europe/Moscow")
    cursor = datetime(2014, 10, 25, 12, tzinfo=UTC)
    got = []
    for _ in range(3):
        step = next_instant(parsed.next_wall, zone, "next_valid", "twice", cursor)
        assert step == reference_next_instant(parsed.next_wall, zone, "next_valid", "twice", cursor)
        assert step is not None
        got.append(step.utc)
        cursor = step.utc
    assert got == [
        datetime(2014, 10, 25, 21, tzinfo=UTC),
        datetime(2014, 10, 25, 22, tzinfo=UTC),
        datetime(2015, 10, 25, 22, tzinfo=UTC),
    ]


@st.composite
def on_change_day(draw: Any) -> tuple[str, str, str, str, datetime]:
    """A sparse expression matching only around a change's wall time, on that date."""
    zone_name = draw(st.sampled_from(ZONES))
    zone = load_zone(zone_name)
    year = 2011 if zone_name == "Pacific/Apia" else draw(st.integers(2005, 2035))
    found = transitions(
        zone, datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)
    )
    when = draw(st.sampled_from(found)) if found else datetime(year, 6, 1, tzinfo=UTC)
    wall = when.astimezone(zone) - timedelta(seconds=1)  # the last wall time before it
    hours = sorted({(wall.hour + d) % 24 for d in draw(st.sampled_from([(0,), (-1, 0, 1), (1,)]))})
    minute = draw(st.sampled_from(["0", "*", "*/15", "30", "59"]))
    expr = f"{minute} {','.join(map(str, hours))} {wall.day} {wall.month} *"
    t = when + timedelta(seconds=draw(st.integers(-30 * 3600, 30 * 3600)))
    return expr, zone_name, draw(GAP), draw(OVERLAP), t


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(on_change_day())
def test_sparse_expressions_on_change_days_match_the_reference(
    case: tuple[str, str, Any, Any, datetime],
) -> None:
    expr, zone_name, gap, overlap, t = case
    parsed = parse_cron(expr)
    zone = load_zone(zone_name)
    cursor = t
    for _ in range(3):
        expected = reference_next_instant(parsed.next_wall, zone, gap, overlap, cursor)
        got = next_instant(parsed.next_wall, zone, gap, overlap, cursor)
        assert got == expected, (expr, zone_name, gap, overlap, cursor)
        if got is None:
            return
        cursor = got.utc
