"""domain/jobs.py first_fire_window: a job's first instant made from a guess of the
store's clock, with the range of store clocks for which it is exactly what
spec_first_fire_at gives (the API's one-statement creation checks the store's clock
against that range in SQL, and reads the clock instead when there is none)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronwheel.domain.jobs import first_fire_window, spec_first_fire_at
from cronwheel.domain.models import JobSpec
from cronwheel.domain.schedules import Schedule, at, cron, every
from cronwheel.domain.schedules import now as now_schedule

MARGIN = timedelta(milliseconds=500)
T = datetime(2026, 3, 29, 0, 59, 30, tzinfo=UTC)  # 30 s before Europe/Berlin springs forward


def _spec(schedule: Schedule, **kw: object) -> JobSpec:
    return JobSpec(name="j", task="t", schedule=schedule, **kw)  # type: ignore[arg-type]


def test_a_cron_job_has_its_next_instant_and_the_range_behind_the_guess() -> None:
    spec = _spec(cron("30 2 * * *", tz="Europe/Berlin"))  # 02:30 does not exist that day
    window = first_fire_window(spec, T, margin=MARGIN)
    assert window == (spec_first_fire_at(spec, T), T - MARGIN)
    first, _ = window
    assert first == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)  # next_valid: 03:00 local


def test_an_instant_within_the_margin_leaves_it_to_the_stores_clock() -> None:
    spec = _spec(cron("0 * * * *", tz="UTC"))
    on_the_hour = datetime(2026, 6, 1, 10, 0, 0, 200_000, tzinfo=UTC)  # 10:00 is 0.2 s back
    assert first_fire_window(spec, on_the_hour, margin=MARGIN) is None
    assert first_fire_window(spec, on_the_hour, margin=timedelta(milliseconds=100)) is not None


def test_a_job_every_second_reads_the_stores_clock_about_half_of_the_time() -> None:
    # a guess with an instant in the half second behind it has no window
    spec = _spec(every(timedelta(seconds=1)))
    guesses = [T + timedelta(milliseconds=50 + k * 100) for k in range(10)]  # one second
    windows = [first_fire_window(spec, g, margin=MARGIN) for g in guesses]
    assert sum(w is None for w in windows) == 5
    for g, window in zip(guesses, windows, strict=True):
        if window is not None:
            first, since = window
            assert spec_first_fire_at(spec, since) == first == spec_first_fire_at(spec, g)


def test_an_at_job_in_the_future_holds_up_to_its_instant() -> None:
    when = T + timedelta(hours=1)
    assert first_fire_window(_spec(at(when)), T, margin=MARGIN) == (when, T - MARGIN)


@pytest.mark.parametrize(
    ("schedule", "allow_past"),
    [
        (at(T - timedelta(seconds=1)), False),  # an error at the guess: the store decides
        (at(T - timedelta(seconds=1)), True),  # fires at once: its instant is already past
        (at(T - timedelta(milliseconds=100)), False),  # past only for part of the range
        (now_schedule(), False),  # its instant is the clock itself
    ],
)
def test_no_window_where_the_store_clock_decides(schedule: Schedule, allow_past: bool) -> None:
    assert first_fire_window(_spec(schedule), T, margin=MARGIN, allow_past=allow_past) is None


def test_an_exhausted_schedule_reads_the_stores_clock() -> None:
    spec = _spec(cron("0 9 * * *", tz="UTC"), end_at=T - timedelta(days=1))
    assert spec_first_fire_at(spec, T) is None
    assert first_fire_window(spec, T, margin=MARGIN) is None


def test_start_at_bounds_the_first_instant_as_for_the_stores_clock() -> None:
    start = T + timedelta(days=2)
    spec = _spec(cron("0 9 * * *", tz="Europe/Berlin"), start_at=start)
    first, since = first_fire_window(spec, T, margin=MARGIN) or (None, None)
    assert first == spec_first_fire_at(spec, T) and first is not None and first >= start
    assert since == T - MARGIN


_ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu"]
_EXPRS = [
    "*/5 * * * *",
    "30 2 * * *",
    "0 1-3 * * 0",
    "*/10 * * * * *",
    "0 0 29 2 *",
    "15 */2 * * *",
]


@settings(max_examples=300, deadline=None)
@given(
    expr=st.sampled_from(_EXPRS),
    zone=st.sampled_from(_ZONES),
    guess_us=st.integers(0, 2 * 365 * 86_400 * 10**6),
    offsets=st.lists(st.floats(0, 1), min_size=1, max_size=5),
)
def test_every_store_clock_in_the_range_gives_the_same_first_instant(
    expr: str, zone: str, guess_us: int, offsets: list[float]
) -> None:
    guess = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(microseconds=guess_us)
    spec = _spec(cron(expr, tz=zone))
    window = first_fire_window(spec, guess, margin=MARGIN)
    if window is None:
        return
    first, since = window
    assert since == guess - MARGIN < first
    for f in offsets:  # store clocks anywhere in [since, first)
        clock = since + (first - since) * f
        if clock < first:
            assert spec_first_fire_at(spec, clock) == first
