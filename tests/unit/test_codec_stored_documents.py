"""A job's stored schedule and policies: from SQLite's JSON text and from PostgreSQL's
jsonb mapping, the same objects; cached, and the memo behind the mapping cache bounded
(domain/memo.py, also parse_cron's)."""

from __future__ import annotations

import json

import pytest

from cronwheel.domain.memo import remembered
from cronwheel.domain.models import JobPolicies
from cronwheel.domain.schedules import cron, every
from cronwheel.store import codec


def test_a_mapping_and_its_text_give_the_same_schedule_and_policies() -> None:
    schedule = cron("30 9 * * 1-5", tz="Europe/Berlin")
    policies = JobPolicies(max_concurrency=3, overlap="skip")
    for stored in (schedule.to_dict(), json.dumps(schedule.to_dict())):
        assert codec.schedule_from_stored(stored) == schedule
    for stored in (policies.to_dict(), json.dumps(policies.to_dict())):
        assert codec.policies_from_stored(stored) == policies


def test_mappings_in_another_key_order_are_the_same_schedule() -> None:
    doc = every("5m").to_dict()
    reordered = dict(reversed(list(doc.items())))
    assert list(reordered) != list(doc)
    assert codec.schedule_from_stored(reordered) == codec.schedule_from_stored(doc) == every("5m")


def test_the_memo_is_emptied_when_full_and_still_answers() -> None:
    cache: dict[str, int] = {}
    made: list[str] = []

    def make(key: str) -> int:
        made.append(key)
        return len(made)

    assert remembered(cache, "a", lambda: make("a"), 2) == 1
    assert remembered(cache, "a", lambda: make("a"), 2) == 1  # remembered: not made again
    assert remembered(cache, "b", lambda: make("b"), 2) == 2
    assert remembered(cache, "c", lambda: make("c"), 2) == 3  # full: emptied, then kept
    assert cache == {"c": 3}
    assert made == ["a", "b", "c"]


def test_an_error_is_raised_and_not_remembered() -> None:
    cache: dict[str, int] = {}

    def fail() -> int:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        remembered(cache, "x", fail, 2)
    assert cache == {}
