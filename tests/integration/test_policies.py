"""Scheduling policies on a fake clock: overlap and concurrency, cancellation,
fairness, and the schedule controls (bounds, run limits, jitter, start deadline)."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import JobPolicies
from cronwheel.domain.schedules import at, every
from cronwheel.store.protocol import Completion
from tests.integration.conftest import Rig

S = timedelta(seconds=1)
Q, R, OK, SK = FiringState.QUEUED, FiringState.RUNNING, FiringState.SUCCEEDED, FiringState.SKIPPED


def states(rig: Rig, job_id: int) -> list[FiringState]:
    firings = rig.store.list_firings(job_id=job_id, limit=100)  # type: ignore[arg-type]
    return [f.state for f in sorted(firings, key=lambda f: f.scheduled_for)]


def finish(rig: Rig, claim: Any, *, ok: bool = True) -> bool:
    now = rig.clock.now()
    return rig.store.complete(
        [
            Completion(
                firing_id=claim.firing.id,
                claim_token=claim.claim_token,
                succeeded=ok,
                started_at=now,
                finished_at=now,
            )
        ]
    )[0]


def overlap_rig(rig: Rig, overlap: str, **policies: Any) -> tuple[Any, Any]:
    """A 10-second job whose first firing is held RUNNING by a slow worker."""
    job = rig.app.schedule(
        "record",
        every("10s"),
        name=f"o-{overlap}",
        overlap=overlap,
        misfire_grace=3600,
        visibility_timeout=3600,
        **policies,
    )
    d = rig.dispatcher()
    rig.run([d], None, until=10 * S)  # first firing enqueued at 23:00:10
    assert len(rig.store.claim("slow-worker", tasks=["record"], limit=1)) == 1
    return job, d


def step(rig: Rig, d: Any, seconds: int) -> None:
    rig.run([d], rig.worker(), until=seconds * S)


def test_skip_records_the_overlapping_firing_skipped(rig: Rig) -> None:
    job, d = overlap_rig(rig, "skip")
    step(rig, d, 21)  # two more instants come due while the first runs
    assert states(rig, job.id) == [R, SK, SK]
    skipped = [f for f in rig.store.list_firings(job_id=job.id) if f.state is SK]
    assert all("concurrency cap" in (f.reason or "") for f in skipped)
    assert rig.calls == []


def test_buffer_one_keeps_the_first_and_starts_it_when_the_slot_frees(rig: Rig) -> None:
    job, d = overlap_rig(rig, "buffer_one")
    step(rig, d, 21)
    assert states(rig, job.id) == [R, Q, SK]
    (running,) = [f for f in rig.store.list_firings(job_id=job.id) if f.state is R]
    claim = type("C", (), {"firing": running, "claim_token": running.claim_token})
    assert finish(rig, claim)
    step(rig, d, 1)
    assert states(rig, job.id) == [OK, OK, SK]


def test_buffer_all_is_fifo_and_records_overflow(rig: Rig) -> None:
    job, d = overlap_rig(rig, "buffer_all", max_buffer=2)
    step(rig, d, 31)
    assert states(rig, job.id) == [R, Q, Q, SK]
    (overflow,) = [f for f in rig.store.list_firings(job_id=job.id) if f.state is SK]
    assert "buffer full" in (overflow.reason or "")
    (running,) = [f for f in rig.store.list_firings(job_id=job.id) if f.state is R]
    finish(rig, type("C", (), {"firing": running, "claim_token": running.claim_token}))
    step(rig, d, 1)
    ran = [c["scheduled_for"] for c in rig.calls]
    assert ran == sorted(ran) and len(ran) == 2  # FIFO, one at a time


def test_cancel_other_requests_cancellation_then_starts_the_new_one(rig: Rig) -> None:
    job, d = overlap_rig(rig, "cancel_other")
    step(rig, d, 11)
    firings = sorted(rig.store.list_firings(job_id=job.id), key=lambda f: f.scheduled_for)
    assert [f.state for f in firings] == [R, Q]
    assert firings[0].cancel_requested_at is not None
    # the slow worker honours it: its handler stops and reports CANCELLED
    now = rig.clock.now()
    assert rig.store.complete(
        [
            Completion(
                firing_id=firings[0].id,
                claim_token=firings[0].claim_token or "",
                succeeded=False,
                cancelled=True,
                started_at=now,
                finished_at=now,
            )
        ]
    )[0]
    step(rig, d, 1)
    assert states(rig, job.id) == [FiringState.CANCELLED, OK]


def test_terminate_other_revokes_the_running_firing_at_once(rig: Rig) -> None:
    job, d = overlap_rig(rig, "terminate_other")
    (old,) = rig.store.list_firings(job_id=job.id)
    step(rig, d, 11)
    assert states(rig, job.id) == [FiringState.CANCELLED, OK]
    assert not finish(rig, type("C", (), {"firing": old, "claim_token": old.claim_token}))
    assert "terminated" in (rig.store.get_firing(old.id).reason or "")


def test_allow_runs_overlapping_firings(rig: Rig) -> None:
    job, d = overlap_rig(rig, "allow")
    step(rig, d, 11)
    assert states(rig, job.id) == [R, OK]


def test_one_shot_jobs_are_not_capped_by_default(rig: Rig) -> None:
    for i in range(5):
        rig.app.enqueue("record", i)
    w = rig.worker()
    assert asyncio.run(w.drain_once()) == 5


def test_concurrency_cap_holds_across_concurrent_workers(rig: Rig) -> None:
    """Real concurrent claimers (4 store connections, threads): never more than the cap."""
    import threading

    from cronwheel.store.sqlite import SqliteStore

    job = rig.app.schedule(
        "record",
        every("1h"),
        name="capped",
        overlap="buffer_all",
        max_concurrency=2,
        max_buffer=1000,
    )
    when = [rig.clock.now() - timedelta(seconds=i) for i in range(40)]
    rig.store.add_firings("default", "capped", when, note="backfill")
    stores = [SqliteStore(rig.path, clock=rig.clock) for _ in range(4)]
    log: list[tuple[str, int]] = []
    lock = threading.Lock()

    def worker(store: SqliteStore) -> None:
        idle = 0
        while idle < 20:
            claims = store.claim("w", tasks=["record"], limit=3)
            if not claims:
                idle += 1
                threading.Event().wait(0.002)
                continue
            idle = 0
            with lock:
                log.extend(("start", c.firing.id) for c in claims)
            threading.Event().wait(0.003)
            with lock:
                log.extend(("end", c.firing.id) for c in claims)
                now = rig.clock.now()
                store.complete(
                    [
                        Completion(
                            firing_id=c.firing.id,
                            claim_token=c.claim_token,
                            succeeded=True,
                            started_at=now,
                            finished_at=now,
                        )
                        for c in claims
                    ]
                )

    threads = [threading.Thread(target=worker, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for s in stores:
        s.close()
    running, peak = 0, 0
    for kind, _ in log:
        running += 1 if kind == "start" else -1
        peak = max(peak, running)
    assert peak <= 2
    assert states(rig, job.id).count(OK) == 40


# -- cancellation -----------------------------------------------------------------------------
def test_cancel_queued_is_immediate_and_never_runs(rig: Rig) -> None:
    f = rig.app.enqueue("record", 1)
    assert rig.store.cancel_firing(f.id).outcome == "cancelled"
    assert asyncio.run(rig.worker().drain_once()) == 0
    assert rig.calls == []


def test_cancel_running_async_handler_is_interrupted(rig: Rig) -> None:
    started = asyncio.Event()

    @rig.app.task
    async def long_async(ctx: Any) -> None:
        started.set()
        await asyncio.sleep(3600)

    f = rig.app.enqueue("long_async")
    w = rig.worker(heartbeat_interval=timedelta(milliseconds=20))

    async def scenario() -> None:
        stop = asyncio.Event()
        runner = asyncio.create_task(w.run(stop))
        await asyncio.wait_for(started.wait(), 10)
        assert rig.store.cancel_firing(f.id).outcome == "cancel_requested"
        for _ in range(500):
            if rig.store.get_firing(f.id).state is FiringState.CANCELLED:
                break
            await asyncio.sleep(0.01)
        stop.set()
        await asyncio.wait_for(runner, 30)

    asyncio.run(scenario())
    got = rig.store.get_firing(f.id)
    assert got.state is FiringState.CANCELLED and got.finished_at is not None


def test_a_handler_ignoring_cancel_loses_its_lease_after_the_grace(rig: Rig) -> None:
    job = rig.app.schedule("record", at(rig.clock.now() + S), name="stubborn", cancel_grace=5)
    d = rig.dispatcher()
    rig.run([d], None, until=2 * S)
    (claim,) = rig.store.claim("w", tasks=["record"], limit=1)
    assert rig.store.cancel_firing(claim.firing.id).outcome == "cancel_requested"
    rig.run([d], None, until=3 * S)
    assert rig.store.get_firing(claim.firing.id).state is R
    rig.run([d], None, until=3 * S)
    f = rig.store.get_firing(claim.firing.id)
    assert f.state is FiringState.CANCELLED and "grace" in (f.reason or "")
    assert not finish(rig, claim)  # the late result is rejected
    assert states(rig, job.id) == [FiringState.CANCELLED]


@pytest.mark.parametrize("order", ["complete_first", "cancel_first"])
def test_cancel_racing_completion_ends_in_exactly_one_terminal_state(rig: Rig, order: str) -> None:
    f = rig.app.enqueue("record")
    (claim,) = rig.store.claim("w", tasks=["record"], limit=1)
    if order == "complete_first":
        assert finish(rig, claim)
        assert rig.store.cancel_firing(f.id).outcome == "already_final"
        assert rig.store.get_firing(f.id).state is OK
    else:
        assert rig.store.cancel_firing(f.id).outcome == "cancel_requested"
        assert finish(rig, claim)  # it finished before the grace: its result stands
        assert rig.store.cancel_firing(f.id).outcome == "already_final"
        assert rig.store.get_firing(f.id).state is OK
    rig.clock.advance(timedelta(minutes=5))
    rig.store.requeue_expired()
    assert rig.store.get_firing(f.id).state is OK


# -- fairness ---------------------------------------------------------------------------------
def test_one_namespace_flood_does_not_starve_another(rig: Rig) -> None:
    """3,000 firings flood namespace "flood"; 5 arrive in "quiet" 0.5 s later. Plain FIFO
    would serve them after all 3,000; fair queueing serves them after the ~500 flood
    firings that really were ahead of them (the flood only delays its own tail)."""
    from cronwheel.domain.models import JobSpec
    from cronwheel.domain.schedules import now

    rig.store.create_jobs(
        [
            (JobSpec(name=f"a{i}", task="record", schedule=now(), namespace="flood"), None)
            for i in range(3000)
        ]
    )
    jobs = rig.store.list_jobs(namespace="flood", limit=5000)
    for job in jobs:  # one firing per job, all due now
        rig.store.add_firings("flood", job.name, [rig.clock.now()], note="flood")
    rig.clock.advance(timedelta(milliseconds=500))
    for i in range(5):
        rig.store.enqueue_now(
            JobSpec(name=f"b{i}", task="record", schedule=now(), namespace="quiet")
        )
    order: list[str] = []
    while claims := rig.store.claim("w", tasks=["record"], limit=100):
        order += [c.firing.namespace for c in claims]
    assert len(order) == 3005
    last_quiet = max(i for i, ns in enumerate(order) if ns == "quiet")
    assert last_quiet < 700, last_quiet


def test_low_priority_still_progresses_under_a_high_priority_flood(rig: Rig) -> None:
    from cronwheel.domain.models import JobPolicies, JobSpec
    from cronwheel.domain.schedules import now

    low = rig.store.enqueue_now(
        JobSpec(name="low", task="record", schedule=now(), policies=JobPolicies(priority=1))
    )
    served: list[int] = []
    for _tick in range(30):  # every 100 ms ten high-priority firings arrive; capacity is 8
        for i in range(10):
            rig.store.enqueue_now(
                JobSpec(
                    name=f"h{_tick}-{i}",
                    task="record",
                    schedule=now(),
                    policies=JobPolicies(priority=10),
                )
            )
        served += [c.firing.id for c in rig.store.claim("w", tasks=["record"], limit=8)]
        rig.clock.advance(timedelta(milliseconds=100))
        if low.id in served:
            break
    assert low.id in served  # served within the flood, not after it


# -- schedule controls -----------------------------------------------------------------------
def test_bounds_and_run_limit(rig: Rig) -> None:
    start = rig.clock.now() + 20 * S
    bounded_job = rig.app.schedule(
        "record", every("10s"), name="bounded", start_at=start, end_at=start + 30 * S
    )
    limited = rig.app.schedule("record", every("10s"), name="limited", max_runs=2)
    d = rig.dispatcher()
    rig.run([d], rig.worker(), until=90 * S)
    b = sorted(f.scheduled_for for f in rig.store.list_firings(job_id=bounded_job.id))
    assert b == [start + k * 10 * S for k in range(4)]
    assert len(rig.store.list_firings(job_id=limited.id)) == 2
    assert rig.store.get_job_by_id(limited.id).next_fire_at is None


def test_jitter_delays_start_deterministically_within_the_bound(rig: Rig) -> None:
    job = rig.app.schedule("record", every("10s"), name="jittery", jitter=5)
    d = rig.dispatcher()
    rig.run([d], rig.worker(), until=45 * S, step=timedelta(milliseconds=100))
    firings = rig.store.list_firings(job_id=job.id)
    offsets = [f.due_at - f.scheduled_for for f in firings]
    assert all(timedelta(0) <= o < 5 * S for o in offsets)
    assert len(set(offsets)) > 1
    assert all(
        f.started_at is not None and f.started_at >= f.due_at for f in firings if f.state is OK
    )


def test_start_deadline_records_missed(rig: Rig) -> None:
    job = rig.app.schedule("record", at(rig.clock.now() + S), name="deadline", start_deadline=5)
    d = rig.dispatcher()
    rig.run([d], None, until=10 * S)  # no worker for 10 s
    (f,) = rig.store.list_firings(job_id=job.id)
    assert f.state is FiringState.MISSED and "start deadline" in (f.reason or "")
    assert asyncio.run(rig.worker().drain_once()) == 0


def test_trigger_and_backfill_add_firings_without_moving_the_cursor(rig: Rig) -> None:
    job = rig.app.schedule("record", every("1h"), name="hourly")
    before = rig.store.get_job_by_id(job.id).next_fire_at
    now = rig.clock.now()
    added = rig.store.add_firings("default", "hourly", [now], note="trigger")
    assert len(added.inserted) == 1
    past = [datetime(2026, 3, 27, h, tzinfo=UTC) for h in (20, 21, 22)]
    added = rig.store.add_firings("default", "hourly", past, note="backfill")
    assert len(added.inserted) == 3
    again = rig.store.add_firings("default", "hourly", past, note="backfill")
    assert again.duplicates == 3 and again.inserted == []
    assert rig.store.get_job_by_id(job.id).next_fire_at == before


# -- early claims (a crowd before its instant) ------------------------------------------------
def _crowd(rig: Rig, n: int, due: datetime, policies: JobPolicies | None = None) -> None:
    """``n`` jobs with one firing each, queued and due at ``due`` (as if enqueued ahead);
    ``policies``: the jobs' (the defaults when None)."""
    import sqlite3

    from cronwheel.domain.models import JobSpec

    policies = policies or JobPolicies()
    rig.store.create_jobs(
        [
            (
                JobSpec(name=f"crowd{i}", task="crowded", schedule=every(3600), policies=policies),
                None,
            )
            for i in range(n)
        ]
    )
    for i in range(n):
        rig.store.add_firings("default", f"crowd{i}", [due], note="crowd")
    with sqlite3.connect(rig.path) as conn:  # a trigger is due at once; these at `due`
        conn.execute(
            "UPDATE firings SET due_at = scheduled_for, vdeadline = scheduled_for"
            " WHERE task = 'crowded'"
        )


