"""The Store contract: every implementation passes this suite unchanged."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import FiringId, JobSpec
from cronwheel.domain.policies import MissedRange
from cronwheel.domain.schedules import every
from cronwheel.errors import (
    ConflictError,
    FiringNotFoundError,
    InvalidTransitionError,
    JobNotFoundError,
    LeaseLostError,
)
from cronwheel.store.protocol import (
    DISPATCHER_LEASE,
    Completion,
    JobAdvance,
    PlannedFiring,
)
from tests.contract.conftest import Harness, spec

S = timedelta(seconds=1)


def _lease(h: Harness, holder: str = "leader-a", ttl: timedelta = 10 * S):
    lease = h.store.acquire_lease(DISPATCHER_LEASE, holder, ttl)
    assert lease is not None
    return lease


def _fire(h: Harness, job, *instants, lease=None):
    """Enqueue firings for ``job`` at these instants, advancing its cursor past them."""
    lease = lease or _lease(h)
    new_next = instants[-1] + timedelta(minutes=1)
    return h.store.enqueue(
        lease,
        [
            JobAdvance(
                job_id=job.id,
                expected_next_fire_at=job.next_fire_at,
                new_next_fire_at=new_next,
                firings=[PlannedFiring(scheduled_for=t) for t in instants],
            )
        ],
    )


def _job(h: Harness, name: str = "job", **kw):
    return h.store.create_job(spec(name, **kw), first_fire_at=h.now())


# -- schema ------------------------------------------------------------------------------
def test_migrate_is_idempotent(harness: Harness) -> None:
    v1 = harness.store.migrate()
    v2 = harness.store.migrate()
    assert v1 == v2 >= 1


# -- jobs ----------------------------------------------------------------------------------
def test_create_and_get_job_round_trips_the_spec(harness: Harness) -> None:
    s = JobSpec(
        name="rt ✓ \u202e 'x'; DROP TABLE jobs;--",
        task="t",
        schedule=every("90s"),
        args=(1, "two", None),
        kwargs={"k": [1, 2]},
    )
    job = harness.store.create_job(s, first_fire_at=harness.now())
    got = harness.store.get_job("default", s.name)
    assert got.id == job.id
    assert got.spec == s
    assert got.next_fire_at == harness.now()
    assert harness.store.get_job_by_id(job.id).name == s.name


def test_create_job_with_taken_name_conflicts_and_changes_nothing(harness: Harness) -> None:
    _job(harness, "dup")
    with pytest.raises(ConflictError):
        harness.store.create_job(spec("dup", task="other"), first_fire_at=harness.now())
    assert harness.store.get_job("default", "dup").spec.task == "t"
    # the same name in another namespace is a different job
    harness.store.create_job(spec("dup", namespace="team-b"), first_fire_at=harness.now())


def test_missing_job_raises_not_found(harness: Harness) -> None:
    with pytest.raises(JobNotFoundError):
        harness.store.get_job("default", "nope")
    with pytest.raises(JobNotFoundError):
        harness.store.get_job_by_id(987654)  # type: ignore[arg-type]
    with pytest.raises(JobNotFoundError):
        harness.store.delete_job("default", "nope")
    with pytest.raises(JobNotFoundError):
        harness.store.set_paused("default", "nope", True)


def test_upsert_same_spec_is_a_noop_and_changes_move_only_what_they_should(
    harness: Harness,
) -> None:
    now = harness.now()
    job, changed = harness.store.upsert_job(spec("u"), first_fire_at=now + S)
    assert changed
    again, changed = harness.store.upsert_job(spec("u"), first_fire_at=now + 5 * S)
    assert not changed
    assert again.next_fire_at == now + S and again.updated_at == job.updated_at
    # a policy change keeps the cursor
    pol, changed = harness.store.upsert_job(spec("u", max_attempts=7), first_fire_at=now + 5 * S)
    assert changed and pol.next_fire_at == now + S and pol.spec.policies.max_attempts == 7
    # a schedule change moves it
    sch, changed = harness.store.upsert_job(
        spec("u", schedule=every("5m")), first_fire_at=now + 9 * S
    )
    assert changed and sch.next_fire_at == now + 9 * S and sch.id == job.id


def test_list_jobs_filters_literally_and_pages(harness: Harness) -> None:
    for name in ["a%b", "axb", "a_c", "abc", "b"]:
        _job(harness, name)
    assert [j.name for j in harness.store.list_jobs(name_prefix="a%")] == ["a%b"]
    assert [j.name for j in harness.store.list_jobs(name_prefix="a_")] == ["a_c"]
    first = harness.store.list_jobs(limit=2)
    rest = harness.store.list_jobs(after_id=first[-1].id, limit=10)
    assert [j.name for j in first + rest] == ["a%b", "axb", "a_c", "abc", "b"]
    assert harness.store.list_jobs(namespace="other") == []


def test_due_jobs_is_a_bounded_ordered_range(harness: Harness) -> None:
    now = harness.now()
    for i, offset in enumerate([30, 10, 20, 500]):
        harness.store.create_job(spec(f"j{i}"), first_fire_at=now + offset * S)
    harness.store.create_job(spec("exhausted"), first_fire_at=None)
    harness.store.create_job(
        JobSpec(name="paused", task="t", schedule=every("1m"), paused=True), first_fire_at=now
    )
    due = harness.store.due_jobs(now + 60 * S, limit=10)
    assert [j.name for j in due] == ["j1", "j2", "j0"]
    assert [j.name for j in harness.store.due_jobs(now + 60 * S, limit=2)] == ["j1", "j2"]


def test_pause_resume_and_jobs_version(harness: Harness) -> None:
    v0 = harness.store.jobs_version()
    _job(harness, "p")
    v1 = harness.store.jobs_version()
    assert v1 != v0
    assert harness.store.set_paused("default", "p", True).paused
    assert harness.store.due_jobs(harness.now() + 60 * S, limit=10) == []
    v2 = harness.store.jobs_version()
    assert v2 != v1
    assert not harness.store.set_paused("default", "p", False).paused
    assert [j.name for j in harness.store.due_jobs(harness.now() + 60 * S, limit=10)] == ["p"]


def test_delete_job_removes_its_firings(harness: Harness) -> None:
    job = _job(harness, "gone")
    r = _fire(harness, job, job.next_fire_at)
    harness.store.delete_job("default", "gone")
    with pytest.raises(FiringNotFoundError):
        harness.store.get_firing(r.inserted[0])


# -- leases ----------------------------------------------------------------------------------
def test_lease_acquire_renew_expire_takeover(harness: Harness) -> None:
    a = harness.store.acquire_lease(DISPATCHER_LEASE, "a", 5 * S)
    assert a is not None and a.epoch >= 1
    assert harness.store.acquire_lease(DISPATCHER_LEASE, "b", 5 * S) is None
    harness.advance(3 * S)
    renewed = harness.store.acquire_lease(DISPATCHER_LEASE, "a", 5 * S)
    assert renewed is not None and renewed.epoch == a.epoch and renewed.expires_at > a.expires_at
    harness.advance(4 * S)
    assert harness.store.acquire_lease(DISPATCHER_LEASE, "b", 5 * S) is None  # still a's
    harness.advance(2 * S)
    b = harness.store.acquire_lease(DISPATCHER_LEASE, "b", 5 * S)
    assert b is not None and b.holder == "b" and b.epoch == a.epoch + 1
    assert harness.store.acquire_lease(DISPATCHER_LEASE, "a", 5 * S) is None
    current = harness.store.get_lease(DISPATCHER_LEASE)
    assert current is not None and current.holder == "b"


def test_a_holder_whose_lease_lapsed_gets_a_new_epoch(harness: Harness) -> None:
    a = _lease(harness, "a", 2 * S)
    harness.advance(3 * S)
    again = harness.store.acquire_lease(DISPATCHER_LEASE, "a", 2 * S)
    assert again is not None and again.epoch == a.epoch + 1


def test_released_lease_is_taken_over_at_once(harness: Harness) -> None:
    a = _lease(harness, "a")
    harness.store.release_lease(a)
    b = harness.store.acquire_lease(DISPATCHER_LEASE, "b", 5 * S)
    assert b is not None and b.epoch == a.epoch + 1


# -- fenced enqueue -------------------------------------------------------------------------
def test_enqueue_inserts_firings_and_moves_the_cursor_together(harness: Harness) -> None:
    job = _job(harness)
    t = job.next_fire_at
    r = _fire(harness, job, t)
    assert len(r.inserted) == 1 and r.duplicates == 0 and r.stale == []
    f = harness.store.get_firing(r.inserted[0])
    assert f.state is FiringState.QUEUED and f.scheduled_for == t and f.due_at == t
    assert f.attempt == 0 and f.enqueued_epoch is not None
    assert f.idempotency_key == f"{job.id}:{t.strftime('%Y-%m-%dT%H:%M:%SZ')}"
    moved = harness.store.get_job_by_id(job.id)
    assert moved.next_fire_at == t + timedelta(minutes=1) and moved.last_fired_at == t


def test_deposed_leader_cannot_enqueue(harness: Harness) -> None:
    job = _job(harness)
    old = _lease(harness, "old", 2 * S)
    harness.advance(3 * S)
    new = _lease(harness, "new", 10 * S)
    assert new.epoch > old.epoch
    with pytest.raises(LeaseLostError):
        _fire(harness, job, job.next_fire_at, lease=old)
    assert harness.store.list_firings(job_id=job.id) == []
    assert harness.store.get_job_by_id(job.id).next_fire_at == job.next_fire_at


def test_expired_lease_cannot_enqueue_even_without_a_successor(harness: Harness) -> None:
    job = _job(harness)
    lease = _lease(harness, "a", 2 * S)
    harness.advance(3 * S)
    with pytest.raises(LeaseLostError):
        _fire(harness, job, job.next_fire_at, lease=lease)
    assert harness.store.list_firings(job_id=job.id) == []


def test_cursor_compare_and_swap_rejects_a_stale_view(harness: Harness) -> None:
    job = _job(harness)
    lease = _lease(harness)
    _fire(harness, job, job.next_fire_at, lease=lease)
    again = _fire(harness, job, job.next_fire_at, lease=lease)  # old cursor value
    assert again.inserted == [] and again.stale == [job.id]
    assert len(harness.store.list_firings(job_id=job.id)) == 1


def test_unique_job_instant_absorbs_a_duplicate_enqueue(harness: Harness) -> None:
    job = _job(harness)
    lease = _lease(harness)
    t = job.next_fire_at
    _fire(harness, job, t, lease=lease)
    # someone moved the cursor back (e.g. an operator): the unique key still holds
    harness.store.upsert_job(spec("job", schedule=every("2m")), first_fire_at=t)
    rewound = harness.store.get_job_by_id(job.id)
    r = _fire(harness, rewound, t, lease=lease)
    assert r.inserted == [] and r.duplicates == 1
    assert len(harness.store.list_firings(job_id=job.id)) == 1


def test_missed_ranges_are_recorded(harness: Harness) -> None:
    job = _job(harness)
    t = job.next_fire_at
    lease = _lease(harness)
    harness.store.enqueue(
        lease,
        [
            JobAdvance(
                job_id=job.id,
                expected_next_fire_at=t,
                new_next_fire_at=t + 10 * S,
                firings=[PlannedFiring(scheduled_for=t + 5 * S)],
                missed=[MissedRange(first=t, last=t + 4 * S, count=5)],
            )
        ],
    )
    assert harness.store.get_job_by_id(job.id).missed_total == 5
    (event,) = harness.store.job_events(job.id)
    assert (event.kind, event.count, event.first_at, event.last_at) == ("missed", 5, t, t + 4 * S)


# -- claims -----------------------------------------------------------------------------------
def _queued(h: Harness, n: int = 1, task: str = "t", priority: float = 1.0, name: str = "q"):
    ids = []
    for i in range(n):
        job = h.store.create_job(
            spec(f"{name}{i}", task=task, priority=priority), first_fire_at=h.now()
        )
        ids += _fire(h, job, job.next_fire_at).inserted
    return ids


def test_claim_takes_due_firings_of_known_tasks_once(harness: Harness) -> None:
    ids = _queued(harness, 3)
    _queued(harness, 2, task="other", name="o")
    claims = harness.store.claim("w1", tasks=["t"], limit=10)
    assert sorted(c.firing.id for c in claims) == sorted(ids)
    assert all(c.firing.state is FiringState.RUNNING and c.firing.attempt == 1 for c in claims)
    assert len({c.claim_token for c in claims}) == 3
    assert all(c.lease_until == harness.now() + timedelta(seconds=30) for c in claims)
    assert harness.store.claim("w2", tasks=["t"], limit=10) == []


def test_claim_respects_limit_due_time_and_prefetch(harness: Harness) -> None:
    job = harness.store.create_job(spec("later"), first_fire_at=harness.now() + 2 * S)
    _fire(harness, job, job.next_fire_at)
    assert harness.store.claim("w", tasks=["t"], limit=5) == []
    assert len(harness.store.claim("w", tasks=["t"], limit=5, prefetch=3 * S)) == 1
    _queued(harness, 4)
    assert len(harness.store.claim("w", tasks=["t"], limit=3)) == 3


def test_claim_order_is_virtual_deadline(harness: Harness) -> None:
    low = _queued(harness, 1, priority=1.0, name="low")
    harness.advance(timedelta(milliseconds=500))
    high = _queued(harness, 1, priority=10.0, name="high")
    harness.advance(timedelta(milliseconds=10))
    claims = harness.store.claim("w", tasks=["t"], limit=1)
    assert claims[0].firing.id == high[0]  # due 0.5 s later but 0.9 s less deadline
    assert harness.store.claim("w", tasks=["t"], limit=1)[0].firing.id == low[0]


def test_concurrent_claimers_never_share_a_firing(harness: Harness) -> None:
    ids = set(_queued(harness, 60))
    stores = [harness.open_another() for _ in range(4)]
    got: list[list[FiringId]] = [[] for _ in stores]

    def run(i: int) -> None:
        while True:
            claims = stores[i].claim(f"w{i}", tasks=["t"], limit=3)
            if not claims:
                return
            got[i].extend(c.firing.id for c in claims)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    flat = [fid for g in got for fid in g]
    assert len(flat) == len(set(flat)) == len(ids)
    assert set(flat) == ids


# -- completion, retries, reaper ----------------------------------------------------------------
def _completion(
    h: Harness, claim, ok: bool = True, retry_in: timedelta | None = None, token=None
) -> Completion:
    """The outcome of ``claim``'s attempt, now (``token``: another claim token)."""
    now = h.now()
    return Completion(
        firing_id=claim.firing.id,
        claim_token=token or claim.claim_token,
        succeeded=ok,
        started_at=now,
        finished_at=now,
        error=None if ok else "boom",
        retry_at=None if retry_in is None else now + retry_in,
    )


