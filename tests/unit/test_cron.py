"""Cron parsing and wall-clock matching: every syntax feature and every rejection."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from cronwheel.domain.cron import CronExpr, parse_cron
from cronwheel.errors import InvalidScheduleError


def walls(expr: str, start: str, n: int = 4) -> list[str]:
    parsed = parse_cron(expr)
    cursor = datetime.fromisoformat(start)
    out = []
    for _ in range(n):
        nxt = parsed.next_wall(cursor)
        assert nxt is not None
        out.append(nxt.isoformat(sep=" "))
        cursor = nxt
    return out


# --- accepted syntax ----------------------------------------------------------------

NEXT_WALL_CASES = [
    pytest.param(
        "* * * * *",
        "2026-01-01 00:00:30",
        ["2026-01-01 00:01:00", "2026-01-01 00:02:00"],
        id="every-minute-strictly-after",
    ),
    pytest.param(
        "*/15 * * * *",
        "2026-01-01 00:00:00",
        ["2026-01-01 00:15:00", "2026-01-01 00:30:00"],
        id="step",
    ),
    pytest.param(
        "5,10-12 * * * *",
        "2026-01-01 00:00:00",
        [
            "2026-01-01 00:05:00",
            "2026-01-01 00:10:00",
            "2026-01-01 00:11:00",
            "2026-01-01 00:12:00",
            "2026-01-01 01:05:00",
        ],
        id="list-and-range",
    ),
    pytest.param(
        "10-30/10 * * * *",
        "2026-01-01 00:00:00",
        [
            "2026-01-01 00:10:00",
            "2026-01-01 00:20:00",
            "2026-01-01 00:30:00",
            "2026-01-01 01:10:00",
        ],
        id="range-step",
    ),
    pytest.param(
        "50/5 * * * *",
        "2026-01-01 00:00:00",
        ["2026-01-01 00:50:00", "2026-01-01 00:55:00", "2026-01-01 01:50:00"],
        id="start-step",
    ),
    pytest.param(
        "0 9 * * mon-fri",
        "2026-01-02 10:00:00",
        ["2026-01-05 09:00:00", "2026-01-06 09:00:00"],
        id="weekday-names",
    ),
    pytest.param(
        "0 0 1 jan,JUL *",
        "2026-01-01 00:00:00",
        ["2026-07-01 00:00:00", "2027-01-01 00:00:00"],
        id="month-names-case-insensitive",
    ),
    pytest.param(
        "0 0 * * 7",
        "2026-01-01 00:00:00",
        ["2026-01-04 00:00:00", "2026-01-11 00:00:00"],
        id="dow-7-is-sunday",
    ),
    pytest.param(
        "0 0 * * 0",
        "2026-01-01 00:00:00",
        ["2026-01-04 00:00:00", "2026-01-11 00:00:00"],
        id="dow-0-is-sunday",
    ),
    pytest.param(
        "0 0 * * 5-7",
        "2026-01-01 00:00:00",
        [
            "2026-01-02 00:00:00",
            "2026-01-03 00:00:00",
            "2026-01-04 00:00:00",
            "2026-01-09 00:00:00",
        ],
        id="dow-range-to-7",
    ),
    pytest.param(
        "0 0 ? * mon",
        "2026-01-01 00:00:00",
        ["2026-01-05 00:00:00", "2026-01-12 00:00:00"],
        id="question-mark-dom",
    ),
    pytest.param(
        "0 0 1 * ?",
        "2026-01-01 00:00:00",
        ["2026-02-01 00:00:00", "2026-03-01 00:00:00"],
        id="question-mark-dow",
    ),
    pytest.param(
        "0 0 L * *",
        "2026-01-01 00:00:00",
        [
            "2026-01-31 00:00:00",
            "2026-02-28 00:00:00",
            "2026-03-31 00:00:00",
            "2026-04-30 00:00:00",
        ],
        id="L-last-day",
    ),
    pytest.param(
        "0 0 L 2 *",
        "2027-06-01 00:00:00",
        ["2028-02-29 00:00:00", "2029-02-28 00:00:00"],
        id="L-leap-february",
    ),
    pytest.param(
        "0 0 L-2 * *",
        "2026-01-01 00:00:00",
        ["2026-01-29 00:00:00", "2026-02-26 00:00:00", "2026-03-29 00:00:00"],
        id="L-minus-n",
    ),
    pytest.param(
        "0 0 L-30 * *",
        "2026-01-02 00:00:00",
        ["2026-03-01 00:00:00", "2026-05-01 00:00:00"],
        id="L-minus-30-only-31-day-months",
    ),
    # 2026-02-15 and 2026-03-15 are Sundays -> Monday 16th; 2026-08-15 Saturday -> Friday 14th
    pytest.param(
        "0 0 15W * *",
        "2026-02-01 00:00:00",
        ["2026-02-16 00:00:00", "2026-03-16 00:00:00", "2026-04-15 00:00:00"],
        id="nW-nearest-weekday",
    ),
    pytest.param(
        "0 0 15W 8 *", "2026-01-01 00:00:00", ["2026-08-14 00:00:00"], id="nW-saturday-to-friday"
    ),
    # 2026-08-01 is a Saturday: 1W must not cross back into July -> Monday 3rd
    pytest.param(
        "0 0 1W 8 *",
        "2026-01-01 00:00:00",
        ["2026-08-03 00:00:00"],
        id="1W-saturday-does-not-cross-month",
    ),
    # 2026-05-31 is a Sunday: 31W must not cross into June -> Friday 29th
    pytest.param(
        "0 0 31W 5 *",
        "2026-01-01 00:00:00",
        ["2026-05-29 00:00:00"],
        id="31W-sunday-does-not-cross-month",
    ),
    pytest.param(
        "0 0 31W * *",
        "2026-03-01 00:00:00",
        ["2026-03-31 00:00:00", "2026-05-29 00:00:00"],
        id="31W-skips-short-months",
    ),
    # last weekday: 2026-01-31 Sat -> 30th, 2026-02-28 Sat -> 27th, 2026-05-31 Sun -> 29th
    pytest.param(
        "0 0 LW * *",
        "2026-01-01 00:00:00",
        [
            "2026-01-30 00:00:00",
            "2026-02-27 00:00:00",
            "2026-03-31 00:00:00",
            "2026-04-30 00:00:00",
            "2026-05-29 00:00:00",
        ],
        id="LW",
    ),
    pytest.param(
        "0 0 * * 5L",
        "2026-01-01 00:00:00",
        ["2026-01-30 00:00:00", "2026-02-27 00:00:00", "2026-03-27 00:00:00"],
        id="nL-last-friday",
    ),
    pytest.param("0 0 * * friL", "2026-01-01 00:00:00", ["2026-01-30 00:00:00"], id="nL-with-name"),
    pytest.param(
        "0 0 * * 0L",
        "2026-01-01 00:00:00",
        ["2026-01-25 00:00:00", "2026-02-22 00:00:00", "2026-03-29 00:00:00"],
        id="nL-last-sunday",
    ),
    pytest.param(
        "0 0 * * 1#1",
        "2026-01-01 00:00:00",
        ["2026-01-05 00:00:00", "2026-02-02 00:00:00", "2026-03-02 00:00:00"],
        id="hash-first-monday",
    ),
    pytest.param(
        "0 0 * * mon#2",
        "2026-01-01 00:00:00",
        ["2026-01-12 00:00:00", "2026-02-09 00:00:00"],
        id="hash-with-name",
    ),
    pytest.param(
        "0 0 * * 5#5",
        "2026-01-01 00:00:00",
        ["2026-01-30 00:00:00", "2026-05-29 00:00:00", "2026-07-31 00:00:00"],
        id="hash-fifth-skips-months",
    ),
    pytest.param(
        "0 0 29 2 *",
        "2026-01-01 00:00:00",
        ["2028-02-29 00:00:00", "2032-02-29 00:00:00"],
        id="feb-29-leap-only",
    ),
    pytest.param(
        "0 0 29 2 *", "2096-03-01 00:00:00", ["2104-02-29 00:00:00"], id="feb-29-skips-2100"
    ),
    pytest.param(
        "0 0 31 * *",
        "2026-01-31 00:00:00",
        ["2026-03-31 00:00:00", "2026-05-31 00:00:00"],
        id="day-31-skips-short-months",
    ),
    pytest.param(
        "30 * * * * *",
        "2026-01-01 00:00:00",
        ["2026-01-01 00:00:30", "2026-01-01 00:01:30"],
        id="seconds-field",
    ),
    pytest.param(
        "*/20 0 0 * * *",
        "2026-01-01 00:00:00",
        ["2026-01-01 00:00:20", "2026-01-01 00:00:40", "2026-01-02 00:00:00"],
        id="seconds-step",
    ),
    pytest.param(
        "59 23 31 12 *", "2026-12-31 23:59:00", ["2027-12-31 23:59:00"], id="year-rollover"
    ),
    pytest.param("@yearly", "2026-06-01 00:00:00", ["2027-01-01 00:00:00"], id="macro-yearly"),
    pytest.param("@annually", "2026-06-01 00:00:00", ["2027-01-01 00:00:00"], id="macro-annually"),
    pytest.param("@monthly", "2026-06-01 00:00:00", ["2026-07-01 00:00:00"], id="macro-monthly"),
    pytest.param("@weekly", "2026-01-01 00:00:00", ["2026-01-04 00:00:00"], id="macro-weekly"),
    pytest.param("@daily", "2026-01-01 00:00:00", ["2026-01-02 00:00:00"], id="macro-daily"),
    pytest.param(
        "@MIDNIGHT", "2026-01-01 00:00:00", ["2026-01-02 00:00:00"], id="macro-midnight-uppercase"
    ),
    pytest.param("@hourly", "2026-01-01 00:00:00", ["2026-01-01 01:00:00"], id="macro-hourly"),
    pytest.param(
        "  0\t9 * * *  ", "2026-01-01 00:00:00", ["2026-01-01 09:00:00"], id="tabs-and-outer-blanks"
    ),
    pytest.param(
        "00 09 01 01 *", "2026-01-01 10:00:00", ["2027-01-01 09:00:00"], id="leading-zeros"
    ),
]


@pytest.mark.parametrize(("expr", "start", "expected"), NEXT_WALL_CASES)
def test_next_wall(expr: str, start: str, expected: list[str]) -> None:
    assert walls(expr, start, len(expected)) == expected


# The OR rule: both day fields restricted -> either; one starting with '*' -> both.
OR_RULE_CASES = [
    # 2026-01: Fridays 2, 9, 16, 23, 30; the 13th is a Tuesday
    pytest.param(
        "0 0 13 * fri",
        ["2026-01-02", "2026-01-09", "2026-01-13", "2026-01-16"],
        id="both-restricted-OR",
    ),
    pytest.param(
        "0 0 1-31 * mon",
        ["2026-01-02", "2026-01-03", "2026-01-04", "2026-01-05"],
        id="full-range-still-restricted-OR",
    ),
    pytest.param(
        "0 0 */2 * mon",
        ["2026-01-05", "2026-01-19", "2026-02-09", "2026-02-23"],
        id="star-step-dom-is-star-AND",
    ),
    pytest.param(
        "0 0 1 * */2",
        ["2026-02-01", "2026-03-01", "2026-08-01", "2026-09-01"],
        id="star-step-dow-is-star-AND",
    ),
    pytest.param(
        "0 0 * * mon",
        ["2026-01-05", "2026-01-12", "2026-01-19", "2026-01-26"],
        id="dom-star-only-dow",
    ),
    pytest.param(
        "0 0 13 * *",
        ["2026-01-13", "2026-02-13", "2026-03-13", "2026-04-13"],
        id="dow-star-only-dom",
    ),
    pytest.param(
        "0 0 L * 5L", ["2026-01-30", "2026-01-31", "2026-02-27", "2026-02-28"], id="specials-OR"
    ),
]


@pytest.mark.parametrize(("expr", "expected"), OR_RULE_CASES)
def test_dom_dow_or_rule(expr: str, expected: list[str]) -> None:
    got = [w[:10] for w in walls(expr, "2026-01-01 00:00:00", len(expected))]
    assert got == expected


def test_feb_29_monday_fires_by_or_rule() -> None:
    # 2026-02-02 is the first Monday of February 2026.
    assert walls("0 0 29 2 mon", "2026-01-01 00:00:00", 1) == ["2026-02-02 00:00:00"]


@pytest.mark.parametrize(
    ("expr", "real_time"),
    [
        ("* * * * *", True),
        ("*/15 * * * *", True),
        ("0 */2 * * *", True),
        ("@hourly", True),
        ("0 * * * * *", True),
        # Debian: the minute field alone starting with '*' is enough
        ("*/10 2 * * *", True),
        ("* 2 * * *", True),
        ("*/5,7 9 * * *", True),
        ("0 */2,5 * * *", True),
        ("* 0 9 * * *", False),  # the seconds field does not count
        ("0 9 * * *", False),
        ("0-59 2 * * *", False),
        ("0 0-23 * * *", False),
        ("0 1,2 * * *", False),
        ("0 1/2 * * *", False),
        ("@daily", False),
    ],
)
def test_follows_real_time(expr: str, real_time: bool) -> None:
    assert parse_cron(expr).follows_real_time is real_time


def test_parsed_value_is_frozen_and_keeps_source() -> None:
    parsed = parse_cron("  0 9 * * MON-FRI ")
    assert isinstance(parsed, CronExpr)
    assert parsed.source == "0 9 * * MON-FRI"
    assert parsed.has_seconds is False
    assert parsed.hours == (9,)
    assert parsed.dow_values == frozenset({1, 2, 3, 4, 5})
    assert parse_cron("0 0 9 * * *").has_seconds is True
    with pytest.raises(AttributeError):
        parsed.source = "x"  # type: ignore[misc]
    assert parsed == parse_cron("0 9 * * mon-fri".upper())
    assert hash(parsed) == hash(parse_cron("0 9 * * MON-FRI"))


def test_matches() -> None:
    parsed = parse_cron("*/15 9-17 * * mon-fri")
    assert parsed.matches(datetime(2026, 1, 5, 9, 15))
    assert parsed.matches(datetime(2026, 1, 5, 9, 15, 0, 999))  # microseconds ignored
    assert not parsed.matches(datetime(2026, 1, 5, 9, 16))
    assert not parsed.matches(datetime(2026, 1, 5, 9, 15, 1))  # 5-field: second 0 only
    assert not parsed.matches(datetime(2026, 1, 4, 9, 15))  # Sunday
    assert not parsed.matches(datetime(2026, 1, 5, 18, 0))


def test_next_wall_rejects_aware_datetime() -> None:
    from datetime import UTC

    with pytest.raises(ValueError, match="naive"):
        parse_cron("* * * * *").next_wall(datetime(2026, 1, 1, tzinfo=UTC))


def test_next_wall_near_year_9999_returns_none() -> None:
    assert parse_cron("0 0 1 1 *").next_wall(datetime(9999, 6, 1)) is None
    assert parse_cron("* * * * *").next_wall(datetime(9999, 12, 31, 23, 59)) is None
    assert parse_cron("0 0 29 2 *").next_wall(datetime(9996, 3, 1)) is None


def test_next_wall_jumps_not_scans() -> None:
    # Sparse expressions still answer quickly: a month-by-month jump, not a minute scan.
    parsed = parse_cron("0 0 * 2 mon#5")  # needs a leap February starting on a Monday
    got = parsed.next_wall(datetime(2026, 1, 1))
    assert got == datetime(2044, 2, 29)
    cursor = datetime(2026, 1, 1)
    for _ in range(200):
        nxt = parsed.next_wall(cursor)
        assert nxt is not None
        assert nxt > cursor
        cursor = nxt


def test_strictly_after_with_microseconds() -> None:
    parsed = parse_cron("* * * * * *")
    assert parsed.next_wall(datetime(2026, 1, 1, 0, 0, 0, 1)) == datetime(2026, 1, 1, 0, 0, 1)
    assert parsed.next_wall(datetime(2026, 1, 1, 0, 0, 0)) == datetime(2026, 1, 1, 0, 0, 1)
    five = parse_cron("* * * * *")
    assert five.next_wall(datetime(2026, 1, 1, 0, 0, 59, 999999)) == datetime(2026, 1, 1, 0, 1)


def test_every_next_wall_matches_and_nothing_skipped() -> None:
    parsed = parse_cron("*/7 1-3 * * *")
    cursor = datetime(2026, 1, 1)
    got = []
    while len(got) < 30:
        nxt = parsed.next_wall(cursor)
        assert nxt is not None
        got.append(nxt)
        cursor = nxt
    brute = []
    probe = datetime(2026, 1, 1)
    while len(brute) < 30:
        probe += timedelta(minutes=1)
        if parsed.matches(probe):
            brute.append(probe)
    assert got == brute


# --- rejections ---------------------------------------------------------------------

REJECTIONS = [
    pytest.param("", "empty expression", id="empty"),
    pytest.param("   ", "empty expression", id="blank"),
    pytest.param("* * * *", "got 4", id="four-fields"),
    pytest.param("* * * * * * *", "got 7", id="seven-fields"),
    pytest.param("60 * * * *", "minute field: value 60 is out of range 0-59", id="minute-60"),
    pytest.param("* 24 * * *", "hour field: value 24 is out of range 0-23", id="hour-24"),
    pytest.param("* * 0 * *", "day-of-month field: value 0 is out of range 1-31", id="dom-0"),
    pytest.param("* * 32 * *", "day-of-month field: value 32 is out of range 1-31", id="dom-32"),
    pytest.param("* * * 13 *", "month field: value 13 is out of range 1-12", id="month-13"),
    pytest.param("* * * 0 *", "month field: value 0 is out of range 1-12", id="month-0"),
    pytest.param("* * * * 8", "day-of-week field: value 8 is out of range 0-7", id="dow-8"),
    pytest.param("60 * * * * *", "second field: value 60 is out of range 0-59", id="second-60"),
    pytest.param("*/0 * * * *", "minute field: step 0", id="step-0"),
    pytest.param("1-5/0 * * * *", "minute field: step 0", id="range-step-0"),
    pytest.param("*/61 * * * *", "minute field: step 61 exceeds", id="step-too-large"),
    pytest.param("*/ * * * *", "minute field: bad step", id="step-missing"),
    pytest.param("*/1/2 * * * *", "minute field: bad step", id="double-step"),
    pytest.param("5-2 * * * *", "minute field: reversed range '5-2'", id="reversed-range"),
    pytest.param(
        "* * * * fri-sun", "day-of-week field: reversed range 'fri-sun'", id="reversed-names"
    ),
    pytest.param("1,,2 * * * *", "minute field: empty list item", id="empty-item"),
    pytest.param("1, * * * *", "minute field: empty list item", id="trailing-comma"),
    pytest.param(",1 * * * *", "minute field: empty list item", id="leading-comma"),
    pytest.param("a * * * *", "minute field: 'a' is not a valid value", id="garbage"),
    pytest.param("* * * foo *", "month field: 'foo' is not a valid value", id="bad-month-name"),
    pytest.param("* * * * mon-", "day-of-week field: missing value", id="open-range"),
    pytest.param("* mon * * *", "hour field: 'mon' is not a valid value", id="name-in-wrong-field"),
    pytest.param("-1 * * * *", "minute field: missing value", id="negative"),
    pytest.param("1.5 * * * *", "minute field: '1.5' is not a valid value", id="decimal"),
    pytest.param("99999 * * * *", "minute field: '99999' is not a valid value", id="huge-number"),
    pytest.param("\u0661 * * * *", "non-ASCII character U+0661", id="arabic-indic-digit"),
    pytest.param("\uff11 * * * *", "non-ASCII character U+FF11", id="fullwidth-digit"),
    pytest.param("\u00b2 * * * *", "non-ASCII character U+00B2", id="superscript-two"),
    pytest.param("0 0 * * m\u043en", "non-ASCII character U+043E", id="cyrillic-o-confusable"),
    pytest.param("0\x00 * * * *", "control character U+0000", id="nul"),
    pytest.param("0 * * * *\n0 * * * *", "control character U+000A", id="newline"),
    pytest.param("0 * * * *\r", "control character U+000D", id="carriage-return"),
    pytest.param("0 * * * \x1b[31m*", "control character U+001B", id="escape"),
    pytest.param("0 " * 200, "the limit is 256", id="overlong"),
    pytest.param("@reboot", "unknown macro '@reboot'", id="macro-reboot"),
    pytest.param("@every 5m", "unknown macro", id="macro-unknown"),
    pytest.param("? * * * *", "minute field: '?' must stand alone", id="question-in-minute"),
    pytest.param(
        "* * ?/2 * *", "day-of-month field: '?' must stand alone", id="question-with-step"
    ),
    pytest.param("* * * * L", "day-of-week field: 'L' needs a weekday", id="dow-L-alone"),
    pytest.param("* * * * 5#6", "the k in n#k must be 1-5", id="hash-k-6"),
    pytest.param("* * * * 5#0", "the k in n#k must be 1-5", id="hash-k-0"),
    pytest.param("* * * * 8#1", "day-of-week field: value 8 is out of range", id="hash-day-8"),
    pytest.param("* * L-31 * *", "offset 31", id="L-minus-31"),
    pytest.param("* * 32W * *", "day-of-month field: value 32 is out of range", id="W-32"),
    pytest.param("* * 1-5W * *", "day-of-month field: '1-5w' is not valid", id="W-on-range"),
    pytest.param("* * L/2 * *", "day-of-month field: 'l/2' is not valid", id="L-with-step"),
    pytest.param(
        "0 0 30 2 *", "never fires: day-of-month 30 does not occur in month(s) 2", id="never-feb-30"
    ),
    pytest.param("0 0 31 2 *", "never fires", id="never-feb-31"),
    pytest.param("0 0 31 4,6,9,11 *", "month(s) 4,6,9,11", id="never-31-in-30-day-months"),
    pytest.param("0 0 30,31 2 *", "never fires", id="never-feb-30-31"),
    pytest.param("0 0 31W 2 *", "never fires: no date matches", id="never-31W-feb"),
    pytest.param("0 0 L-29 2 *", "never fires: no date matches", id="never-L-29-feb"),
    pytest.param("0 0 31 4 */2", "never fires", id="never-with-star-step-dow"),
]


@pytest.mark.parametrize(("expr", "reason"), REJECTIONS)
def test_rejections(expr: str, reason: str) -> None:
    with pytest.raises(InvalidScheduleError) as info:
        parse_cron(expr)
    assert info.value.field == "cron"
    assert reason in info.value.message
    assert "\n" not in str(info.value)


def test_rejects_non_string() -> None:
    with pytest.raises(InvalidScheduleError, match="expected a string"):
        parse_cron(5)  # type: ignore[arg-type]


def test_never_check_is_not_fooled_by_or_rule() -> None:
    # dom 30 never happens in February, but the OR with Monday fires.
    assert parse_cron("0 0 30 2 mon").next_wall(datetime(2026, 1, 1)) == datetime(2026, 2, 2)
    # 256 characters exactly is accepted.
    long_ok = "0" + " " * 247 + "0 * * *"
    assert len(long_ok) <= 256
    parse_cron(long_ok)