def _running(rig: Rig) -> int:
    return len(rig.store.list_firings(states=[FiringState.RUNNING], limit=1000))


def _run_until(rig: Rig, w: Any, done: Any, check: Any = None, timeout_s: float = 30) -> None:
    async def scenario() -> None:
        stop = asyncio.Event()
        runner = asyncio.create_task(w.run(stop))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not done() and loop.time() < deadline:
            if check is not None:
                check()
            await asyncio.sleep(0.01)
        stop.set()
        await runner

    asyncio.run(scenario())


def test_a_crowd_is_claimed_ahead_up_to_early_claims_and_runs_within_concurrency(
    rig: Rig,
) -> None:
    """60 firings due 2 s ahead: the worker holds its 4 slots' claims and 20 early ones
    (no more) before the instant, starts none early, and never runs more than 4 at once."""
    running, peak, started = 0, 0, []
    due = rig.clock.now() + timedelta(seconds=2)

    @rig.app.task
    async def crowded(ctx: Any) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        started.append(ctx.scheduled_for)
        await asyncio.sleep(0.005)
        running -= 1

    _crowd(rig, 60, due)
    w = rig.worker(concurrency=4, early_claims=20, prefetch=timedelta(seconds=3))
    held: list[int] = []

    def check() -> None:
        held.append(len(w._active))  # the worker's claims (the store lags its completions)
        if held[-1] == 24 and not started and rig.clock.now() < due:
            # held in the store (CLAIMED, no start time), none started: the store tells
            # the truth about a firing claimed ahead of its instant
            claimed = rig.store.list_firings(states=[FiringState.CLAIMED], limit=1000)
            assert len(claimed) == 24 and all(f.started_at is None for f in claimed)
            assert _running(rig) == 0
            rig.clock.advance(timedelta(seconds=2))  # the instant: the crowd falls due

    _run_until(rig, w, lambda: len(started) == 60, check)
    assert len(started) == 60
    assert 24 in held  # claimed ahead: 4 + 20 before the instant
    assert max(held) <= 24
    assert peak <= 4


