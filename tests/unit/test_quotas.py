"""domain/quotas.py: the shortest gap of a schedule, and quota records checked."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cronwheel.domain.quotas import DEFAULT_QUOTA, min_gap, quota_with, raised
from cronwheel.domain.schedules import at, cron, every, now
from cronwheel.errors import ValidationError

T = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("schedule", "gap"),
    [
        (every("1ms"), timedelta(milliseconds=1)),
        (every("90s"), timedelta(seconds=90)),
        (cron("* * * * * *"), timedelta(seconds=1)),
        (cron("*/5 9-17 * * mon-fri"), timedelta(minutes=5)),
        (cron("0,1 9 * * *"), timedelta(minutes=1)),
        # Berlin's spring-forward day (29 March 2026) is within the look: a 23 h gap
        (cron("0 9 * * *", "Europe/Berlin"), timedelta(hours=23)),
        (at("2026-05-01T09:00:00Z"), None),
        (now(), None),
    ],
)
def test_min_gap(schedule: object, gap: timedelta | None) -> None:
    assert min_gap(schedule, T) == gap  # type: ignore[arg-type]


def test_min_gap_of_a_cron_with_no_start_is_none() -> None:
    assert min_gap(cron("* * * * *"), None) is None


def test_quota_with_checks_each_limit() -> None:
    q = quota_with(DEFAULT_QUOTA, {"jobs": 0, "min_interval": "2s", "running": None})
    assert q.jobs == 0 and q.min_interval == timedelta(seconds=2)
    assert q.running == DEFAULT_QUOTA.running
    for bad, field in (({"jobs": True}, "jobs"), ({"backfill": 10**10}, "backfill")):
        with pytest.raises(ValidationError) as err:
            quota_with(DEFAULT_QUOTA, bad)
        assert err.value.field == field


def test_raised_names_the_first_loosened_limit() -> None:
    lower = quota_with(DEFAULT_QUOTA, {"jobs": 5, "min_interval": "1m"})
    assert raised(DEFAULT_QUOTA, lower) is None
    assert raised(lower, DEFAULT_QUOTA) == "jobs"
    assert raised(lower, quota_with(lower, {"min_interval": "1s"})) == "min_interval"
