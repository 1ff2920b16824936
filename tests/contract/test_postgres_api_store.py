"""The ApiStore port (protocol.py, the HTTP API's store methods) on every store, the
PostgreSQL one in particular: tests/api runs on SQLite only (its conftest builds a
SqliteStore), so each ApiStore method is exercised here once per store."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import cast

import pytest

from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import JobSpec
from cronwheel.domain.schedules import every
from cronwheel.errors import ConflictError, JobNotFoundError, NotFoundError
from cronwheel.store.protocol import ApiStore
from tests.contract.conftest import Harness, spec

S = timedelta(seconds=1)


def _api(h: Harness) -> ApiStore:
    return cast(ApiStore, h.store)


def test_ping(harness: Harness) -> None:
    _api(harness).ping()


def test_tokens_are_stored_listed_and_revoked_idempotently(harness: Harness) -> None:
    store = _api(harness)
    a = store.create_token(namespace="team-a", role="write", label="ci", secret_hash="h1")
    b = store.create_token(namespace="team-b", role="read", label=None, secret_hash="h2")
    assert a.id < b.id and a.created_at == harness.now() and a.revoked_at is None
    assert (a.namespace, a.role, a.label, a.secret_hash) == ("team-a", "write", "ci", "h1")
    assert store.get_token(a.id) == a
    assert store.get_token(10**9) is None
    assert [t.id for t in store.list_tokens()] == [a.id, b.id]
    assert [t.id for t in store.list_tokens(namespace="team-b")] == [b.id]
    harness.advance(5 * S)
    revoked = store.revoke_token(a.id)
    assert revoked.revoked_at == harness.now()
    harness.advance(5 * S)
    assert store.revoke_token(a.id).revoked_at == revoked.revoked_at  # kept: idempotent
    assert store.get_token(a.id) == revoked
    with pytest.raises(NotFoundError):
        store.revoke_token(10**9)


def test_search_jobs_by_state_task_and_literal_prefix(harness: Harness) -> None:
    store = _api(harness)
    now = harness.now()
    active = store.create_job(spec("a%1"), first_fire_at=now)
    store.create_job(spec("ax1", task="other"), first_fire_at=now)
    done = store.create_job(spec("a_done"), first_fire_at=None)
    store.create_job(spec("paused"), first_fire_at=now)
    store.set_paused("default", "paused", True)
    store.create_job(spec("a%1", namespace="team-b"), first_fire_at=now)

    def names(**kw: object) -> list[str]:
        return [j.name for j in store.search_jobs("default", **kw)]  # type: ignore[arg-type]

    assert names() == ["a%1", "ax1", "a_done", "paused"]
    assert names(state="active") == ["a%1", "ax1"]
    assert names(state="paused") == ["paused"]
    assert names(state="done") == ["a_done"]
    assert names(task="other") == ["ax1"]
    assert names(name_prefix="a%") == ["a%1"]
    assert names(name_prefix="a_") == ["a_done"]
    assert names(after_id=active.id, limit=1) == ["ax1"]
    assert [j.id for j in store.search_jobs("default", after_id=done.id)] == [
        store.get_job("default", "paused").id
    ]
    kinds = [e.kind for e in store.job_events(store.get_job("default", "paused").id)]
    assert kinds == ["paused"]


def test_add_firings_and_list_job_firings(harness: Harness) -> None:
    store = _api(harness)
    job = store.create_job(spec("bf"), first_fire_at=harness.now() + 3600 * S)
    t = harness.now()
    instants = [t - 120 * S, t - 60 * S, t + 60 * S, t - 60 * S]
    added = store.add_firings("default", "bf", instants, note="backfill", overlap="allow")
    assert added.duplicates == 1
    assert [f.scheduled_for for f in added.inserted] == instants[:3]
    assert [f.due_at for f in added.inserted] == [t, t, t + 60 * S]  # never due in the past
    assert all(f.state is FiringState.QUEUED and f.note == "backfill" for f in added.inserted)
    assert all(f.overlap_override == "allow" for f in added.inserted)
    again = store.add_firings("default", "bf", [t - 120 * S], note="again")
    assert again.inserted == [] and again.duplicates == 1
    assert store.get_job_by_id(job.id).next_fire_at == t + 3600 * S  # cursor untouched
    with pytest.raises(JobNotFoundError):
        store.add_firings("default", "nope", [t], note="x")

    ids = [f.id for f in added.inserted]
    assert [f.id for f in store.list_job_firings(job.id)] == ids[::-1]
    assert [f.id for f in store.list_job_firings(job.id, before_id=ids[2], limit=1)] == [ids[1]]
    window = store.list_job_firings(job.id, scheduled_from=t - 60 * S, scheduled_to=t + 60 * S)
    assert [f.id for f in window] == [ids[1]]
    (claim,) = store.claim("w", tasks=["t"], limit=1)
    running = store.list_job_firings(job.id, states=[FiringState.RUNNING])
    assert [f.id for f in running] == [claim.firing.id]
    assert store.job_backlog("default") == {"bf": 3}  # queued + running
    assert store.next_due_at() == t + 60 * S


def test_enqueue_now_once_is_idempotent_per_key(harness: Harness) -> None:
    store = _api(harness)
    s = JobSpec(name="adhoc-1", task="t", schedule=every("1h"), args=(1,))
    first, created = store.enqueue_now_once(s, key_hash="k1", request_hash="r1")
    assert created and first.state is FiringState.QUEUED and first.scheduled_for == harness.now()
    again, created = store.enqueue_now_once(
        JobSpec(name="adhoc-2", task="t", schedule=every("1h"), args=(1,)),
        key_hash="k1",
        request_hash="r1",
    )
    assert not created and again.id == first.id
    with pytest.raises(ConflictError):
        store.enqueue_now_once(s, key_hash="k1", request_hash="other")
    with pytest.raises(JobNotFoundError):
        store.get_job("default", "adhoc-2")  # a replay creates nothing
    # the same key in another namespace is another key
    other = JobSpec(name="adhoc-1", task="t", schedule=every("1h"), namespace="team-b")
    _, created = store.enqueue_now_once(other, key_hash="k1", request_hash="r1")
    assert created
    # a key is forgotten with its firing
    store.delete_job("default", "adhoc-1")
    fresh, created = store.enqueue_now_once(s, key_hash="k1", request_hash="r2")
    assert created and fresh.id != first.id
    assert store.job_backlog("default") == {"adhoc-1": 1}
    assert store.job_backlog("team-b", limit=1) == {"adhoc-1": 1}


def test_enqueue_now_once_racing_requests_create_one_firing(harness: Harness) -> None:
    stores = [cast(ApiStore, harness.open_another()) for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    results: list[tuple[int, bool]] = []
    errors: list[BaseException] = []

    def request(i: int) -> None:
        barrier.wait()
        try:
            f, created = stores[i].enqueue_now_once(
                JobSpec(name=f"race-{i}", task="t", schedule=every("1h")),
                key_hash="same",
                request_hash="body",
            )
            results.append((f.id, created))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=request, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    assert len({fid for fid, _ in results}) == 1
    assert sorted(created for _, created in results) == [False, False, False, True]
    assert len(_api(harness).list_firings()) == 1
