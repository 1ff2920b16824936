"""History retention, on every store (memory, SQLite, PostgreSQL).

The promises under test (domain/retention.py): a namespace without a policy keeps
finished firings 7 days and the last one per outcome per job; ``set_retention``
changes what it is given and names a bad value; pruning deletes what neither half
keeps, never a firing that is not terminal, sums what it removed into the job's
``pruned`` event, takes a finished one-shot job with its firing, and a dry run
deletes nothing and counts the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from cronwheel.domain.firing import FiringState
from cronwheel.domain.retention import DEFAULT_RETENTION, Retention, pruned_counts
from cronwheel.domain.schedules import at, now
from cronwheel.errors import ValidationError
from tests.contract.conftest import STORE_KINDS, Harness, spec
from tests.contract.test_store_contract import _complete, _fire, _job

DAY = timedelta(days=1)
S = timedelta(seconds=1)


def _history(h: Harness, job, n: int, *, fail_every: int = 0) -> list:
    """``n + 2`` firings of ``job`` a minute apart in the last hours, ``n`` claimed and
    finished (every ``fail_every``-th DEAD: one attempt), one left QUEUED and one held."""
    t0 = h.now() - timedelta(minutes=n + 2)
    instants = [t0 + i * timedelta(minutes=1) for i in range(n + 2)]
    _fire(h, job, *instants)
    for i in range(n):
        (claim,) = h.store.claim("w", tasks=["t"], limit=1)
        dead = fail_every and (i + 1) % fail_every == 0
        _complete(h, claim, ok=not dead)
    (_held,) = h.store.claim("w", tasks=["t"], limit=1)
    return instants


def _states(h: Harness, job) -> list[FiringState]:
    return [f.state for f in h.store.list_job_firings(job.id, limit=1000)]


def test_the_default_policy_until_set_and_set_names_a_bad_value(harness: Harness) -> None:
    store = harness.store
    assert store.get_retention("ns") == DEFAULT_RETENTION
    assert Retention(keep_for=7 * DAY, keep_last=1) == DEFAULT_RETENTION
    assert store.set_retention("ns", {"keep_for": 3600}) == Retention(
        keep_for=timedelta(hours=1), keep_last=1
    )
    assert store.set_retention("ns", {"keep_last": 5}).keep_for == timedelta(hours=1)
    assert store.list_retention() == {"ns": Retention(keep_for=timedelta(hours=1), keep_last=5)}
    for changes, field in (
        ({"keep_for": -1}, "keep_for"),
        ({"keep_last": 1001}, "keep_last"),
        ({"keep_last": "many"}, "keep_last"),
        ({"keep": 1}, "keep"),
    ):
        with pytest.raises(ValidationError) as err:
            store.set_retention("ns", changes)
        assert err.value.field == field
    assert store.get_retention("ns").keep_last == 5  # unchanged
    store.reset_retention("ns")
    assert store.get_retention("ns") == DEFAULT_RETENTION
    assert store.get_retention("other") == DEFAULT_RETENTION


def test_pruning_keeps_the_young_the_last_per_outcome_and_everything_unfinished(
    harness: Harness,
) -> None:
    store = harness.store
    job = _job(harness, max_concurrency=100, max_attempts=1)
    _history(harness, job, 10, fail_every=4)  # 8 succeeded, 2 dead, 1 queued, 1 running
    assert store.prune_history().deleted == 0  # all younger than 7 days
    harness.advance(8 * DAY)
    dry = store.prune_history(dry_run=True)
    assert (dry.firings, dry.jobs, dry.done) == ({"succeeded": 7, "dead": 1}, 0, True)
    assert len(_states(harness, job)) == 12  # a dry run deletes nothing
    report = store.prune_history()
    assert report.firings == {"succeeded": 7, "dead": 1} and report.done
    left = sorted(_states(harness, job))
    assert left == sorted(
        [FiringState.SUCCEEDED, FiringState.DEAD, FiringState.QUEUED, FiringState.CLAIMED]
    ) or left == sorted(
        [FiringState.SUCCEEDED, FiringState.DEAD, FiringState.QUEUED, FiringState.RUNNING]
    )
    (event,) = [e for e in store.job_events(job.id) if e.kind == "pruned"]
    assert event.count == 8 and pruned_counts(event.detail) == {"succeeded": 7, "dead": 1}
    assert store.prune_history().deleted == 0  # nothing more goes
    harness.advance(365 * DAY)
    assert store.prune_history().deleted == 0  # the last of each outcome and the unfinished stay
    assert len(_states(harness, job)) == 4


def test_a_namespace_policy_and_a_job_override(harness: Harness) -> None:
    store = harness.store
    store.set_retention("default", {"keep_for": 3600, "keep_last": 0})
    plain = _job(harness, "plain", max_concurrency=100)
    kept = harness.store.create_job(
        spec("kept", keep_for=timedelta(days=30), keep_last=3), first_fire_at=harness.now()
    )
    _history(harness, plain, 3)
    for f in store.list_job_firings(plain.id, limit=10):
        if f.state is FiringState.QUEUED:
            store.cancel_firing(f.id)  # finished now: cancelled
    instants = [harness.now() + i * timedelta(minutes=1) for i in range(5)]
    store.skip_occurrences("default", "kept", instants, "test")
    harness.advance(2 * DAY)
    report = store.prune_history()
    # plain: keep_last 0, an hour: its 3 succeeded and the cancelled one go; kept: 5 skipped
    # younger than its 30 days stay
    assert report.firings == {"succeeded": 3, "cancelled": 1}
    assert len(_states(harness, kept)) == 5
    harness.advance(40 * DAY)
    assert store.prune_history().firings == {"skipped": 2}  # its last 3 stay
    assert _states(harness, kept) == [FiringState.SKIPPED] * 3


def test_a_finished_one_shot_job_goes_with_its_firing(harness: Harness) -> None:
    store = harness.store
    firing = store.enqueue_now(spec("once", schedule=now()))
    later = store.create_job(
        spec("later", schedule=at(harness.now() + timedelta(hours=1))), first_fire_at=None
    )
    waiting = store.enqueue_now(spec("waiting", schedule=now()))
    (claim,) = [c for c in store.claim("w", tasks=["t"], limit=5) if c.firing.id == firing.id] or [
        None
    ]
    assert claim is not None
    _complete(harness, claim)
    harness.advance(8 * DAY)
    report = store.prune_history()
    assert (report.jobs, report.firings) == (1, {"succeeded": 1})
    names = {j.name for j in store.list_jobs()}
    assert "once" not in names and {"later", "waiting"} <= names  # unfinished ones stay
    assert store.get_firing(waiting.id).state in (FiringState.CLAIMED, FiringState.RUNNING)
    assert later.id  # a one-shot without a firing yet is not history


def test_pruned_one_shot_jobs_give_their_jobs_quota_back(harness: Harness) -> None:
    """Pruning takes finished `at` jobs with their firings (one statement per batch) and
    gives their place in the namespace's ``jobs`` quota back; a `now` job never held one."""
    store = harness.store
    when = harness.now()
    jobs = [
        store.create_job(spec(f"at-{i}", schedule=at(when)), first_fire_at=when) for i in range(3)
    ]
    store.enqueue_now(spec("now-1", schedule=now()))
    kept = store.create_job(spec("at-kept", schedule=at(when)), first_fire_at=when)
    for job in [*jobs, kept]:
        _fire(harness, job, when)
    (use,) = store.quota_usage("default")
    assert use.used.get("jobs") == 4
    claims = store.claim("w", tasks=["t"], limit=10)
    assert len(claims) == 5
    for claim in claims:
        if claim.firing.job_id != kept.id:
            _complete(harness, claim)
    harness.advance(8 * DAY)
    report = store.prune_history()
    assert report.jobs == 4 and report.firings == {"succeeded": 4}
    (use,) = store.quota_usage("default")
    assert use.used.get("jobs") == 1  # the one whose firing is not finished
    assert {j.name for j in store.list_jobs()} == {"at-kept"}