def _complete(h: Harness, claim, ok: bool = True, retry_in: timedelta | None = None, token=None):
    return h.store.complete([_completion(h, claim, ok, retry_in, token)])[0]


def _done(h: Harness, claim, token=None) -> Completion:
    now = h.now()
    return Completion(
        firing_id=claim.firing.id,
        claim_token=token or claim.claim_token,
        succeeded=True,
        started_at=now,
        finished_at=now,
    )


def test_complete_and_claim_records_the_outcomes_then_claims(harness: Harness) -> None:
    first = _queued(harness, 2)
    held = harness.store.claim("w", tasks=["t"], limit=2)
    assert sorted(c.firing.id for c in held) == sorted(first)
    more = _queued(harness, 3, name="m")
    # one outcome accepted, one refused (a stale token), then up to 2 claimed
    accepted, claims = harness.store.complete_and_claim(
        [_done(harness, held[0]), _done(harness, held[1], token="stale")],
        "w",
        tasks=["t"],
        limit=2,
    )
    assert accepted == [True, False]
    assert len(claims) == 2 and {c.firing.id for c in claims} <= set(more)
    assert all(c.firing.state is FiringState.RUNNING for c in claims)
    assert harness.store.get_firing(held[0].firing.id).state is FiringState.SUCCEEDED
    assert harness.store.get_firing(held[1].firing.id).state is FiringState.RUNNING
    # nothing to claim for these tasks: the outcomes are still recorded
    accepted, claims = harness.store.complete_and_claim(
        [_done(harness, held[1])], "w", tasks=["nosuchtask"], limit=5
    )
    assert (accepted, claims) == ([True], [])
    assert harness.store.get_firing(held[1].firing.id).state is FiringState.SUCCEEDED


