"""Dispatcher + worker + SQLite store on a fake clock: the whole path of a firing."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime, timedelta

import pytest

from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import JobSpec
from cronwheel.domain.schedules import at, cron, every
from cronwheel.errors import LeaseLostError
from cronwheel.web.ids import ids_for
from tests.integration.conftest import Rig

S = timedelta(seconds=1)
MS = timedelta(milliseconds=1)


def test_cron_job_fires_at_its_instants_not_before(rig: Rig) -> None:
    job = rig.app.schedule("record", cron("*/10 * * * * *"), name="ten-seconds")
    d = rig.dispatcher(lead=timedelta(milliseconds=500))
    w = rig.worker()
    rig.run([d], w, until=35 * S, step=50 * MS)
    firings = sorted(rig.store.list_firings(job_id=job.id), key=lambda f: f.scheduled_for)
    instants = [f.scheduled_for for f in firings]
    assert instants == [datetime(2026, 3, 27, 23, 0, s, tzinfo=UTC) for s in (10, 20, 30)]
    for f in firings:
        assert f.state is FiringState.SUCCEEDED
        # enqueued by the leader at most `lead` (+ one tick) ahead, never later than its instant
        assert f.scheduled_for - 510 * MS <= f.enqueued_at <= f.scheduled_for
        assert f.started_at is not None and f.started_at >= f.scheduled_for
    shown = ids_for(rig.store)  # a handler's key names the job id users see
    assert [c["key"] for c in rig.calls] == [shown.firing(f).idempotency_key for f in firings]


def test_the_leader_wakes_half_a_tick_after_a_round_instant_not_on_it(rig: Rig) -> None:
    """The wheel's ticks are round instants, as firings' instants mostly are: the leader's
    sleep ends half a tick after the next expiry (never on an instant a held firing may
    be starting at), and that wake enqueues the firing."""
    job = rig.app.schedule("record", cron("*/10 * * * * *"), name="ten-seconds")
    quiet = dict.fromkeys(("change_poll", "scan_interval", "reap_interval"), 30 * S)
    d = rig.dispatcher(lead=500 * MS, tick=10 * MS, lease_ttl=90 * S, **quiet)
    d.step()  # leads, loads the job: its firing at 23:00:10 expires at 23:00:09.500
    rig.clock.advance(9400 * MS)
    sleep = d.step()
    assert rig.store.list_firings(job_id=job.id) == []
    assert sleep == pytest.approx(0.105, abs=1e-6)  # to 09.505: half a tick after 09.500
    rig.clock.advance(timedelta(seconds=sleep))
    d.step()
    (f,) = rig.store.list_firings(job_id=job.id)
    assert f.scheduled_for == datetime(2026, 3, 27, 23, 0, 10, tzinfo=UTC)
    assert f.enqueued_at == datetime(2026, 3, 27, 23, 0, 9, 505000, tzinfo=UTC)


def test_the_leaders_store_upkeep_runs_between_instants_once_an_interval(rig: Rig) -> None:
    """The store's upkeep (SQLite's checkpoint) runs in a step that enqueued, which woke
    between instants, at most once an interval; with nothing enqueued, a whole interval
    late at most."""
    rig.app.schedule("record", every(3), name="every-3s")
    quiet = dict.fromkeys(("change_poll", "scan_interval", "reap_interval"), 30 * S)
    d = rig.dispatcher(lead=500 * MS, lease_ttl=90 * S, upkeep_interval=S, **quiet)
    kept: list[datetime] = []
    d.store.upkeep = lambda: kept.append(rig.clock.now())  # type: ignore[method-assign]
    for _ in range(1200):  # 12 s in steps of 10 ms
        d.step()
        rig.clock.advance(10 * MS)
    enqueued = sorted(f.enqueued_at for f in rig.store.list_firings(limit=100))
    assert len(enqueued) == 4 and len(kept) >= 4, (enqueued, kept)  # 3, 6, 9, 12 s - lead
    for before, t in itertools.pairwise(kept):
        assert t - before >= S  # once an interval at most
        # between instants, or overdue (to the step: the clock moves 10 ms at a time)
        assert t in enqueued or 2 * S <= t - before <= 2 * S + 10 * MS
    for t in enqueued:  # each enqueue an interval after the last upkeep had one
        last = max(k for k in kept if k <= t)
        assert last == t or t - last < S, (t, kept)


def test_dst_gap_next_valid_fires_at_the_transition(rig: Rig) -> None:
    # Berlin springs forward on 2026-03-29 at 02:00 local (01:00Z): 02:30 does not exist.
    job = rig.app.schedule("record", cron("30 2 * * *", tz="Europe/Berlin"), name="berlin")
    assert job.next_fire_at == datetime(2026, 3, 28, 1, 30, tzinfo=UTC)  # 02:30 CET
    rig.clock.set(datetime(2026, 3, 28, 1, 29, 50, tzinfo=UTC))
    d = rig.dispatcher()
    w = rig.worker()
    rig.run([d], w, until=20 * S, step=S)
    rig.clock.set(datetime(2026, 3, 29, 0, 59, 50, tzinfo=UTC))
    rig.run([d], w, until=20 * S, step=S)
    got = [c["scheduled_for"] for c in rig.calls]
    assert got == [
        datetime(2026, 3, 28, 1, 30, tzinfo=UTC),
        datetime(2026, 3, 29, 1, 0, tzinfo=UTC),
    ]


def test_sync_and_async_handlers_get_args_and_context(rig: Rig) -> None:
    rig.app.enqueue("record", 1, "two", k=3)
    rig.app.enqueue("arecord", 42)
    w = rig.worker()
    assert asyncio.run(w.drain_once()) == 2
    by_kind = {c.get("async", False): c for c in rig.calls}
    assert by_kind[False]["args"] == (1, "two") and by_kind[False]["kwargs"] == {"k": 3}
    assert by_kind[True]["value"] == 42
    assert all(c["key"].count(":") >= 1 for c in rig.calls)


def test_failures_retry_with_backoff_then_dead_with_traceback(rig: Rig) -> None:
    job = rig.app.schedule(
        "fail",
        at(rig.clock.now() + S),
        name="doomed",
        retries=2,
        retry_backoff=10,
        retry_backoff_max=60,
    )
    d = rig.dispatcher()
    w = rig.worker()
    rig.run([d], w, until=2 * S)
    (f,) = rig.store.list_firings(job_id=job.id)
    assert f.state is FiringState.QUEUED and f.attempt == 1
    assert f.error is not None and "ValueError: handler exploded" in f.error
    assert f.started_at is not None
    assert 5 * S <= f.due_at - f.started_at <= 10 * S  # equal jitter: [base/2, base]
    rig.run([d], w, until=11 * S)
    f = rig.store.get_firing(f.id)
    assert f.attempt == 2 and f.state is FiringState.QUEUED
    assert f.started_at is not None
    assert 10 * S <= f.due_at - f.started_at <= 20 * S  # doubled for the second retry
    rig.run([d], w, until=25 * S)
    f = rig.store.get_firing(f.id)
    assert f.state is FiringState.DEAD and f.attempt == 3
    assert [c["attempt"] for c in rig.calls] == [1, 2, 3]
    assert len({c["key"] for c in rig.calls}) == 1  # one idempotency key across retries


def test_only_one_of_two_dispatchers_leads_and_nothing_is_enqueued_twice(rig: Rig) -> None:
    job = rig.app.schedule("record", every("1s"), name="every-second")
    a = rig.dispatcher("node-a", lease_ttl=3 * S)
    b = rig.dispatcher("node-b", lease_ttl=3 * S)
    w = rig.worker()
    rig.run([a, b], w, until=10 * S)
    assert a.is_leader != b.is_leader
    firings = rig.store.list_firings(job_id=job.id, limit=1000)
    instants = sorted(f.scheduled_for for f in firings)
    assert len(instants) == len(set(instants)) >= 9
    assert all(y - x == S for x, y in itertools.pairwise(instants))


def test_frozen_leader_is_fenced_out_and_the_standby_loses_nothing(rig: Rig) -> None:
    job = rig.app.schedule("record", every("1s"), name="every-second")
    a = rig.dispatcher("node-a", lease_ttl=3 * S)
    b = rig.dispatcher("node-b", lease_ttl=3 * S)
    w = rig.worker()
    rig.run([a, b], w, until=5 * S)
    leader, standby = (a, b) if a.is_leader else (b, a)
    old_epoch = leader.lease.epoch if leader.lease else -1
    # The leader freezes (SIGSTOP): only the standby steps for 10 s.
    rig.run([standby], w, until=10 * S)
    assert standby.is_leader and standby.lease is not None and standby.lease.epoch == old_epoch + 1
    # The old leader wakes up believing it leads; its next batch is fenced out.
    assert leader.is_leader
    rig.run([leader, standby], w, until=3 * S)
    assert not leader.is_leader and leader.stats.lease_lost == 1
    assert leader.stats.fenced_writes + leader.stats.lease_lost >= 1
    instants = sorted(f.scheduled_for for f in rig.store.list_firings(job_id=job.id, limit=1000))
    assert len(instants) == len(set(instants))
    gaps = [y - x for x, y in itertools.pairwise(instants)]
    assert all(g == S for g in gaps), "no instant lost across the takeover"
    epochs = {f.enqueued_epoch for f in rig.store.list_firings(job_id=job.id, limit=1000)}
    assert epochs == {old_epoch, old_epoch + 1}


def test_a_fenced_write_raises_and_writes_nothing(rig: Rig) -> None:
    from cronwheel.store.protocol import DISPATCHER_LEASE, JobAdvance, PlannedFiring

    job = rig.app.schedule("record", every("1m"), name="j")
    old = rig.store.acquire_lease(DISPATCHER_LEASE, "old", 2 * S)
    rig.clock.advance(3 * S)
    assert rig.store.acquire_lease(DISPATCHER_LEASE, "new", 2 * S) is not None
    assert old is not None and job.next_fire_at is not None
    try:
        rig.store.enqueue(
            old,
            [
                JobAdvance(
                    job_id=job.id,
                    expected_next_fire_at=job.next_fire_at,
                    new_next_fire_at=None,
                    firings=[PlannedFiring(scheduled_for=job.next_fire_at)],
                )
            ],
        )
    except LeaseLostError:
        pass
    else:  # pragma: no cover - the assertion below explains
        raise AssertionError("a deposed leader's enqueue must raise LeaseLostError")
    assert rig.store.list_firings(job_id=job.id) == []


def test_misfire_fire_once_after_an_outage(rig: Rig) -> None:
    job = rig.app.schedule("record", every("1m"), name="m", misfire="fire_once", misfire_grace=5)
    rig.clock.advance(timedelta(minutes=30, seconds=20))  # nobody led for half an hour
    d = rig.dispatcher()
    w = rig.worker()
    rig.run([d], w, until=2 * S)
    firings = rig.store.list_firings(job_id=job.id)
    assert [f.scheduled_for for f in firings] == [datetime(2026, 3, 27, 23, 30, tzinfo=UTC)]
    stored = rig.store.get_job_by_id(job.id)
    assert stored.missed_total == 29
    assert stored.next_fire_at == datetime(2026, 3, 27, 23, 31, tzinfo=UTC)
    (event,) = rig.store.job_events(job.id)
    assert event.count == 29 and event.first_at == datetime(2026, 3, 27, 23, 1, tzinfo=UTC)


def test_misfire_fire_all_is_capped_and_skip_fires_nothing(rig: Rig) -> None:
    fire_all = rig.app.schedule(
        "record",
        every("1m"),
        name="all",
        misfire="fire_all",
        misfire_grace=5,
        max_catchup=10,
        catchup_window=20 * 60,
    )
    skip = rig.app.schedule("record", every("1m"), name="skip", misfire="skip", misfire_grace=5)
    rig.clock.advance(timedelta(minutes=30, seconds=20))
    d = rig.dispatcher()
    rig.run([d], None, until=S)
    got = sorted(f.scheduled_for for f in rig.store.list_firings(job_id=fire_all.id))
    assert got == [datetime(2026, 3, 27, 23, m, tzinfo=UTC) for m in range(21, 31)]
    assert rig.store.get_job_by_id(fire_all.id).missed_total == 20
    assert rig.store.list_firings(job_id=skip.id) == []
    assert rig.store.get_job_by_id(skip.id).missed_total == 30


def test_paused_job_does_not_fire_and_resume_applies_the_misfire_policy(rig: Rig) -> None:
    job = rig.app.schedule("record", every("10s"), name="p", misfire_grace=1)
    d = rig.dispatcher()
    rig.run([d], None, until=15 * S)
    assert len(rig.store.list_firings(job_id=job.id)) == 1
    rig.store.set_paused("default", "p", True)
    rig.run([d], None, until=60 * S)
    assert len(rig.store.list_firings(job_id=job.id)) == 1
    rig.store.set_paused("default", "p", False)
    rig.run([d], None, until=2 * S)
    firings = rig.store.list_firings(job_id=job.id)
    assert len(firings) == 2  # one catch-up (fire_once), the rest recorded as missed
    assert rig.store.get_job_by_id(job.id).missed_total == 5


def test_rescheduling_a_job_takes_effect_without_a_restart(rig: Rig) -> None:
    job = rig.app.schedule("record", every("1h"), name="r")
    d = rig.dispatcher()
    rig.run([d], None, until=2 * S)
    rig.app.schedule("record", every("5s"), name="r")
    rig.run([d], None, until=12 * S)
    assert len(rig.store.list_firings(job_id=job.id)) == 2


def test_expired_claims_are_requeued_by_the_leader(rig: Rig) -> None:
    rig.app.schedule("record", at(rig.clock.now() + S), name="x", visibility_timeout=5)
    d = rig.dispatcher()
    rig.run([d], None, until=2 * S)
    (claim,) = rig.store.claim("dead-worker", tasks=["record"], limit=1)
    rig.run([d], None, until=7 * S)
    f = rig.store.get_firing(claim.firing.id)
    assert f.state is FiringState.QUEUED and d.stats.reaped == 1
    w = rig.worker()
    rig.run([d], w, until=S)
    f = rig.store.get_firing(claim.firing.id)
    assert f.state is FiringState.SUCCEEDED and f.attempt == 2
    key = ids_for(rig.store).firing(claim.firing).idempotency_key  # the key users see
    assert rig.calls[0]["key"] == key and rig.calls[0]["attempt"] == 2


def test_herd_of_one_shot_jobs_is_enqueued_in_batches(rig: Rig) -> None:
    due = rig.clock.now() + 3 * S
    for i in range(2500):
        rig.app.schedule("record", at(due), name=f"herd-{i}")
    d = rig.dispatcher(batch_size=1000)
    rig.run([d], None, until=4 * S)
    assert d.stats.enqueued == 2500 and d.stats.duplicates == 0
    assert max(d.stats.batches) <= 1000
    assert rig.store.status().counts["queued"] == 2500


def test_a_crowd_is_enqueued_early_enough_to_be_queued_by_its_lead(rig: Rig) -> None:
    """3,000 jobs due at the same instant, enqueued at an assumed 2,000 firings/s (halved:
    1,000/s): the leader must begin ~3 s before the lead, not at it. One job alone is
    enqueued at its lead, as before."""
    due = rig.clock.now() + 5 * S
    rig.app.schedule("record", at(due + 30 * S), name="alone")
    for i in range(3000):
        rig.app.schedule("record", at(due), name=f"crowd-{i}")
    d = rig.dispatcher(batch_size=1000, lookahead=40 * S, enqueue_rate=2000.0)
    queued = lambda: rig.store.status().counts.get("queued", 0)  # noqa: E731
    d.step()
    assert queued() == 0  # T - 5 s: 3,000 at 1,000/s need 3 s, before the 0.5 s lead
    rig.clock.advance(1.7 * S)  # T - 3.3 s: the crowd must have started
    d.step()
    assert queued() == 3000
    firings = rig.store.list_firings(limit=5000)
    assert {f.due_at for f in firings} == {due}  # early in the queue, due at its instant
    rig.run([d], None, until=32.7 * S)  # to T + 29.4 s: the lone job's lead is T + 29.5 s
    assert queued() == 3000  # a lone job is not taken early
    rig.run([d], None, until=0.3 * S)
    assert queued() == 3001 and d.stats.lease_lost == 0


def test_leader_that_cannot_renew_steps_down_within_its_ttl(rig: Rig) -> None:
    from cronwheel.errors import StoreUnavailableError

    d = rig.dispatcher(lease_ttl=3 * S)
    rig.run([d], None, until=S)
    assert d.is_leader

    def unavailable(*args: object, **kwargs: object) -> None:
        raise StoreUnavailableError("connection refused")

    d.store.acquire_lease = unavailable  # type: ignore[method-assign]
    rig.run([d], None, until=2 * S)
    assert d.is_leader  # renewals failing, but the lease is still valid
    rig.run([d], None, until=2 * S)
    assert not d.is_leader and d.stats.lease_lost == 1


def test_a_long_step_renews_the_lease_between_batches(rig: Rig) -> None:
    """40 enqueue batches that each take 1 s (a slow store) outlast a 3 s lease: the
    leader renews between batches instead of being fenced out halfway."""
    due = rig.clock.now() + 2 * S
    rig.store.create_jobs(
        [(JobSpec(name=f"h{i}", task="record", schedule=at(due)), due) for i in range(4000)]
    )
    d = rig.dispatcher(lease_ttl=3 * S, batch_size=100, scan_page=500)
    real_enqueue = d.store.enqueue

    def slow_enqueue(lease, advances):  # type: ignore[no-untyped-def]
        rig.clock.advance(S)
        return real_enqueue(lease, advances)

    d.store.enqueue = slow_enqueue  # type: ignore[method-assign]
    rig.run([d], None, until=3 * S)
    assert d.stats.lease_lost == 0 and d.stats.fenced_writes == 0
    assert d.stats.enqueued == 4000 and d.stats.terms == 1


def test_incremental_scans_read_each_due_job_once(rig: Rig) -> None:
    due = rig.clock.now() + 4 * S
    rig.store.create_jobs(
        [(JobSpec(name=f"s{i}", task="record", schedule=at(due)), due) for i in range(1200)]
    )
    d = rig.dispatcher(scan_page=500, lookahead=5 * S, scan_interval=timedelta(milliseconds=200))
    loaded: list[int] = []
    real_due_jobs = d.store.due_jobs

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        jobs = real_due_jobs(*args, **kwargs)
        loaded.extend(j.id for j in jobs)
        return jobs

    d.store.due_jobs = counting  # type: ignore[method-assign]
    rig.run([d], None, until=3 * S)  # fifteen scans inside the lookahead window
    assert len(loaded) == 1200  # one full scan, then incremental scans that find nothing new
    rig.run([d], None, until=2 * S)
    assert d.stats.enqueued == 1200


def test_a_failed_enqueue_is_retried_by_a_full_rescan(rig: Rig) -> None:
    """The store fails one enqueue (connection lost): the expired wheel entries are gone
    and the cursors did not move, so the next scan must reload them — not wait for the
    periodic full scan."""
    from cronwheel.errors import StoreUnavailableError

    job = rig.app.schedule("record", every("1s"), name="resilient")
    d = rig.dispatcher()
    rig.run([d], None, until=2 * S)
    real_enqueue = d.store.enqueue
    failures = [1]

    def flaky(lease, advances):  # type: ignore[no-untyped-def]
        if failures:
            failures.pop()
            raise StoreUnavailableError("server closed the connection")
        return real_enqueue(lease, advances)

    d.store.enqueue = flaky  # type: ignore[method-assign]
    rig.run([d], None, until=3 * S)
    instants = sorted(f.scheduled_for for f in rig.store.list_firings(job_id=job.id, limit=100))
    assert len(instants) >= 4
    assert all(b - a == S for a, b in itertools.pairwise(instants))