def test_a_pass_in_batches_continues_from_its_cursor(harness: Harness) -> None:
    store = harness.store
    store.set_retention("default", {"keep_for": 0, "keep_last": 0})
    job = _job(harness, max_concurrency=100)
    _history(harness, job, 7)
    harness.advance(S)
    first = store.prune_history(batch=3, max_batches=1)
    assert (first.deleted, first.done) == (3, False) and first.cursor is not None
    rest = store.prune_history(batch=3, max_batches=1, cursor=first.cursor)
    rest2 = store.prune_history(batch=3, max_batches=1, cursor=rest.cursor)
    assert rest.deleted + rest2.deleted == 4 and rest2.done
    assert sorted(_states(harness, job)) in (
        sorted([FiringState.QUEUED, FiringState.CLAIMED]),
        sorted([FiringState.QUEUED, FiringState.RUNNING]),
    )


def test_sqlite_pruning_returns_the_space_to_the_file(tmp_path) -> None:
    from cronwheel.domain.clock import FakeClock
    from cronwheel.store.sqlite import SqliteStore
    from tests.contract.conftest import T0

    clock = FakeClock(T0)
    store = SqliteStore(str(tmp_path / "v.db"), clock=clock)
    store.migrate()
    try:
        store.create_jobs([(spec(f"j{i}"), None) for i in range(10)])
        first = store.get_job("default", "j0").id
        store.load_history(
            first_job=first, jobs=10, start=T0 - 2 * DAY, step=timedelta(seconds=2), count=40_000
        )
        full = store.database_size()
        clock.advance(10 * DAY)
        # the last of each outcome of each job stays: 10 successes, one job's last DEAD
        assert store.prune_history().deleted == 40_000 - 11
        assert store.database_size() < full / 4  # the freed pages left the file
    finally:
        store.close()