def test_complete_and_claim_frees_a_capped_jobs_slot_for_the_same_claim(
    harness: Harness,
) -> None:
    job = _capped_job(harness, "cap", "buffer_all")
    t = job.next_fire_at
    ids = _enqueue_instants(harness, job, [t, t + S])
    harness.advance(2 * S)
    (running,) = harness.store.claim("w", tasks=["t"], limit=5)
    assert running.firing.id == ids[0]
    assert harness.store.claim("w", tasks=["t"], limit=5) == []  # at its cap: buffered
    accepted, claims = harness.store.complete_and_claim(
        [_done(harness, running)], "w", tasks=["t"], limit=5
    )
    assert accepted == [True]
    assert [c.firing.id for c in claims] == [ids[1]]


def test_completion_is_a_compare_and_swap_on_the_claim_token(harness: Harness) -> None:
    _queued(harness)
    (claim,) = harness.store.claim("w", tasks=["t"], limit=1)
    assert not _complete(harness, claim, token="forged")
    assert _complete(harness, claim)
    assert not _complete(harness, claim)  # twice: rejected
    f = harness.store.get_firing(claim.firing.id)
    assert f.state is FiringState.SUCCEEDED and f.finished_at is not None


def test_failure_retries_after_backoff_then_goes_dead(harness: Harness) -> None:
    job = harness.store.create_job(spec("r", max_attempts=2), first_fire_at=harness.now())
    (fid,) = _fire(harness, job, job.next_fire_at).inserted
    (c1,) = harness.store.claim("w", tasks=["t"], limit=1)
    assert _complete(harness, c1, ok=False, retry_in=10 * S)
    f = harness.store.get_firing(fid)
    assert (
        f.state is FiringState.QUEUED and f.due_at == harness.now() + 10 * S and f.error == "boom"
    )
    assert harness.store.claim("w", tasks=["t"], limit=1) == []
    harness.advance(10 * S)
    (c2,) = harness.store.claim("w", tasks=["t"], limit=1)
    assert c2.firing.attempt == 2 and c2.claim_token != c1.claim_token
    assert _complete(harness, c2, ok=False, retry_in=10 * S)  # attempts exhausted
    assert harness.store.get_firing(fid).state is FiringState.DEAD


