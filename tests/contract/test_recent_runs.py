"""``recent_runs`` on every store: what the jobs page, ``/metrics`` and ``cronwheel
status`` read of each job's recent history (its newest firings by scheduled instant),
exactly what reading its firings gave (``list_job_firings`` sorted by instant, then
``first_attempt_lateness_s`` of each, and the newest one not open): with retried
firings (attempt > 1, no sample), cancelled and dead ones, skipped ones, open ones,
jobs without firings, more firings than ``sample``, other jobs' firings interleaved
with a job's ids, and firings added out of the order of their instants."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import Firing, FiringId, Job, JobId, RecentRuns
from cronwheel.observability.lateness import STARTED_STATES, first_attempt_lateness_s
from tests.contract.conftest import Harness, spec
from tests.contract.test_store_contract import _complete

MS = timedelta(milliseconds=1)
S = timedelta(seconds=1)
OPEN = (FiringState.QUEUED, FiringState.CLAIMED, FiringState.RUNNING)


def _newest(h: Harness, job_id: JobId, sample: int, **filters: Any) -> list[Firing]:
    """The job's ``sample`` newest firings by scheduled instant, read whole."""
    every = h.store.list_job_firings(job_id, limit=100_000, **filters)
    return sorted(every, key=lambda f: f.scheduled_for, reverse=True)[:sample]


def _expected(h: Harness, job_id: JobId, sample: int) -> RecentRuns:
    """The old computation: the firings read whole."""
    recent = _newest(h, job_id, sample)
    last = next((f for f in recent if f.state not in OPEN), None)
    ran = _newest(h, job_id, sample, states=STARTED_STATES)
    late = tuple(x for x in map(first_attempt_lateness_s, ran) if x is not None)
    return RecentRuns(
        job_id=job_id,
        lateness_s=late,
        last_id=None if last is None else last.id,
        last_state=None if last is None else last.state,
    )


def _history(h: Harness, rounds: int) -> tuple[Job, Job, Job]:
    """Jobs ``a`` (two attempts) and ``b`` (one), firings added alternately (ids
    interleaved), then run: every fifth fails (``a`` retries it, ``b``'s dies),
    every seventh is cancelled while queued, every eleventh skipped; each start a
    different number of milliseconds late; the newest few of each are left open."""
    t = h.now()
    a = h.store.create_job(spec("a", max_attempts=2, overlap="allow"), first_fire_at=None)
    b = h.store.create_job(spec("b", max_attempts=1, overlap="allow"), first_fire_at=None)
    idle = h.store.create_job(spec("idle"), first_fire_at=None)  # never fired
    instants: dict[int, list[tuple[int, object]]] = {a.id: [], b.id: []}
    for k in range(rounds):
        for job in (a, b):
            # the newest three of each are not due yet: they stay queued
            at = t + (timedelta(hours=1) if k >= rounds - 3 else -timedelta(hours=1)) + k * S
            added = h.store.add_firings("default", job.name, [at], note="test").inserted
            instants[job.id].append((added[0].id, at))
    for job in (a, b):
        for fid, at in instants[job.id]:
            if fid % 7 == 0:
                h.store.cancel_firing(FiringId(fid))
            elif fid % 11 == 0:
                h.store.skip_occurrences("default", job.name, [at], "test")  # type: ignore[list-item]
    for n in range(4 * rounds):
        h.advance((n % 13) * MS)
        claimed = h.store.claim("w", tasks=["t"], limit=1)
        if not claimed:
            break
        (claim,) = claimed
        if claim.firing.id % 5 == 0:
            assert _complete(h, claim, ok=False, retry_in=timedelta(0))
        else:
            assert _complete(h, claim)
    # and a held one, the newest of ``a``: claimed, not finished
    h.store.add_firings("default", "a", [t - timedelta(minutes=30)], note="test")
    assert h.store.claim("w", tasks=["t"], limit=1)
    return a, b, idle


