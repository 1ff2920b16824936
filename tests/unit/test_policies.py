"""Misfire planning, retry backoff and virtual deadlines (pure)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from cronwheel.domain.policies import (
    MAX_FIRINGS_PER_PLAN,
    MisfirePolicy,
    plan_firings,
    retry_backoff,
    virtual_deadline,
)
from cronwheel.domain.schedules import every

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
M = timedelta(minutes=1)
S = timedelta(seconds=1)


def plan(
    cursor: datetime,
    now: datetime,
    policy: MisfirePolicy,
    *,
    grace: timedelta = 10 * S,
    window: timedelta = timedelta(hours=1),
    cap: int = 100,
    interval: str = "1m",
    horizon: timedelta = S,
):
    sched = every(interval, anchor=T0)
    return plan_firings(
        sched.next_after,
        cursor,
        now=now,
        horizon=now + horizon,
        policy=policy,
        misfire_grace=grace,
        catchup_window=window,
        max_catchup=cap,
    )


def test_on_time_job_fires_what_is_due_within_the_horizon() -> None:
    p = plan(T0, T0 - 500 * timedelta(milliseconds=1), MisfirePolicy.FIRE_ONCE)
    assert p.fire == [T0] and p.missed == [] and p.next_cursor == T0 + M


def test_late_within_grace_is_not_a_misfire() -> None:
    p = plan(T0, T0 + 9 * S, MisfirePolicy.SKIP)
    assert p.fire == [T0] and p.missed == []


def test_fire_once_fires_the_latest_missed_instant() -> None:
    p = plan(T0, T0 + 10 * M + 30 * S, MisfirePolicy.FIRE_ONCE)
    assert p.fire == [T0 + 10 * M]
    (m,) = p.missed
    assert (m.first, m.last, m.count, m.exact) == (T0, T0 + 9 * M, 10, True)
    assert p.next_cursor == T0 + 11 * M


def test_fire_all_fires_inside_the_window_up_to_the_cap() -> None:
    p = plan(T0, T0 + 30 * M + 30 * S, MisfirePolicy.FIRE_ALL, window=20 * M, cap=5)
    assert p.fire == [T0 + k * M for k in range(26, 31)]
    assert sum(m.count for m in p.missed) == 26


def test_skip_records_everything_missed() -> None:
    p = plan(T0, T0 + 5 * M + 30 * S, MisfirePolicy.SKIP)
    assert p.fire == [] and sum(m.count for m in p.missed) == 6 and p.next_cursor == T0 + 6 * M


def test_a_year_of_missed_seconds_is_planned_quickly_and_counted_as_a_lower_bound() -> None:
    now = T0 + timedelta(days=365)
    p = plan(T0, now, MisfirePolicy.FIRE_ONCE, interval="1s", grace=S)
    assert p.fire and now - 2 * S <= p.fire[0] < now
    total = sum(m.count for m in p.missed)
    assert 0 < total <= 365 * 86_400
    assert any(not m.exact for m in p.missed)
    assert p.next_cursor is not None and p.next_cursor >= now - S


def test_a_very_fast_schedule_is_planned_over_several_ticks() -> None:
    p = plan(T0, T0, MisfirePolicy.FIRE_ONCE, interval="1ms", horizon=timedelta(seconds=5))
    assert len(p.fire) == MAX_FIRINGS_PER_PLAN
    assert p.next_cursor == p.fire[-1] + timedelta(milliseconds=1)


def test_exhausted_schedule_has_no_cursor() -> None:
    from cronwheel.domain.schedules import at

    sched = at(T0)
    p = plan_firings(
        sched.next_after,
        T0,
        now=T0,
        horizon=T0 + S,
        policy=MisfirePolicy.FIRE_ONCE,
        misfire_grace=S,
        catchup_window=M,
        max_catchup=1,
    )
    assert p.fire == [T0] and p.next_cursor is None


@pytest.mark.parametrize("attempt", [1, 2, 3, 10, 100])
def test_retry_backoff_is_bounded_exponential_with_equal_jitter(attempt: int) -> None:
    rng = random.Random(7)
    base, cap = timedelta(seconds=2), timedelta(minutes=1)
    ceiling = min(cap, base * 2 ** min(attempt - 1, 20))
    for _ in range(50):
        d = retry_backoff(attempt, base=base, maximum=cap, rng=rng)
        assert ceiling / 2 <= d <= ceiling


def test_virtual_deadline_lets_old_low_priority_work_win() -> None:
    low_old = virtual_deadline(T0, 1.0)
    high_new = virtual_deadline(T0 + 500 * timedelta(milliseconds=1), 10.0)
    high_newer = virtual_deadline(T0 + 2 * S, 10.0)
    assert high_new < low_old < high_newer