def test_expired_claims_are_requeued_and_the_zombie_is_rejected(harness: Harness) -> None:
    (fid,) = _queued(harness)
    (zombie,) = harness.store.claim("w-old", tasks=["t"], limit=1)
    harness.advance(20 * S)
    assert harness.store.heartbeat("w-old", [(fid, zombie.claim_token)]) == set()  # renewed
    harness.advance(31 * S)
    assert harness.store.requeue_expired() == 1
    f = harness.store.get_firing(fid)
    assert f.state is FiringState.QUEUED and f.attempt == 1
    (fresh,) = harness.store.claim("w-new", tasks=["t"], limit=1)
    assert fresh.firing.attempt == 2
    assert fresh.firing.idempotency_key == zombie.firing.idempotency_key
    assert harness.store.heartbeat("w-old", [(fid, zombie.claim_token)]) == {fid}
    assert not _complete(harness, zombie)
    assert _complete(harness, fresh)
    assert harness.store.get_firing(fid).state is FiringState.SUCCEEDED


def test_reaper_sends_exhausted_attempts_to_dead(harness: Harness) -> None:
    job = harness.store.create_job(spec("x", max_attempts=1), first_fire_at=harness.now())
    (fid,) = _fire(harness, job, job.next_fire_at).inserted
    harness.store.claim("w", tasks=["t"], limit=1)
    harness.advance(31 * S)
    assert harness.store.requeue_expired() == 1
    assert harness.store.get_firing(fid).state is FiringState.DEAD


