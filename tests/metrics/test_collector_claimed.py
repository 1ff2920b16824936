"""The cluster collector tells CLAIMED (held, not started) firings apart: queue depth,
namespace firings and job backlog count them, and a held claim whose lease expired is
a stuck claim until the reaper hands it back."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from cronwheel.domain.clock import FakeClock
from cronwheel.observability.cluster import ClusterCollector
from cronwheel.store.sqlite import SqliteStore

from .helpers import T0, make_store, queue, value


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Iterator[SqliteStore]:
    s = make_store(tmp_path, clock)
    yield s
    s.close()


def scrape(store: SqliteStore) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterCollector(store))
    return generate_latest(registry).decode()


def test_claimed_firings_are_counted_apart(store: SqliteStore) -> None:
    for name in ("a", "b", "c", "d"):
        queue(store, name)
    store.claim("w1", tasks=["t"], limit=3, start=1)
    text = scrape(store)
    assert value(text, "cronwheel_queue_depth", state="queued") == 1
    assert value(text, "cronwheel_queue_depth", state="claimed") == 2
    assert value(text, "cronwheel_queue_depth", state="running") == 1
    ns = {
        s: value(text, "cronwheel_namespace_firings", namespace="default", state=s)
        for s in ("queued", "claimed", "running")
    }
    assert ns == {"queued": 1, "claimed": 2, "running": 1}
    assert {value(text, "cronwheel_job_backlog", namespace="default", job=j) for j in "abcd"} == {1}


def test_an_expired_held_claim_is_stuck_until_reaped(store: SqliteStore, clock: FakeClock) -> None:
    queue(store, "held")
    (held,) = store.claim("w1", tasks=["t"], limit=1, start=0)
    assert not held.started
    assert value(scrape(store), "cronwheel_stuck_claims") == 0
    clock.advance(timedelta(seconds=31))  # the 30 s lease, never renewed
    assert value(scrape(store), "cronwheel_stuck_claims") == 1
    assert store.requeue_expired() == 1  # back to the queue: no longer stuck
    text = scrape(store)
    assert value(text, "cronwheel_stuck_claims") == 0
    assert value(text, "cronwheel_queue_depth", state="queued") == 1
    assert value(text, "cronwheel_queue_depth", state="claimed") == 0
