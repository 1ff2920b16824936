"""Schedule values: constructors, validation, serialisation and Hypothesis properties."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cronwheel.domain.schedules import (
    EPOCH,
    AtSchedule,
    CronSchedule,
    EverySchedule,
    NowSchedule,
    Schedule,
    at,
    cron,
    every,
    format_duration,
    now,
    parse_duration,
    parse_instant,
    schedule_from_dict,
)
from cronwheel.domain.tz import offset_at, resolve_wall
from cronwheel.errors import InvalidScheduleError, UnknownTimezoneError, ValidationError


def u(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# --- durations ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("5m", timedelta(minutes=5)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("2d", timedelta(days=2)),
        ("1w2d", timedelta(days=9)),
        ("500ms", timedelta(milliseconds=500)),
        ("1s500ms", timedelta(seconds=1.5)),
        ("250us", timedelta(microseconds=250)),
        ("36525d", timedelta(days=36525)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected
    assert parse_duration(format_duration(expected)) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "expected a duration"),
        ("5", "bad duration"),
        ("m", "bad duration"),
        ("5x", "bad duration"),
        ("-5m", "bad duration"),
        ("1.5h", "bad duration"),
        (" 5m", "bad duration"),
        ("5m ", "bad duration"),
        ("5M", "bad duration"),
        ("30m1h", "largest first"),
        ("1m1m", "largest first"),
        ("0s", "must be positive"),
        ("36526d", "exceeds 100 years"),
        ("999999999999w", "too large"),
        ("\u0665m", "bad duration"),
        ("5m" * 40, "expected a duration"),
    ],
)
def test_parse_duration_rejects(text: str, reason: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_duration(text, field="timeout")
    assert info.value.field == "timeout"
    assert reason in info.value.message


# --- instants -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-03-29T01:00:00Z", datetime(2026, 3, 29, 1, tzinfo=UTC)),
        ("2026-03-29t01:00:00z", datetime(2026, 3, 29, 1, tzinfo=UTC)),
        ("2026-03-29 03:00:00+02:00", datetime(2026, 3, 29, 1, tzinfo=UTC)),
        ("2026-03-28T20:00:00-05:00", datetime(2026, 3, 29, 1, tzinfo=UTC)),
        ("2026-03-29T01:00:00.5Z", datetime(2026, 3, 29, 1, 0, 0, 500000, tzinfo=UTC)),
        ("2026-03-29T01:00:00.123456789Z", datetime(2026, 3, 29, 1, 0, 0, 123456, tzinfo=UTC)),
        ("0001-01-01T00:00:00Z", datetime(1, 1, 1, tzinfo=UTC)),
        ("2026-01-01T00:00:00+23:59", datetime(2025, 12, 31, 0, 1, tzinfo=UTC)),
    ],
)
def test_parse_instant(text: str, expected: datetime) -> None:
    got = parse_instant(text, "at")
    assert got == expected
    assert got.tzinfo is UTC


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("2026-01-01", id="date-only"),
        pytest.param("2026-01-01T00:00:00", id="naive"),
        pytest.param("2026-01-01T00:00Z", id="no-seconds"),
        pytest.param("20260101T000000Z", id="basic-format"),
        pytest.param("0000-01-01T00:00:00Z", id="year-0"),
        pytest.param("10000-01-01T00:00:00Z", id="year-10000"),
        pytest.param("9999-12-31T23:00:00-05:00", id="overflows-utc"),
        pytest.param("2026-01-01T00:00:00+24:00", id="offset-24h"),
        pytest.param("2026-01-01T00:00:00+05:60", id="offset-minutes-60"),
        pytest.param("2026-01-01T00:00:00+0500", id="offset-no-colon"),
        pytest.param("2026-02-30T00:00:00Z", id="feb-30"),
        pytest.param("2026-01-01T24:00:00Z", id="hour-24"),
        pytest.param("2026-12-31T23:59:60Z", id="leap-second"),
        pytest.param("2026-01-01T00:00:00.Z", id="empty-fraction"),
        pytest.param("2026-\u0661\u0662-01T00:00:00Z", id="arabic-digits"),
        pytest.param(" 2026-01-01T00:00:00Z", id="leading-space"),
        pytest.param("2026-01-01T00:00:00Z\n", id="trailing-newline"),
        pytest.param("now", id="word"),
        pytest.param("", id="empty"),
    ],
)
def test_parse_instant_rejects(text: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_instant(text, "at")
    assert info.value.field == "at"
    assert "\n" not in info.value.message


# --- constructors -------------------------------------------------------------------


def test_cron_defaults_to_utc_never_the_host_zone() -> None:
    schedule = cron("0 9 * * *")
    assert schedule.tz == "UTC"
    assert schedule.next_after(u("2026-01-01T00:00:00Z")) == u("2026-01-01T09:00:00Z")


def test_cron_schedule_is_a_frozen_value() -> None:
    schedule = cron(" 0 9 * * mon-fri ", "Europe/Berlin")
    assert schedule == CronSchedule(expr="0 9 * * mon-fri", tz="Europe/Berlin")
    assert hash(schedule) == hash(CronSchedule(expr="0 9 * * mon-fri", tz="Europe/Berlin"))
    assert schedule.expr == "0 9 * * mon-fri"
    assert schedule.expr_obj.hours == (9,)
    assert schedule.zone.key == "Europe/Berlin"
    assert schedule.kind == "cron"
    with pytest.raises(AttributeError):
        schedule.tz = "UTC"  # type: ignore[misc]
    assert schedule.describe() == "cron '0 9 * * mon-fri' in Europe/Berlin (dst: next_valid/once)"


@pytest.mark.parametrize(
    ("kwargs", "exc", "field"),
    [
        ({"expr": "61 * * * *"}, InvalidScheduleError, "cron"),
        ({"expr": "0 0 30 2 *"}, InvalidScheduleError, "cron"),
        ({"expr": "* * * * *", "tz": "Mars/Olympus"}, UnknownTimezoneError, "tz"),
        ({"expr": "* * * * *", "tz": ""}, UnknownTimezoneError, "tz"),
        ({"expr": "* * * * *", "dst_gap": "later"}, InvalidScheduleError, "dst_gap"),
        ({"expr": "* * * * *", "dst_overlap": "thrice"}, InvalidScheduleError, "dst_overlap"),
    ],
)
def test_cron_schedule_validates_at_construction(
    kwargs: dict[str, Any], exc: type[Exception], field: str
) -> None:
    with pytest.raises(exc) as info:
        CronSchedule(**kwargs)
    assert getattr(info.value, "field", None) == field


def test_every() -> None:
    assert every("90s") == EverySchedule(interval=timedelta(seconds=90), anchor=EPOCH)
    assert every(1.5).interval == timedelta(seconds=1.5)
    assert every(60).interval == timedelta(minutes=1)
    assert every(timedelta(hours=1)).describe() == "every 1h"
    schedule = every(
        "1h30m", anchor=datetime(2026, 1, 1, 0, 10, tzinfo=timezone(timedelta(hours=2)))
    )
    assert schedule.anchor == u("2025-12-31T22:10:00Z")
    assert schedule.anchor.tzinfo is UTC
    assert schedule.next_after(u("2026-01-01T00:00:00Z")) == u("2026-01-01T01:10:00Z")
    assert schedule.next_after(u("2025-12-31T22:10:00Z")) == u("2025-12-31T23:40:00Z")
    # before the anchor: k may be negative
    assert schedule.next_after(u("2025-12-31T20:00:00Z")) == u("2025-12-31T20:40:00Z")
    assert every("5m").next_after(u("2026-01-01T00:02:00Z")) == u("2026-01-01T00:05:00Z")
    assert every("5m").next_after(u("2026-01-01T00:05:00Z")) == u("2026-01-01T00:10:00Z")


@pytest.mark.parametrize(
    "interval",
    [
        0,
        -1,
        0.0001,
        float("nan"),
        float("inf"),
        "0s",
        "5x",
        timedelta(0),
        timedelta(microseconds=999),
        timedelta(days=36526),
        True,
        1e20,
    ],
)
def test_every_rejects(interval: Any) -> None:
    with pytest.raises(InvalidScheduleError) as info:
        every(interval)
    assert info.value.field == "interval"


def test_every_rejects_naive_anchor() -> None:
    with pytest.raises(InvalidScheduleError) as info:
        every("5m", anchor=datetime(2026, 1, 1))
    assert info.value.field == "anchor"


def test_every_near_the_end_of_time() -> None:
    assert every("1d").next_after(datetime(9999, 12, 31, 12, tzinfo=UTC)) is None


def test_at() -> None:
    schedule = at("2026-05-01T11:00:00+02:00")
    assert schedule == AtSchedule(at=u("2026-05-01T09:00:00Z"))
    assert schedule.at.tzinfo is UTC
    assert schedule.next_after(u("2026-05-01T08:59:59Z")) == u("2026-05-01T09:00:00Z")
    assert schedule.next_after(u("2026-05-01T09:00:00Z")) is None
    assert at(datetime(2026, 5, 1, 9, tzinfo=UTC)) == schedule
    assert schedule.describe() == "at 2026-05-01T09:00:00Z"


@pytest.mark.parametrize(
    "value", ["2026-05-01T09:00:00", "2026-05-01", datetime(2026, 5, 1, 9), "tomorrow"]
)
def test_at_rejects_naive(value: Any) -> None:
    with pytest.raises(InvalidScheduleError) as info:
        at(value)
    assert info.value.field == "at"


def test_now() -> None:
    assert now() == NowSchedule()
    assert now().next_after(u("2026-01-01T00:00:00Z")) is None
    assert now().describe() == "now"


def test_next_after_requires_aware() -> None:
    for schedule in (cron("* * * * *"), every("1m"), at("2026-01-01T00:00:00Z"), now()):
        with pytest.raises(ValueError, match="aware"):
            schedule.next_after(datetime(2026, 1, 1))


def test_next_after_accepts_any_aware_zone() -> None:
    t = datetime(2026, 1, 1, 10, tzinfo=timezone(timedelta(hours=10)))  # = 00:00Z
    assert cron("30 0 * * *").next_after(t) == u("2026-01-01T00:30:00Z")


def test_cron_exhausted_near_year_9999() -> None:
    assert cron("0 0 1 1 *").next_after(datetime(9999, 6, 1, tzinfo=UTC)) is None
    assert (
        cron("0 0 1 1 *", "Pacific/Kiritimati").next_after(datetime(9999, 12, 31, 11, tzinfo=UTC))
        is None
    )


# --- serialisation ------------------------------------------------------------------

SCHEDULES: list[Schedule] = [
    now(),
    at("2026-05-01T09:00:00Z"),
    at("2026-05-01T09:00:00.25Z"),
    every("90s"),
    every("1h30m", anchor=u("2026-01-01T00:10:00Z")),
    every("1ms"),
    cron("0 9 * * mon-fri", "Europe/Berlin"),
    cron("*/15 2 * * *", "America/New_York", dst_gap="shift", dst_overlap="twice"),
    cron("@hourly"),
]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: s.describe())
def test_to_dict_round_trips_through_json(schedule: Schedule) -> None:
    data = json.loads(json.dumps(schedule.to_dict()))
    assert schedule_from_dict(data) == schedule
    assert data["kind"] == schedule.kind


def test_to_dict_shapes() -> None:
    assert cron("0 9 * * *", "Europe/Berlin").to_dict() == {
        "kind": "cron",
        "cron": "0 9 * * *",
        "tz": "Europe/Berlin",
        "dst_gap": None,
        "dst_overlap": None,
    }
    assert every("1h30m").to_dict() == {
        "kind": "every",
        "interval": "1h30m",
        "anchor": "1970-01-01T00:00:00Z",
    }
    assert at("2026-05-01T09:00:00Z").to_dict() == {"kind": "at", "at": "2026-05-01T09:00:00Z"}
    assert now().to_dict() == {"kind": "now"}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({}, "schedule.kind"),
        ({"kind": "sometimes"}, "schedule.kind"),
        ({"kind": 1}, "schedule.kind"),
        ({"kind": "cron"}, "schedule.cron"),
        ({"kind": "cron", "cron": "61 * * * *"}, "schedule.cron"),
        ({"kind": "cron", "cron": 5}, "schedule.cron"),
        ({"kind": "cron", "cron": "* * * * *", "tz": "Mars/Olympus"}, "schedule.tz"),
        ({"kind": "cron", "cron": "* * * * *", "tz": ""}, "schedule.tz"),
        ({"kind": "cron", "cron": "* * * * *", "dst_gap": "later"}, "schedule.dst_gap"),
        ({"kind": "cron", "cron": "* * * * *", "dst_overlap": 2}, "schedule.dst_overlap"),
        ({"kind": "cron", "cron": "* * * * *", "extra": 1}, "schedule.extra"),
        ({"kind": "every", "interval": "0s"}, "schedule.interval"),
        ({"kind": "every", "interval": 5}, "schedule.interval"),
        ({"kind": "every", "interval": "5m", "anchor": "2026-01-01"}, "schedule.anchor"),
        ({"kind": "at", "at": "2026-01-01T00:00:00"}, "schedule.at"),
        ({"kind": "at"}, "schedule.at"),
        ({"kind": "now", "at": "2026-01-01T00:00:00Z"}, "schedule.at"),
    ],
)
def test_schedule_from_dict_rejects(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        schedule_from_dict(data)
    assert info.value.field == field


def test_schedule_from_dict_rejects_non_mapping() -> None:
    with pytest.raises(InvalidScheduleError):
        schedule_from_dict(["cron"])  # type: ignore[arg-type]


# --- Hypothesis properties ----------------------------------------------------------

ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "Europe/Moscow",
    "Pacific/Apia",
    "America/Santiago",
    "Pacific/Chatham",
]
# Cron expressions with at most a few hundred matches a day, mixing fixed and
# wildcard hours so both default policies are exercised.
MINUTE = st.sampled_from(["0", "30", "*/15", "*/20", "5,35", "59", "0-10/5"])
HOUR = st.sampled_from(["*", "*/2", "0", "1", "2", "3", "1-3", "2,14", "0-23/6", "23"])
DOM = st.sampled_from(["*", "*", "1", "15", "L", "1-7", "29", "31"])
MONTH = st.sampled_from(["*", "*", "3", "10", "3,4,9,10,11", "1-6"])
DOW = st.sampled_from(["*", "*", "*", "sun", "1-5", "0L", "0#1", "6"])
EXPRS = st.builds(lambda *f: " ".join(f), MINUTE, HOUR, DOM, MONTH, DOW)
GAP = st.sampled_from([None, "next_valid", "skip", "shift"])
OVERLAP = st.sampled_from([None, "once", "twice"])
# Instants near the spring/autumn transitions of several years, plus anywhere.
NEAR_TRANSITIONS = st.builds(
    lambda year, month, day, minutes: (
        datetime(year, month, day, tzinfo=UTC) + timedelta(minutes=minutes)
    ),
    st.integers(2010, 2030),
    st.sampled_from([3, 4, 9, 10, 11, 12]),
    st.integers(1, 28),
    st.integers(0, 3 * 1440),
)
INSTANTS = st.one_of(
    NEAR_TRANSITIONS,
    st.datetimes(
        min_value=datetime(1990, 1, 1), max_value=datetime(2060, 1, 1), timezones=st.just(UTC)
    ),
)


def _schedule(expr: str, tz: str, gap: Any, overlap: Any) -> CronSchedule | None:
    try:
        return cron(expr, tz, dst_gap=gap, dst_overlap=overlap)
    except InvalidScheduleError:
        return None  # e.g. "0 0 31 3,4,9 *" is fine, but "0 0 31 4 *" never fires


def _reference(schedule: CronSchedule, t: datetime, until: datetime) -> list[datetime]:
    """All firing instants in (t, until] by brute force: enumerate every matching
    wall time in a wide window, resolve each, sort and de-duplicate."""
    zone, expr = schedule.zone, schedule.expr_obj
    local = t.astimezone(zone).replace(tzinfo=None)
    cursor: datetime | None = local - timedelta(days=2)
    end = until.astimezone(zone).replace(tzinfo=None) + timedelta(days=2)
    found: set[datetime] = set()
    while cursor is not None and cursor < end:
        cursor = expr.next_wall(cursor)
        if cursor is None:
            break
        for r in resolve_wall(cursor, zone, schedule.gap, schedule.overlap):
            if t < r.utc <= until:
                found.add(r.utc)
    return sorted(found)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(EXPRS, st.sampled_from(ZONES), GAP, OVERLAP, INSTANTS)
def test_cron_properties(expr: str, tz: str, gap: Any, overlap: Any, t: datetime) -> None:
    schedule = _schedule(expr, tz, gap, overlap)
    if schedule is None:
        return
    first = schedule.next_after_with_note(t)
    assert first is not None
    # strictly after, aware UTC, stable under repeated calls
    assert first.utc > t
    assert first.utc.tzinfo is UTC
    assert schedule.next_after_with_note(t) == first
    # the instant is a real instant whose wall time matches, unless a gap rule moved it
    wall = first.utc.astimezone(schedule.zone).replace(tzinfo=None)
    if first.note is None or first.note.startswith("dst_overlap"):
        assert schedule.expr_obj.matches(wall)
    elif first.note.startswith("dst_gap:next_valid"):
        assert schedule.gap == "next_valid"
        assert offset_at(schedule.zone, first.utc - timedelta(seconds=1)) != offset_at(
            schedule.zone, first.utc
        )
    else:
        assert schedule.gap == "shift"
        before = offset_at(schedule.zone, first.utc - timedelta(days=2))
        original = (first.utc + before).replace(tzinfo=None)
        assert schedule.expr_obj.matches(original)
        assert first in resolve_wall(original, schedule.zone, "shift", schedule.overlap)
    # iterating gives strictly increasing unique instants, equal to brute force
    got = [first.utc]
    while len(got) < 12:
        nxt = schedule.next_after(got[-1])
        assert nxt is not None
        assert nxt > got[-1]
        got.append(nxt)
    until = got[-1]
    assert got == _reference(schedule, t, until)


@settings(max_examples=200, deadline=None)
@given(
    st.timedeltas(min_value=timedelta(milliseconds=1), max_value=timedelta(days=3650)),
    st.datetimes(
        min_value=datetime(1900, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
    ),
    st.datetimes(
        min_value=datetime(1900, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
    ),
)
def test_every_properties(interval: timedelta, anchor: datetime, t: datetime) -> None:
    schedule = every(interval, anchor=anchor)
    nxt = schedule.next_after(t)
    assert nxt is not None
    assert nxt > t
    assert nxt - interval <= t
    assert (nxt - anchor) % interval == timedelta(0)
    assert schedule.next_after(t) == nxt
    assert schedule.next_after(nxt) == nxt + interval
    assert schedule_from_dict(json.loads(json.dumps(schedule.to_dict()))) == schedule


@settings(max_examples=100, deadline=None)
@given(EXPRS, st.sampled_from(ZONES), GAP, OVERLAP)
def test_cron_round_trip_property(expr: str, tz: str, gap: Any, overlap: Any) -> None:
    schedule = _schedule(expr, tz, gap, overlap)
    if schedule is None:
        return
    assert schedule_from_dict(json.loads(json.dumps(schedule.to_dict()))) == schedule