# -- cancel, redrive -------------------------------------------------------------------------
def test_cancel_in_each_state(harness: Harness) -> None:
    ids = _queued(harness, 2)
    claims = harness.store.claim("w", tasks=["t"], limit=1)
    running = claims[0].firing.id
    (queued,) = [i for i in ids if i != running]
    r = harness.store.cancel_firing(queued)
    assert (r.outcome, r.firing.state) == ("cancelled", FiringState.CANCELLED)
    r = harness.store.cancel_firing(running)
    assert (r.outcome, r.firing.state) == ("cancel_requested", FiringState.RUNNING)
    assert harness.store.cancel_requested([(running, claims[0].claim_token)]) == {running}
    assert harness.store.cancel_firing(queued).outcome == "already_final"
    with pytest.raises(FiringNotFoundError):
        harness.store.cancel_firing(FiringId(10**9))


def test_redrive_only_dead_firings(harness: Harness) -> None:
    job = harness.store.create_job(spec("d", max_attempts=1), first_fire_at=harness.now())
    (fid,) = _fire(harness, job, job.next_fire_at).inserted
    with pytest.raises(InvalidTransitionError):
        harness.store.redrive_firing(fid)
    (c,) = harness.store.claim("w", tasks=["t"], limit=1)
    _complete(harness, c, ok=False)
    assert harness.store.get_firing(fid).state is FiringState.DEAD
    f = harness.store.redrive_firing(fid)
    assert f.state is FiringState.QUEUED and f.max_attempts == 2
    (c2,) = harness.store.claim("w", tasks=["t"], limit=1)
    assert c2.firing.attempt == 2 and _complete(harness, c2)


