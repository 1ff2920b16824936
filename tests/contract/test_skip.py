"""Skipping one occurrence without pausing the job, on every store.

The promises under test (README, "Skip one occurrence"): a skip ahead of the leader
makes that instant's firing SKIPPED with who asked and why, so the leader's enqueue of
it is a duplicate and it never runs (the cursor still advances); a QUEUED or held
(CLAIMED) firing becomes SKIPPED at once and a held one's start fails; a RUNNING or
finished firing is refused and left alone; a skip of an unknown job changes nothing.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from cronwheel.domain.firing import FiringState
from cronwheel.errors import JobNotFoundError
from tests.contract.conftest import Harness, spec
from tests.contract.test_store_contract import _complete, _enqueue_instants, _fire

S = timedelta(seconds=1)
WHY = "skipped by alice: holiday"


def _job(h: Harness, name: str = "j", **policies: object):
    return h.store.create_job(spec(name, **policies), first_fire_at=h.now())


def test_a_skip_ahead_makes_the_leaders_enqueue_of_it_a_duplicate(harness: Harness) -> None:
    job = _job(harness)
    t0 = job.next_fire_at
    assert t0 is not None
    t1 = t0 + timedelta(minutes=1)
    (r,) = harness.store.skip_occurrences("default", "j", [t1], WHY)
    assert (r.at, r.outcome, r.state) == (t1, "skipped", FiringState.SKIPPED)
    skipped = harness.store.get_firing(r.firing_id)
    assert skipped.state is FiringState.SKIPPED and skipped.reason == WHY
    assert skipped.scheduled_for == t1 and skipped.finished_at == harness.now()
    # the leader fires t0 and t1: only t0 is inserted, and the cursor moves past both
    result = _enqueue_instants(harness, job, [t0, t1])
    assert len(result) == 1
    assert harness.store.get_job("default", "j").next_fire_at == t1 + timedelta(hours=1)
    harness.advance(2 * 60 * S)
    claims = harness.store.claim("w", tasks=["t"], limit=10)
    assert [c.firing.scheduled_for for c in claims] == [t0]
    assert harness.store.get_firing(r.firing_id).state is FiringState.SKIPPED
    # a second skip of it: already skipped, nothing changes
    (again,) = harness.store.skip_occurrences("default", "j", [t1], "skipped by bob")
    assert (again.outcome, again.firing_id) == ("already_skipped", r.firing_id)
    assert harness.store.get_firing(r.firing_id).reason == WHY


def test_a_skipped_occurrence_is_not_claimed(harness: Harness) -> None:
    job = _job(harness)
    assert job.next_fire_at is not None
    (fid,) = _fire(harness, job, job.next_fire_at).inserted
    (r,) = harness.store.skip_occurrences("default", "j", [job.next_fire_at], WHY)
    assert (r.outcome, r.state, r.firing_id) == ("skipped", FiringState.SKIPPED, fid)
    f = harness.store.get_firing(fid)
    assert f.state is FiringState.SKIPPED and f.reason == WHY and f.attempt == 0
    assert harness.store.claim("w", tasks=["t"], limit=10) == []


def test_a_held_firings_start_fails_once_it_is_skipped(harness: Harness) -> None:
    job = _job(harness)
    assert job.next_fire_at is not None
    (fid,) = _fire(harness, job, job.next_fire_at).inserted
    (held,) = harness.store.claim("w", tasks=["t"], limit=1, start=0)
    assert held.firing.state is FiringState.CLAIMED
    (r,) = harness.store.skip_occurrences("default", "j", [job.next_fire_at], WHY)
    assert (r.outcome, r.state) == ("skipped", FiringState.SKIPPED)
    # its worker learns it from its cancel poll, and its start fails
    assert harness.store.cancel_requested([(fid, held.claim_token)]) == {fid}
    assert harness.store.start("w", [(fid, held.claim_token)]) == set()
    assert not _complete(harness, held)
    f = harness.store.get_firing(fid)
    assert f.state is FiringState.SKIPPED and f.reason == WHY


def test_running_and_finished_firings_are_refused_and_left_alone(harness: Harness) -> None:
    job = _job(harness, max_concurrency=2)
    t0 = job.next_fire_at
    assert t0 is not None
    t1 = t0 + timedelta(minutes=1)
    _fire(harness, job, t0, t1)
    harness.advance(2 * 60 * S)
    first, second = harness.store.claim("w", tasks=["t"], limit=2)
    assert _complete(harness, first)
    before = [harness.store.get_firing(c.firing.id) for c in (first, second)]
    t2 = t1 + timedelta(minutes=1)
    results = harness.store.skip_occurrences("default", "j", [t0, t1, t2], WHY)
    assert [(r.outcome, r.state) for r in results] == [
        ("refused", FiringState.SUCCEEDED),
        ("refused", FiringState.RUNNING),
        ("skipped", FiringState.SKIPPED),
    ]
    assert [harness.store.get_firing(c.firing.id) for c in (first, second)] == before


def test_an_unknown_job_changes_nothing(harness: Harness) -> None:
    job = _job(harness)
    assert job.next_fire_at is not None
    with pytest.raises(JobNotFoundError) as err:
        harness.store.skip_occurrences("default", "nope", [job.next_fire_at], WHY)
    assert err.value.field == "name"
    # another namespace's job of that name is not this one
    with pytest.raises(JobNotFoundError):
        harness.store.skip_occurrences("other", "j", [job.next_fire_at], WHY)
    assert harness.store.list_firings() == []
