"""What only the memory store has: handles sharing one store, in-process wake-ups, and
closing. Everything else it does is the store contract (tests/contract)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cronwheel.domain.clock import FakeClock
from cronwheel.domain.models import JobPolicies, JobSpec
from cronwheel.domain.schedules import every, now
from cronwheel.errors import StoreError, StoreUnavailableError
from cronwheel.store.memory import MemoryStore
from cronwheel.store.protocol import DISPATCHER_LEASE, Completion, JobAdvance, PlannedFiring

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


def _adhoc(name: str, task: str = "t") -> JobSpec:
    return JobSpec(name=name, task=task, schedule=now())


def test_handles_on_one_data_share_the_store_and_its_lock() -> None:
    clock = FakeClock(T0)
    a = MemoryStore(clock=clock)
    b = MemoryStore(clock=clock, data=a.data)
    f = a.enqueue_now(_adhoc("x"))
    (claim,) = b.claim("w", tasks=["t"], limit=5)
    assert claim.firing.id == f.id and a.claim("w2", tasks=["t"], limit=5) == []
    b.close()  # closing one handle leaves the store to the others
    with pytest.raises(StoreError, match="closed"):
        b.get_firing(f.id)
    with pytest.raises(StoreUnavailableError):
        b.ping()  # what the HTTP API's readiness probe reports as 503
    a.ping()
    done = Completion(
        firing_id=f.id, claim_token=claim.claim_token, succeeded=True, started_at=T0, finished_at=T0
    )
    assert a.complete([done]) == [True]
    assert MemoryStore(clock=clock).list_firings() == []  # a new store is empty


def test_wakeups_are_called_back_after_work_is_queued_until_closed() -> None:
    clock = FakeClock(T0)
    store = MemoryStore(clock=clock)
    other = MemoryStore(clock=clock, data=store.data)
    rung: list[int] = []
    wakeup = other.open_wakeup(lambda: rung.append(len(store.list_firings())))
    assert wakeup.address is None  # in-process: nothing to publish

    store.enqueue_now(_adhoc("a"))
    assert rung == [1]  # after the firing is there
    job = store.create_job(
        JobSpec(name="cron", task="t", schedule=every("1m"), policies=JobPolicies(max_attempts=1)),
        first_fire_at=T0,
    )
    lease = store.acquire_lease(DISPATCHER_LEASE, "leader", timedelta(seconds=10))
    assert lease is not None
    advance = JobAdvance(
        job_id=job.id,
        expected_next_fire_at=T0,
        new_next_fire_at=T0 + timedelta(minutes=1),
        firings=[PlannedFiring(scheduled_for=T0)],
    )
    (fid,) = store.enqueue(lease, [advance]).inserted
    assert rung == [1, 2]
    store.add_firings("default", "cron", [T0], note="a duplicate: nothing new")
    store.add_firings("default", "cron", [T0 + timedelta(seconds=30)], note="trigger")
    assert rung == [1, 2, 3]
    claims = store.claim("w", tasks=["t"], limit=5)
    (mine,) = [c for c in claims if c.firing.id == fid]
    failed = Completion(
        firing_id=fid, claim_token=mine.claim_token, succeeded=False, started_at=T0, finished_at=T0
    )
    assert store.complete([failed]) == [True]
    store.redrive_firing(fid)
    assert rung == [1, 2, 3, 3]
    wakeup.close()
    store.enqueue_now(_adhoc("b"))
    assert len(rung) == 4


def test_a_failing_wakeup_listener_loses_only_its_hint() -> None:
    store = MemoryStore(clock=FakeClock(T0))

    def closed_loop() -> None:
        raise RuntimeError("Event loop is closed")

    heard: list[str] = []
    store.open_wakeup(closed_loop)
    store.open_wakeup(lambda: heard.append("rung"))
    f = store.enqueue_now(_adhoc("a"))
    assert store.get_firing(f.id).id == f.id and heard == ["rung"]