def test_enqueue_now_creates_a_due_firing(harness: Harness) -> None:
    f = harness.store.enqueue_now(
        JobSpec(name="adhoc-1", task="t", schedule=every("1h"), args=(7,))
    )
    assert f.state is FiringState.QUEUED and f.args == (7,) and f.scheduled_for == harness.now()
    (c,) = harness.store.claim("w", tasks=["t"], limit=5)
    assert c.firing.id == f.id


# -- nodes and status -----------------------------------------------------------------------------
def test_nodes_and_status(harness: Harness) -> None:
    from cronwheel.domain.models import NodeInfo

    now = harness.now()
    harness.store.register_node(
        NodeInfo(
            id="n1",
            kind="worker",
            hostname="h",
            pid=1,
            started_at=now,
            heartbeat_at=now,
            wake_addr="udp://127.0.0.1:9",
        )
    )
    harness.store.register_node(
        NodeInfo(id="n2", kind="scheduler", hostname="h", pid=2, started_at=now, heartbeat_at=now)
    )
    harness.advance(20 * S)
    harness.store.heartbeat_node("n2")
    assert [n.id for n in harness.store.list_nodes(alive_within=10 * S)] == ["n2"]
    assert {n.id for n in harness.store.list_nodes()} == {"n1", "n2"}
    harness.store.remove_node("n1")
    _queued(harness, 2)
    (c,) = harness.store.claim("w", tasks=["t"], limit=1)
    _complete(harness, c)
    lease = _lease(harness)
    st = harness.store.status()
    assert st.counts["queued"] == 1 and st.counts.get("succeeded") == 1
    assert st.lease is not None and st.lease.holder == "leader-a" and st.lease.epoch == lease.epoch
    assert st.jobs == 2 and len(st.lateness_ms) == 1


def test_bulk_create_is_all_or_nothing(harness: Harness) -> None:
    now = harness.now()
    n = harness.store.create_jobs([(spec(f"bulk-{i}"), now + i * S) for i in range(50)])
    assert n == 50
    assert [j.name for j in harness.store.due_jobs(now + 2 * S, limit=10)] == [
        "bulk-0",
        "bulk-1",
        "bulk-2",
    ]
    with pytest.raises(ConflictError):
        harness.store.create_jobs([(spec("fresh"), now), (spec("bulk-3"), now)])
    with pytest.raises(JobNotFoundError):
        harness.store.get_job("default", "fresh")


def test_bulk_create_stores_what_a_single_create_stores(harness: Harness) -> None:
    """The bulk path (COPY on PostgreSQL) keeps every declared field as create_job does."""
    from dataclasses import replace

    from cronwheel.domain.models import JobPolicies
    from cronwheel.domain.overlap import OverlapPolicy
    from cronwheel.domain.schedules import cron

    now = harness.now()
    full = JobSpec(
        name="one",
        task="t.x",
        schedule=cron("0 9 * * *", tz="Europe/Berlin"),
        args=("é\u2028", 1e300, {"z": [None, -0.0]}),
        kwargs={"ü": "\U0001f600"},
        namespace="team-a",
        policies=JobPolicies(
            priority=3,
            overlap=OverlapPolicy.BUFFER_ALL,
            max_concurrency=2,
            timeout=timedelta(seconds=3),
            start_deadline=timedelta(seconds=9),
        ),
        paused=True,
        start_at=now - 60 * S,
        end_at=now + 86400 * S,
        max_runs=5,
    )
    single = harness.store.create_job(full, first_fire_at=now + S)
    assert harness.store.create_jobs([(replace(full, name="bulk"), now + S)]) == 1
    bulk = harness.store.get_job("team-a", "bulk")
    assert bulk.spec == replace(single.spec, name="bulk")
    assert bulk.spec.spec_hash() == replace(full, name="bulk").spec_hash()
    assert (bulk.next_fire_at, bulk.paused, bulk.remaining_runs, bulk.created_at) == (
        single.next_fire_at,
        single.paused,
        single.remaining_runs,
        single.created_at,
    )
    assert bulk.created_at == bulk.updated_at == now