def test_due_firings_are_claimed_for_free_slots_and_for_the_workers_pace(rig: Rig) -> None:
    """Firings already due are claimed for the free slots, plus as many as the worker's
    handlers finished within the last ``claim_ahead_window`` (its pace: the next batch
    is claimed while this one runs). While its handlers are slow (none finishes), it
    holds no more than its slots: another worker can take the rest. (Counted in the
    worker: the store may still show a finished firing RUNNING until its completion
    is written.)"""
    held_at_start: list[int] = []
    workers: list[Any] = []
    release = threading.Event()

    @rig.app.task
    def crowded(ctx: Any) -> None:
        held_at_start.append(len(workers[0]._active))
        if len(held_at_start) <= 4:
            release.wait(10)  # the first four are slow

    _crowd(rig, 40, rig.clock.now())
    w = rig.worker(concurrency=4, early_claims=20)
    workers.append(w)
    checks_while_slow = 0

    def check() -> None:
        nonlocal checks_while_slow
        if len(held_at_start) == 4 and not release.is_set():
            # four slow handlers running, none finished: no pace, nothing claimed ahead
            assert len(w._active) == 4
            assert len(rig.store.list_firings(states=[FiringState.QUEUED], limit=100)) == 36
            checks_while_slow += 1
            if checks_while_slow == 5:
                release.set()

    _run_until(rig, w, lambda: len(held_at_start) == 40, check)
    assert len(held_at_start) == 40
    assert checks_while_slow == 5
    # once handlers finish quickly the worker holds up to its slots again as many ahead
    assert 4 < max(held_at_start[4:]) <= 8