def test_recent_runs_is_what_reading_the_firings_gave(harness: Harness) -> None:
    a, b, idle = _history(harness, rounds=60)
    states = {f.state for f in harness.store.list_job_firings(a.id, limit=1000)}
    assert {FiringState.SUCCEEDED, FiringState.CANCELLED, FiringState.QUEUED} <= states
    assert FiringState.DEAD in {f.state for f in harness.store.list_job_firings(b.id, limit=1000)}
    retried = [f for f in harness.store.list_job_firings(a.id, limit=1000) if f.attempt > 1]
    assert retried  # their lateness is no sample
    unknown = JobId(10**9)
    ids = [a.id, b.id, idle.id, unknown]
    for sample in (0, 1, 2, 5, 30, 100, 1000):
        got = harness.store.recent_runs(ids, sample=sample)
        assert set(got) == set(ids)
        for job_id in ids:
            assert got[job_id] == _expected(harness, job_id, sample), (job_id, sample)
    assert harness.store.recent_runs(ids) == harness.store.recent_runs(ids, sample=100)
    assert harness.store.recent_runs([]) == {}
    assert harness.store.recent_runs([idle.id]) == {idle.id: RecentRuns(job_id=idle.id)}


def test_more_firings_than_the_sample_only_the_newest_count(harness: Harness) -> None:
    a, b, _ = _history(harness, rounds=130)  # more than 100 finished firings each
    got = harness.store.recent_runs([a.id, b.id])
    for job in (a, b):
        finished = harness.store.list_job_firings(job.id, states=STARTED_STATES, limit=1000)
        assert len(finished) > 100
        assert got[job.id] == _expected(harness, job.id, 100)
        assert 0 < len(got[job.id].lateness_s) < 100  # retried and cancelled: no sample


def test_last_outcome_is_the_newest_not_open_among_the_newest(harness: Harness) -> None:
    t = harness.now()
    job = harness.store.create_job(spec("j", overlap="allow"), first_fire_at=None)
    (done,) = harness.store.add_firings("default", "j", [t - S], note="x").inserted
    (claim,) = harness.store.claim("w", tasks=["t"], limit=1)
    harness.advance(50 * MS)
    assert _complete(harness, claim)
    queued = harness.store.add_firings("default", "j", [t + S, t + 2 * S], note="x").inserted
    runs = harness.store.recent_runs([job.id], sample=3)[job.id]
    assert (runs.last_id, runs.last_state) == (FiringId(done.id), FiringState.SUCCEEDED)
    assert runs.lateness_s == (1.05,)
    # the newest two are open: with a sample of two there is no last outcome
    runs = harness.store.recent_runs([job.id], sample=2)[job.id]
    assert (runs.last_id, runs.last_state) == (None, None)
    assert runs.lateness_s == (1.05,)  # the newest finished ones, whatever is open
    assert len(queued) == 2


def test_jobs_page_status_and_metrics_agree_with_the_firings(harness: Harness) -> None:
    """The dashboard's jobs rows (p99, last outcome), status' breaches and /metrics'
    per-job p99 on ``recent_runs``: what reading each job's firings gave, all three the
    same lateness (observability/lateness.py)."""
    from cronwheel.dashboard import data
    from cronwheel.observability.cluster import per_job_series
    from cronwheel.observability.lateness import breaches, percentile
    from cronwheel.web.ids import ids_for

    _history(harness, rounds=60)
    store: Any = harness.store
    jobs = store.search_jobs("default", limit=100)
    ids = ids_for(store)
    p99_ms = {}
    for job in jobs:
        old = _expected(harness, job.id, 100)
        p99_ms[job.name] = percentile([x * 1000 for x in old.lateness_s], 99)
    rows, more = data.jobs(store, "default")
    assert not more and [r.name for r in rows] == ["a", "b", "idle"]
    for row, job in zip(rows, jobs, strict=True):
        recent = _newest(harness, job.id, 100)
        last = next((f for f in recent if f.state not in OPEN), None)
        assert row.last_outcome == (None if last is None else last.state.value)
        assert row.last_firing_id == (None if last is None else ids.encode("firing", last.id))
        assert row.p99 == data.fmt_ms(p99_ms[job.name])
    assert rows[2].last_outcome is None and rows[2].p99 == "—"
    # an objective under every p99: every job with samples breaches, worst first
    goal = min(v for v in p99_ms.values() if v is not None) / 2
    found = breaches(store, jobs, objective=goal)
    assert [(j.name, j.p99_ms) for j in found] == sorted(
        ((n, v) for n, v in p99_ms.items() if v is not None), key=lambda nv: -nv[1]
    )
    (_, p99, *_) = per_job_series(store, jobs, lambda job: 0)
    exported = {s.labels["job"]: s.value for s in p99.samples}
    assert exported == {n: v / 1000 for n, v in p99_ms.items() if v is not None}