@pytest.fixture(params=sorted(set(STORE_KINDS) - {"memory"}))
def sql_harness(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Harness]:
    """The SQL stores: the memory store's walk reads everything (a dictionary)."""
    yield from STORE_KINDS[request.param](tmp_path)


def test_a_pass_reads_no_firing_that_every_policy_in_use_keeps(sql_harness: Harness) -> None:
    """The walk stops at the shortest keep_for of the namespaces that have jobs: where
    the one namespace keeps 30 days, a pass 8 days on (the default's 7 passed) reads
    nothing; once a namespace on the default has a job, its firings are read and go,
    and the 30 days' stay."""
    harness = sql_harness
    store = harness.store
    store.set_retention("default", {"keep_for": 30 * 86400, "keep_last": 0})
    kept = _job(harness, "kept", max_concurrency=100)
    _history(harness, kept, 3)
    harness.advance(8 * DAY)
    report = store.prune_history()
    assert (report.scanned, report.deleted) == (0, 0)
    other = harness.store.create_job(
        spec("other", namespace="elsewhere", schedule=at(harness.now() - S)),
        first_fire_at=harness.now(),
    )
    assert other.namespace == "elsewhere"
    harness.advance(8 * DAY)
    report = store.prune_history()
    assert report.scanned > 0
    assert len(_states(harness, kept)) == 5  # 3 finished, 1 queued, 1 held: 16 days < 30


def test_the_soak_history_s_one_shot_chunks_are_a_job_per_firing(sql_harness: Harness) -> None:
    """load_history(one_shots=True), the soak's `app.enqueue` history: every firing of the
    chunk is moved to a `now` job of its own (each named by its firing), and nothing
    loaded before it moves."""
    store = sql_harness.store
    store.create_jobs([(spec(f"r{i}"), None) for i in range(3)])
    first = store.get_job("default", "r0").id
    start = sql_harness.now() - 2 * DAY
    store.load_history(first_job=first, jobs=3, start=start, step=S, count=6)
    store.load_history(
        first_job=first, jobs=3, start=start + 6 * S, step=S, count=9, one_shots=True
    )
    firings = sorted(store.list_firings(limit=100), key=lambda f: f.id)
    assert len(firings) == 15
    for f in firings[:6]:
        assert f.job_name in {"r0", "r1", "r2"}
    for f in firings[6:]:
        assert f.job_name == f"once-{f.id}"
        assert store.get_job_by_id(f.job_id).spec.schedule.kind == "now"
    assert len({f.job_id for f in firings[6:]}) == 9