# -- policies applied by the store ------------------------------------------------------------
def _capped_job(h: Harness, name: str, overlap: str, **kw):
    from cronwheel.domain.overlap import OverlapPolicy

    return h.store.create_job(
        spec(name, overlap=OverlapPolicy(overlap), visibility_timeout=3600 * S, **kw),
        first_fire_at=h.now(),
    )


def _enqueue_instants(h: Harness, job, instants):
    lease = _lease(h)
    return h.store.enqueue(
        lease,
        [
            JobAdvance(
                job_id=job.id,
                expected_next_fire_at=job.next_fire_at,
                new_next_fire_at=instants[-1] + timedelta(hours=1),
                firings=[PlannedFiring(scheduled_for=t) for t in instants],
            )
        ],
    ).inserted


@pytest.mark.parametrize(
    ("overlap", "expected"),
    [
        ("skip", ["running", "skipped", "skipped"]),
        ("buffer_one", ["running", "queued", "skipped"]),
        ("buffer_all", ["running", "queued", "queued"]),
        ("allow", ["running", "running", "running"]),
    ],
)
def test_claim_applies_the_overlap_policy_of_a_capped_job(harness: Harness, overlap, expected):
    job = _capped_job(harness, f"cap-{overlap}", overlap)
    t = job.next_fire_at
    ids = _enqueue_instants(harness, job, [t, t + S, t + 2 * S])
    harness.advance(3 * S)
    first = harness.store.claim("w1", tasks=["t"], limit=1)
    assert [c.firing.id for c in first] == [ids[0]]
    harness.store.claim("w2", tasks=["t"], limit=10)
    got = [harness.store.get_firing(i).state.value for i in ids]
    assert got == expected
    if overlap == "skip":
        assert "concurrency cap" in (harness.store.get_firing(ids[1]).reason or "")


def test_terminate_other_revokes_running_and_claims_the_newest(harness: Harness) -> None:
    job = _capped_job(harness, "term", "terminate_other")
    t = job.next_fire_at
    (a,) = _enqueue_instants(harness, job, [t])
    (old,) = harness.store.claim("w1", tasks=["t"], limit=1)
    job = harness.store.get_job_by_id(job.id)
    (b,) = _enqueue_instants(harness, job, [job.next_fire_at])
    harness.advance(timedelta(hours=1, seconds=1))
    (new,) = harness.store.claim("w2", tasks=["t"], limit=5)
    assert new.firing.id == b
    assert harness.store.get_firing(a).state is FiringState.CANCELLED
    assert not _complete(harness, old)


def test_cancel_other_requests_cancel_and_waits(harness: Harness) -> None:
    job = _capped_job(harness, "co", "cancel_other")
    t = job.next_fire_at
    (a,) = _enqueue_instants(harness, job, [t])
    (old,) = harness.store.claim("w1", tasks=["t"], limit=1)
    job = harness.store.get_job_by_id(job.id)
    (b,) = _enqueue_instants(harness, job, [job.next_fire_at])
    harness.advance(timedelta(hours=1, seconds=1))
    assert harness.store.claim("w2", tasks=["t"], limit=5) == []
    assert harness.store.cancel_requested([(a, old.claim_token)]) == {a}
    now = harness.now()
    assert harness.store.complete(
        [
            Completion(
                firing_id=a,
                claim_token=old.claim_token,
                succeeded=False,
                cancelled=True,
                started_at=now,
                finished_at=now,
            )
        ]
    ) == [True]
    assert harness.store.get_firing(a).state is FiringState.CANCELLED
    (new,) = harness.store.claim("w2", tasks=["t"], limit=5)
    assert new.firing.id == b


def test_capped_firings_are_not_prefetched_while_the_job_is_at_its_cap(harness: Harness) -> None:
    job = _capped_job(harness, "pf", "skip")
    t = job.next_fire_at
    _enqueue_instants(harness, job, [t])
    harness.store.claim("w1", tasks=["t"], limit=1)
    job = harness.store.get_job_by_id(job.id)
    (b,) = _enqueue_instants(harness, job, [harness.now() + 2 * S])
    assert harness.store.claim("w2", tasks=["t"], limit=5, prefetch=5 * S) == []
    assert harness.store.get_firing(b).state is FiringState.QUEUED  # decided at its instant
    assert harness.store.next_due_at() == harness.now() + 2 * S


