"""Retention over random histories (hypothesis), on the memory store and SQLite.

Whatever the history, the policies, the moment and the batch size, pruning never
deletes a firing that is not terminal, never one finished less than its keep_for
ago, keeps the newest ``keep_last`` of every outcome of every recurring job, and a
dry run deletes nothing and counts what the pass then deletes.
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cronwheel.domain.clock import FakeClock
from cronwheel.domain.firing import TERMINAL_STATES, FiringState
from cronwheel.domain.schedules import every
from cronwheel.store.protocol import DISPATCHER_LEASE, Completion, JobAdvance, PlannedFiring
from tests.contract.conftest import T0, spec

M = timedelta(minutes=1)
H = timedelta(hours=1)

job_st = st.fixed_dictionaries(
    {
        "claimed": st.booleans(),  # task "t" (claimed by the test) or "q" (left queued)
        "outcomes": st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=6),
        "keep_for_h": st.none() | st.integers(0, 48),
        "keep_last": st.none() | st.integers(0, 3),
    }
)
history_st = st.fixed_dictionaries(
    {
        "jobs": st.lists(job_st, min_size=1, max_size=4),
        "ns_keep_for_h": st.integers(0, 48),
        "ns_keep_last": st.integers(0, 3),
        "gaps_m": st.lists(st.integers(0, 600), min_size=30, max_size=30),
        "later_h": st.integers(0, 72),
        "batch": st.integers(1, 7),
    }
)


def _open(kind: str, clock: FakeClock, tmp: str) -> Any:
    if kind == "memory":
        from cronwheel.store.memory import MemoryStore

        store: Any = MemoryStore(clock=clock)
    else:
        from cronwheel.store.sqlite import SqliteStore

        store = SqliteStore(f"{tmp}/p.db", clock=clock)
    store.migrate()
    return store


def _build(store: Any, clock: FakeClock, h: dict[str, Any]) -> None:
    gaps = iter(h["gaps_m"] * 4)
    store.set_retention(
        "default", {"keep_for": h["ns_keep_for_h"] * 3600, "keep_last": h["ns_keep_last"]}
    )
    lease = store.acquire_lease(DISPATCHER_LEASE, "leader", timedelta(days=3650))
    plans: list[tuple[Any, dict[str, Any]]] = []
    for i, j in enumerate(h["jobs"]):
        over: dict[str, Any] = {"max_concurrency": 100, "max_attempts": 1}
        if j["keep_for_h"] is not None:
            over["keep_for"] = timedelta(hours=j["keep_for_h"])
        if j["keep_last"] is not None:
            over["keep_last"] = j["keep_last"]
        task = "t" if j["claimed"] else "q"
        job = store.create_job(
            spec(f"j{i}", task=task, schedule=every("1m"), **over), first_fire_at=clock.now()
        )
        instants = [T0 - (len(j["outcomes"]) - k) * M for k in range(len(j["outcomes"]))]
        store.enqueue(
            lease,
            [
                JobAdvance(
                    job_id=job.id,
                    expected_next_fire_at=job.next_fire_at,
                    new_next_fire_at=T0 + 10 * 365 * 24 * H,
                    firings=[PlannedFiring(scheduled_for=t) for t in instants],
                )
            ],
        )
        plans.append((job, j))
    for job, j in plans:
        firings = sorted(store.list_job_firings(job.id, limit=100), key=lambda f: f.scheduled_for)
        for f, outcome in zip(firings, j["outcomes"], strict=True):
            clock.advance(next(gaps) * M)
            if j["claimed"]:
                continue
            if outcome == "b":
                store.cancel_firing(f.id)
            elif outcome == "c":
                store.skip_occurrences("default", job.spec.name, [f.scheduled_for], "test")
    claimed = {c.firing.id: c for c in store.claim("w", tasks=["t"], limit=1000)}
    for job, j in plans:
        if not j["claimed"]:
            continue
        firings = sorted(store.list_job_firings(job.id, limit=100), key=lambda f: f.scheduled_for)
        for f, outcome in zip(firings, j["outcomes"], strict=True):
            clock.advance(next(gaps) * M)
            if outcome == "c":
                continue  # left running
            c = claimed[f.id]
            at = clock.now()
            done = Completion(
                firing_id=f.id,
                claim_token=c.claim_token,
                succeeded=outcome == "a",
                started_at=at,
                finished_at=at,
                error=None if outcome == "a" else "boom",
            )
            store.complete([done])


def _snapshot(store: Any) -> dict[int, Any]:
    return {f.id: f for f in store.list_firings(limit=10_000)}


def _check(kind: str, h: dict[str, Any]) -> None:
    clock = FakeClock(T0)
    with tempfile.TemporaryDirectory() as tmp:
        store = _open(kind, clock, tmp)
        try:
            _build(store, clock, h)
            clock.advance(h["later_h"] * H)
            now = clock.now()
            before = _snapshot(store)
            jobs = {j.id: j for j in store.list_jobs()}
            dry = store.prune_history(dry_run=True, batch=h["batch"])
            assert _snapshot(store).keys() == before.keys()
            report = store.prune_history(batch=h["batch"])
            after = _snapshot(store)
        finally:
            store.close()
    gone = before.keys() - after.keys()
    assert report.deleted == len(gone) and report.scanned == dry.scanned
    assert report.deleted <= dry.deleted  # a batch's deletions can only keep more later
    ns = (timedelta(hours=h["ns_keep_for_h"]), h["ns_keep_last"])  # a job without its own
    groups: dict[tuple[int, str], list[Any]] = defaultdict(list)
    for f in before.values():
        groups[(f.job_id, f.state.value)].append(f)
        if f.state not in TERMINAL_STATES:
            assert f.id in after and after[f.id].state is f.state, f  # never a live one
    for (job_id, state), items in groups.items():
        pol = jobs[job_id].spec.policies
        keep_for = pol.keep_for if pol.keep_for is not None else ns[0]
        keep_last = pol.keep_last if pol.keep_last is not None else ns[1]
        for f in items:
            if f.id in gone:
                assert f.finished_at is not None and now - f.finished_at >= keep_for, f
        if FiringState(state) in TERMINAL_STATES:
            newest = sorted(items, key=lambda f: f.scheduled_for)[-keep_last:] if keep_last else []
            assert all(f.id in after for f in newest), (state, keep_last)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history_st)
def test_memory_pruning_keeps_what_the_policy_promises(h: dict[str, Any]) -> None:
    _check("memory", h)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history_st)
def test_sqlite_pruning_keeps_what_the_policy_promises(h: dict[str, Any]) -> None:
    _check("sqlite", h)
