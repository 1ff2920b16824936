"""Calendars of the `holidays` data: which local days a cron schedule skips, across years
and zones, and how a bad name is refused."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from cronwheel.domain.calendars import CalendarRules, calendar_named
from cronwheel.domain.jobs import first_fire_at
from cronwheel.domain.schedules import cron, next_firings, schedule_from_dict
from cronwheel.domain.transitions import StepBudget
from cronwheel.errors import InvalidScheduleError, NoFiringInHorizonError


def _local_days(schedule, after: datetime, count: int) -> list[date]:
    return [r.utc.astimezone(schedule.zone).date() for r in next_firings(schedule, after, count)]


def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_bavaria_excludes_epiphany_and_berlin_does_not() -> None:
    by = cron("0 9 * * *", tz="Europe/Berlin", calendar="DE-BY")
    be = cron("0 9 * * *", tz="Europe/Berlin", calendar="DE-BE")
    after = _utc(2027, 1, 5)
    assert _local_days(by, after, 2) == [date(2027, 1, 5), date(2027, 1, 7)]
    assert _local_days(be, after, 2) == [date(2027, 1, 5), date(2027, 1, 6)]
    assert by.excluded_by_calendar(_utc(2027, 1, 6, 8)) == "Heilige Drei Könige (DE-BY)"
    assert be.excluded_by_calendar(_utc(2027, 1, 6, 8)) is None


@pytest.mark.parametrize(
    "corpus_christi",
    [date(2026, 6, 4), date(2027, 5, 27), date(2028, 6, 15)],  # Easter + 60 days
)
def test_corpus_christi_moves_with_easter(corpus_christi: date) -> None:
    by = cron("0 9 * * *", tz="Europe/Berlin", calendar="DE-BY")
    be = cron("0 9 * * *", tz="Europe/Berlin", calendar="DE-BE")
    day_before = datetime.combine(corpus_christi - timedelta(days=1), datetime.min.time(), UTC)
    assert corpus_christi not in _local_days(by, day_before, 2)
    assert corpus_christi in _local_days(be, day_before, 2)
    instant = datetime.combine(corpus_christi, datetime.min.time(), UTC) + timedelta(hours=7)
    assert by.excluded_by_calendar(instant) == "Fronleichnam (DE-BY)"


@pytest.mark.parametrize(
    "thanksgiving",
    [date(2026, 11, 26), date(2027, 11, 25), date(2028, 11, 23)],  # 4th Thursday of November
)
def test_us_thanksgiving_in_new_york(thanksgiving: date) -> None:
    schedule = cron("0 9 * * mon-fri", tz="America/New_York", calendar="US")
    monday = thanksgiving - timedelta(days=3)
    days = _local_days(schedule, datetime.combine(monday, datetime.min.time(), UTC), 4)
    assert days == [
        monday,
        monday + timedelta(days=1),
        monday + timedelta(days=2),
        monday + timedelta(days=4),
    ]


def test_japan_in_tokyo_coming_of_age_day() -> None:
    schedule = cron("0 9 * * mon-fri", tz="Asia/Tokyo", calendar="JP")
    # 2027-01-11 is the second Monday of January (Coming of Age Day)
    days = _local_days(schedule, _utc(2027, 1, 7, 12), 2)
    assert days == [date(2027, 1, 8), date(2027, 1, 12)]
    assert "成人の日" in (schedule.excluded_by_calendar(_utc(2027, 1, 11, 0)) or "")


def test_the_local_date_decides_not_the_utc_date() -> None:
    # 00:30 in Berlin on 6 January is 23:30 UTC on the 5th: excluded (local 6 January)
    early = cron("30 0 * * *", tz="Europe/Berlin", calendar="DE-BY")
    got = next_firings(early, _utc(2027, 1, 5, 12), 1)[0].utc
    assert got == _utc(2027, 1, 6, 23, 30)  # 00:30 on the 7th, local
    # 20:00 in New York on Thanksgiving eve is 01:00 UTC on Thanksgiving: it fires;
    # 20:00 on Thanksgiving (01:00 UTC the day after) does not
    evening = cron("0 20 * * *", tz="America/New_York", calendar="US")
    got = [r.utc for r in next_firings(evening, _utc(2026, 11, 25, 12), 2)]
    assert got == [_utc(2026, 11, 26, 1), _utc(2026, 11, 28, 1)]


def test_a_dst_moved_occurrence_is_judged_by_its_local_date() -> None:
    # 2027-03-28 is Easter Sunday and Europe's spring-forward day: 02:30 does not exist
    # and next_valid moves it to 03:00 CEST. Brandenburg keeps Easter Sunday as a public
    # holiday; Bavaria does not.
    bb = cron("30 2 * * *", tz="Europe/Berlin", calendar="DE-BB")
    by = cron("30 2 * * *", tz="Europe/Berlin", calendar="DE-BY")
    after = _utc(2027, 3, 27, 12)
    (moved,) = next_firings(by, after, 1)
    assert moved.utc == _utc(2027, 3, 28, 1) and moved.note is not None
    # Brandenburg: Easter Sunday and Easter Monday are skipped
    assert next_firings(bb, after, 1)[0].utc == _utc(2027, 3, 30, 0, 30)


def test_a_dense_schedule_jumps_over_an_excluded_day() -> None:
    # every second: 86,400 occurrences on each of 25 and 26 December; the search
    # resumes at local midnight of the next allowed day
    schedule = cron("* * * * * *", tz="Europe/Berlin", calendar="DE")
    budget = StepBudget()
    found = schedule.next_after_with_note(_utc(2026, 12, 24, 22, 59, 59), budget=budget)
    assert found is not None and found.utc == _utc(2026, 12, 26, 23)
    assert budget.used < 100


def test_a_schedule_whose_every_day_is_excluded_reports_no_firing() -> None:
    new_year = cron("0 9 1 1 *", tz="Europe/Berlin", calendar="DE")
    budget = StepBudget()
    with pytest.raises(NoFiringInHorizonError, match="calendar DE excludes") as caught:
        new_year.next_after_with_note(_utc(2026, 12, 1), budget=budget)
    assert caught.value.field == "schedule.calendar"
    assert budget.used < 2000
    with pytest.raises(NoFiringInHorizonError):
        first_fire_at(new_year, _utc(2026, 12, 1))


def test_the_holidays_data_ends_at_2100() -> None:
    # outside the years the data covers, no day is excluded: every occurrence fires
    schedule = cron("0 9 25 12 *", tz="Europe/Berlin", calendar="DE")
    assert schedule.excluded_by_calendar(_utc(2101, 12, 25, 8)) is None
    assert schedule.next_after(_utc(2100, 12, 1)) == _utc(2101, 12, 25, 8)


def test_markets_and_aliases() -> None:
    nyse = cron("30 9 * * mon-fri", tz="America/New_York", calendar="NYSE")
    assert nyse.next_after(_utc(2027, 3, 25, 14)) == _utc(2027, 3, 29, 13, 30)  # Good Friday
    assert cron("0 9 * * *", calendar="DE-Bayern").calendar == "DE-BY"
    assert calendar_named("US-NY").name == "US-NY"


def test_the_calendar_round_trips_and_is_absent_when_unset() -> None:
    schedule = cron("0 9 * * mon-fri", tz="Europe/Berlin", calendar="DE-BY")
    doc = schedule.to_dict()
    assert doc["calendar"] == "DE-BY"
    assert schedule_from_dict(doc) == schedule
    assert "calendar" not in cron("0 9 * * *").to_dict()  # older jobs keep their spec hash
    assert schedule != cron("0 9 * * mon-fri", tz="Europe/Berlin", calendar="DE-BE")
    assert "calendar DE-BY" in schedule.describe()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("XX", "no country XX"),
        ("DE-ZZ", "DE has no subdivision 'ZZ'"),
        ("ZZZ", "no market ZZZ"),
        ("De-BY", "upper-case country code"),
        ("office!", "lower-case letter, then up to 63"),
        ("D", "not a calendar name"),
        ("US-", "not a calendar name"),
        ("", "not a calendar name"),
    ],
)
def test_a_bad_calendar_is_refused_naming_the_field(name: str, message: str) -> None:
    with pytest.raises(InvalidScheduleError, match=message) as caught:
        cron("0 9 * * *", calendar=name)
    assert caught.value.field == "calendar"
    doc = {"kind": "cron", "cron": "0 9 * * *", "calendar": name}
    with pytest.raises(InvalidScheduleError, match=message) as caught:
        schedule_from_dict(doc)
    assert caught.value.field == "schedule.calendar"


def test_a_non_string_calendar_is_refused() -> None:
    with pytest.raises(InvalidScheduleError, match="expected a string") as caught:
        schedule_from_dict({"kind": "cron", "cron": "0 9 * * *", "calendar": 7})
    assert caught.value.field == "schedule.calendar"


# -- stored calendars' rules ---------------------------------------------------------------
OFFICE = CalendarRules.from_dict(
    {
        "holidays": "DE-BY",
        "weekdays": "mon-fri",
        "exclude": ["2026-12-24", "2026-12-31"],
        "include": ["2027-01-06"],
    }
)


def test_rules_include_over_a_holiday_and_exclude_dates_and_weekdays() -> None:
    schedule = cron("0 9 * * *", tz="Europe/Berlin", calendar="office").with_calendar_rules(OFFICE)
    days = _local_days(schedule, _utc(2026, 12, 22), 6)
    # 24th excluded, 25th/26th holidays (26th a Saturday), 27th Sunday, 31st excluded,
    # 1 January a holiday, 2/3 a weekend; 6 January (Epiphany) included
    assert days == [
        date(2026, 12, 22),
        date(2026, 12, 23),
        date(2026, 12, 28),
        date(2026, 12, 29),
        date(2026, 12, 30),
        date(2027, 1, 4),
    ]
    assert date(2027, 1, 6) in _local_days(schedule, _utc(2027, 1, 4, 12), 3)
    why = schedule.excluded_by_calendar
    assert why(_utc(2026, 12, 24, 8)) == "calendar office: an excluded date"
    assert why(_utc(2026, 12, 25, 8)) == "calendar office: Erster Weihnachtstag (DE-BY)"
    assert why(_utc(2027, 1, 2, 8)) == (
        "calendar office: a Saturday, not one of its weekdays (mon-fri)"
    )
    assert why(_utc(2027, 1, 6, 8)) is None
    assert schedule_from_dict(schedule.to_dict()) == schedule


def test_a_schedule_naming_a_stored_calendar_needs_its_rules() -> None:
    unbound = cron("0 9 * * *", calendar="office")
    assert unbound.stored_calendar == "office" and unbound.calendar_def is None
    with pytest.raises(InvalidScheduleError, match="not loaded with its rules"):
        unbound.next_after(_utc(2027, 1, 1))
    assert cron("0 9 * * *", calendar="DE-BY").stored_calendar is None


@pytest.mark.parametrize(
    ("doc", "field", "message"),
    [
        ({"weekdays": "*"}, "weekdays", "not a list of weekdays"),
        ({"weekdays": "5L"}, "weekdays", "not a list of weekdays"),
        ({"weekdays": "mon-sun"}, "weekdays", "day-of-week"),
        ({"exclude": ["2026-13-01"]}, "exclude[0]", "month must be in 1..12"),
        ({"exclude": ["2026-1-1"]}, "exclude[0]", "not a date"),
        ({"exclude": ["2026-01-01"] * 1001}, "exclude", "the limit is 1000"),
        ({"include": ["2026-01-01"], "exclude": ["2026-01-01"]}, "include", "both"),
        ({"holidays": "office"}, "holidays", "not a calendar name"),
        ({"holidays": 5}, "holidays", "expected a string"),
        ({"weekday": "mon"}, "weekday", "not a key of a calendar"),
    ],
)
def test_bad_rules_name_the_field(doc: dict[str, object], field: str, message: str) -> None:
    with pytest.raises(InvalidScheduleError, match=message) as caught:
        CalendarRules.from_dict(doc)
    assert caught.value.field == field


def test_bad_rules_in_a_schedule_dict_name_the_whole_path() -> None:
    doc = {"kind": "cron", "cron": "0 9 * * *", "calendar": "office", "calendar_def": {"x": 1}}
    with pytest.raises(InvalidScheduleError) as caught:
        schedule_from_dict(doc)
    assert caught.value.field == "schedule.calendar_def.x"
    with pytest.raises(InvalidScheduleError, match="no rules of its own") as caught:
        cron("0 9 * * *", calendar="DE").with_calendar_rules(OFFICE)


@pytest.mark.parametrize(
    ("expr", "weekdays"),
    [("0 9 * * mon", "sat"), ("0 9 * * sat,sun", "mon-fri"), ("0 9 * * 5L", "mon-thu")],
)
def test_weekdays_that_exclude_every_matching_day_report_no_firing_at_once(
    expr: str, weekdays: str
) -> None:
    schedule = cron(expr, tz="Europe/Berlin", calendar="office").with_calendar_rules(
        CalendarRules(weekdays=weekdays)
    )
    budget = StepBudget()
    with pytest.raises(NoFiringInHorizonError, match="calendar office excludes every day"):
        schedule.next_after_with_note(_utc(2026, 1, 1), budget=budget)
    assert budget.used < 20  # not week after week to the horizon


def test_an_include_date_is_found_then_no_more() -> None:
    schedule = cron("0 9 * * sat", tz="Europe/Berlin", calendar="office").with_calendar_rules(
        CalendarRules(weekdays="mon-fri", include=(date(2027, 3, 6),))
    )
    assert schedule.next_after(_utc(2026, 1, 1)) == _utc(2027, 3, 6, 8)
    with pytest.raises(NoFiringInHorizonError):
        schedule.next_after(_utc(2027, 3, 6, 8))
    # the OR rule of cron's day fields: the 13th, whatever its weekday, still matches
    friday13 = cron("0 9 13 * fri", tz="Europe/Berlin", calendar="office")
    bound = friday13.with_calendar_rules(CalendarRules(weekdays="sat"))
    assert bound.next_after(_utc(2026, 1, 1)) == _utc(2026, 6, 13, 7)