def test_reaper_applies_cancel_grace_and_start_deadline(harness: Harness) -> None:
    job = harness.store.create_job(
        spec("g", cancel_grace=5 * S, start_deadline=10 * S, visibility_timeout=3600 * S),
        first_fire_at=harness.now(),
    )
    t = job.next_fire_at
    a, b = _enqueue_instants(harness, job, [t, t + S])
    (claim,) = harness.store.claim("w", tasks=["t"], limit=1)
    assert harness.store.cancel_firing(a).outcome == "cancel_requested"
    harness.advance(4 * S)
    harness.store.requeue_expired()
    assert harness.store.get_firing(a).state is FiringState.RUNNING
    harness.advance(2 * S)
    harness.store.requeue_expired()
    assert harness.store.get_firing(a).state is FiringState.CANCELLED
    assert not _complete(harness, claim)
    harness.advance(10 * S)
    harness.store.requeue_expired()
    assert harness.store.get_firing(b).state is FiringState.MISSED


def test_run_limit_ends_the_job(harness: Harness) -> None:
    s = JobSpec(name="twice", task="t", schedule=every("1m"), max_runs=2)
    job = harness.store.create_job(s, first_fire_at=harness.now())
    assert job.remaining_runs == 2
    t = job.next_fire_at
    _enqueue_instants(harness, job, [t])
    job = harness.store.get_job_by_id(job.id)
    assert job.remaining_runs == 1 and job.next_fire_at is not None
    _enqueue_instants(harness, job, [job.next_fire_at])
    job = harness.store.get_job_by_id(job.id)
    assert job.remaining_runs == 0 and job.next_fire_at is None
    assert job.spec.max_runs == 2


def test_jittered_firing_is_due_later_than_scheduled(harness: Harness) -> None:
    job = _job(harness, "j")
    t = job.next_fire_at
    r = harness.store.enqueue(
        _lease(harness),
        [
            JobAdvance(
                job_id=job.id,
                expected_next_fire_at=t,
                new_next_fire_at=t + S,
                firings=[PlannedFiring(scheduled_for=t, due_at=t + 3 * S)],
            )
        ],
    )
    f = harness.store.get_firing(r.inserted[0])
    assert (f.scheduled_for, f.due_at) == (t, t + 3 * S)
    assert harness.store.claim("w", tasks=["t"], limit=1) == []
    harness.advance(3 * S)
    assert len(harness.store.claim("w", tasks=["t"], limit=1)) == 1


def test_fair_clock_orders_a_quiet_namespace_before_a_flood_tail(harness: Harness) -> None:
    flood = [spec(f"f{i}", namespace="flood") for i in range(200)]
    harness.store.create_jobs([(s, None) for s in flood])
    for s in flood:
        harness.store.enqueue_now(
            JobSpec(name=f"x-{s.name}", task="t", schedule=every("1m"), namespace="flood")
        )
    quiet = harness.store.enqueue_now(
        JobSpec(name="q", task="t", schedule=every("1m"), namespace="quiet")
    )
    claims = harness.store.claim("w", tasks=["t"], limit=5)
    assert quiet.id in [c.firing.id for c in claims]


def test_bounds_round_trip(harness: Harness) -> None:
    start = harness.now() + 60 * S
    s = JobSpec(
        name="b",
        task="t",
        schedule=every("1m"),
        start_at=start,
        end_at=start + 3600 * S,
        max_runs=5,
    )
    harness.store.create_job(s, first_fire_at=start)
    got = harness.store.get_job("default", "b")
    assert got.spec == s


def test_a_deep_buffer_does_not_starve_other_jobs(harness: Harness) -> None:
    """Buffered firings of capped jobs at their cap must not fill the claim scan window:
    successive claims keep reaching other due work (here 3 x 40 buffered firings, far
    more than one scan window)."""
    from cronwheel.domain.schedules import now

    capped = [_capped_job(harness, f"deep-{i}", "buffer_all") for i in range(3)]
    for job in capped:
        t = job.next_fire_at
        _enqueue_instants(harness, job, [t + k * timedelta(milliseconds=1) for k in range(40)])
    harness.advance(S)
    one_shot = harness.store.enqueue_now(JobSpec(name="urgent", task="t", schedule=now()))
    got: list[int] = []
    for _ in range(4):
        got += [c.firing.job_id for c in harness.store.claim("w", tasks=["t"], limit=10)]
    assert sorted(got) == sorted([*(j.id for j in capped), one_shot.job_id])
    running = harness.store.list_firings(states=[FiringState.RUNNING], limit=100)
    assert len(running) == 4
