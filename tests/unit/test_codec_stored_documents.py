"""A job's stored schedule and policies: from SQLite's JSON text and from PostgreSQL's
jsonb mapping, the same objects; cached, and the mapping cache bounded."""

from __future__ import annotations

import json

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


def test_the_mapping_cache_is_emptied_when_full_and_still_answers() -> None:
    cache: dict[str, int] = {}
    made: list[object] = []

    def make(value: object) -> int:
        made.append(value)
        return len(made)

    assert codec._by_repr(cache, {"a": 1}, make, 2) == 1
    assert codec._by_repr(cache, {"a": 1}, make, 2) == 1  # cached: not made again
    assert codec._by_repr(cache, {"b": 2}, make, 2) == 2
    assert codec._by_repr(cache, {"c": 3}, make, 2) == 3  # full: emptied, then kept
    assert cache == {repr({"c": 3}): 3}
    assert len(made) == 3