def test_completions_ride_with_the_next_claim_while_the_claim_loop_is_busy(rig: Rig) -> None:
    """A busy worker writes what finished with its next claim (one transaction); the
    flush loop writes on its own only while the claim loop is idle, never beside a
    claim in flight (on SQLite that second writer would only wait for the lock).
    Each claim is slowed to 20 ms here, four times the flush interval."""
    lock = threading.Lock()
    in_claim = 0
    beside_a_claim: list[int] = []
    separate_writes = 0
    claim_and_complete = rig.store.complete_and_claim
    complete = rig.store.complete

    def slow_claim(*args: Any, **kwargs: Any) -> Any:
        nonlocal in_claim
        with lock:
            in_claim += 1
        try:
            time.sleep(0.02)
            return claim_and_complete(*args, **kwargs)
        finally:
            with lock:
                in_claim -= 1

    def watched_complete(batch: Any) -> Any:
        nonlocal separate_writes
        with lock:
            beside_a_claim.append(in_claim)
            separate_writes += 1
        return complete(batch)

    rig.store.complete_and_claim = slow_claim  # type: ignore[method-assign]
    rig.store.complete = watched_complete  # type: ignore[method-assign]

    @rig.app.task
    def crowded(ctx: Any) -> None:
        pass

    _crowd(rig, 60, rig.clock.now())
    w = rig.worker(concurrency=4, early_claims=0)

    def succeeded() -> int:
        return len(rig.store.list_firings(states=[FiringState.SUCCEEDED], limit=100))

    _run_until(rig, w, lambda: succeeded() == 60)
    assert succeeded() == 60  # the last ones were written while the claim loop idled
    assert separate_writes >= 1
    assert beside_a_claim and max(beside_a_claim) == 0
