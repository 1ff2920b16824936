"""CLAIMED: a firing a worker holds but has not started, on every store.

The promises under test (README, "Firing lifecycle"): a held firing becomes RUNNING only
by the worker's `start` (a CAS on its claim token); a cancel before that wins, so a
`cancelled` answer means the handler never starts; a held firing whose worker died goes
back to the queue as it was; a running firing asked to stop is never re-queued.
"""

from __future__ import annotations

from datetime import timedelta

from cronwheel.domain.firing import FiringState
from tests.contract.conftest import Harness, spec
from tests.contract.test_store_contract import (
    _capped_job,
    _complete,
    _completion,
    _enqueue_instants,
    _queued,
)

S = timedelta(seconds=1)


def test_a_claim_holds_what_it_does_not_start(harness: Harness) -> None:
    ids = _queued(harness, 3)
    claims = harness.store.claim("w", tasks=["t"], limit=3, start=1)
    states = [c.firing.state for c in claims]
    assert states == [FiringState.RUNNING, FiringState.CLAIMED, FiringState.CLAIMED]
    assert [c.started for c in claims] == [True, False, False]
    now = harness.now()
    assert all(c.firing.claimed_at == now for c in claims)
    assert claims[0].firing.started_at == now
    assert all(c.firing.started_at is None for c in claims[1:])
    assert sorted(c.firing.id for c in claims) == sorted(ids)
    assert harness.store.status().counts["claimed"] == 2
    assert harness.store.status().counts["running"] == 1


def test_start_is_a_compare_and_swap_on_the_claim(harness: Harness) -> None:
    _queued(harness, 2)
    a, b = harness.store.claim("w", tasks=["t"], limit=2, start=0)
    harness.advance(S)
    started = harness.store.start("w", [(a.firing.id, a.claim_token), (b.firing.id, "stale")])
    assert started == {a.firing.id}
    f = harness.store.get_firing(a.firing.id)
    assert f.state is FiringState.RUNNING and f.started_at == harness.now()
    assert harness.store.get_firing(b.firing.id).state is FiringState.CLAIMED
    # started once: a second start changes nothing
    assert harness.store.start("w", [(a.firing.id, a.claim_token)]) == set()
    assert harness.store.start("w", []) == set()


def test_outcomes_and_starts_go_together_each_a_compare_and_swap(harness: Harness) -> None:
    """complete_and_start: the outcomes of running firings and the starts of held ones
    in one call; each part answers as complete and start would alone."""
    _queued(harness, 5)
    ran, failed, stale, held, gone = harness.store.claim("w", tasks=["t"], limit=5, start=3)
    assert [c.started for c in (ran, failed, stale, held, gone)] == [True] * 3 + [False] * 2
    assert harness.store.cancel_firing(gone.firing.id).outcome == "cancelled"
    harness.advance(S)
    outcomes = [_completion(harness, ran), _completion(harness, failed, ok=False)]
    outcomes.append(_completion(harness, stale, token="not-its-token"))
    starts = [(held.firing.id, held.claim_token), (gone.firing.id, gone.claim_token)]
    accepted, started = harness.store.complete_and_start(outcomes, "w", starts)
    assert accepted == [True, True, False]
    assert started == {held.firing.id}
    ran_, failed_, stale_, held_, gone_ = (
        harness.store.get_firing(c.firing.id) for c in (ran, failed, stale, held, gone)
    )
    assert ran_.state is FiringState.SUCCEEDED
    assert failed_.state is FiringState.DEAD  # no retry asked for
    assert stale_.state is FiringState.RUNNING  # its outcome was refused
    assert held_.state is FiringState.RUNNING and held_.started_at == harness.now()
    assert gone_.state is FiringState.CANCELLED  # its handler must never be called
    # either part may be empty
    assert harness.store.complete_and_start([], "w", []) == ([], set())
    assert harness.store.complete_and_start([_completion(harness, held)], "w", []) == (
        [True],
        set(),
    )
    assert harness.store.complete_and_start([], "w", starts) == ([], set())  # started once


def test_ready_is_called_once_before_the_start_and_a_cancel_meanwhile_wins(
    harness: Harness,
) -> None:
    """complete_and_start's ``ready`` (the worker's wait for the instant) runs before the
    start is written, with and without outcomes: a cancel made while it waits wins (the
    handler never runs), and the other held firing starts at the store's time after it."""
    _queued(harness, 3)
    ran, held, gone = harness.store.claim("w", tasks=["t"], limit=3, start=1)
    assert [c.started for c in (ran, held, gone)] == [True, False, False]
    calls: list[str] = []

    def ready() -> None:
        calls.append("ready")
        assert harness.store.get_firing(held.firing.id).state is FiringState.CLAIMED
        assert harness.store.cancel_firing(gone.firing.id).outcome == "cancelled"
        harness.advance(S)

    at = harness.now() + S
    starts = [(held.firing.id, held.claim_token), (gone.firing.id, gone.claim_token)]
    accepted, started = harness.store.complete_and_start(
        [_completion(harness, ran)], "w", starts, ready=ready, not_before=at
    )
    assert calls == ["ready"] and accepted == [True] and started == {held.firing.id}
    held_ = harness.store.get_firing(held.firing.id)
    assert held_.state is FiringState.RUNNING and held_.started_at == harness.now() == at
    assert harness.store.get_firing(gone.firing.id).state is FiringState.CANCELLED
    # without outcomes, and without claims: ready still runs once, first
    _queued(harness, name="late")
    (late,) = harness.store.claim("w", tasks=["t"], limit=1, start=0)
    assert harness.store.complete_and_start(
        [], "w", [(late.firing.id, late.claim_token)], ready=lambda: calls.append("alone")
    ) == ([], {late.firing.id})
    assert harness.store.complete_and_start([], "w", [], ready=lambda: calls.append("none")) == (
        [],
        set(),
    )
    assert calls == ["ready", "alone", "none"]


def test_a_held_firing_cannot_complete_before_it_starts(harness: Harness) -> None:
    _queued(harness)
    (held,) = harness.store.claim("w", tasks=["t"], limit=1, start=0)
    assert not _complete(harness, held)
    assert harness.store.get_firing(held.firing.id).state is FiringState.CLAIMED


def test_cancelling_a_held_firing_wins_over_its_start(harness: Harness) -> None:
    _queued(harness)
    (held,) = harness.store.claim("w", tasks=["t"], limit=1, start=0)
    r = harness.store.cancel_firing(held.firing.id)
    assert (r.outcome, r.firing.state) == ("cancelled", FiringState.CANCELLED)
    # its worker learns it from the poll it already makes, and its start fails
    assert harness.store.cancel_requested([(held.firing.id, held.claim_token)]) == {held.firing.id}
    assert harness.store.start("w", [(held.firing.id, held.claim_token)]) == set()
    assert harness.store.get_firing(held.firing.id).state is FiringState.CANCELLED
    assert not _complete(harness, held)


def test_a_held_firing_whose_worker_died_is_queued_again_as_it_was(harness: Harness) -> None:
    job = harness.store.create_job(spec("once", max_attempts=1), first_fire_at=harness.now())
    (fid,) = _enqueue_instants(harness, job, [job.next_fire_at])
    (held,) = harness.store.claim("w-dead", tasks=["t"], limit=1, start=0)
    harness.advance(20 * S)
    assert harness.store.heartbeat("w-dead", [(fid, held.claim_token)]) == set()  # renewed
    harness.advance(31 * S)
    assert harness.store.requeue_expired() == 1
    f = harness.store.get_firing(fid)
    # never started: not an attempt, so a max_attempts=1 firing is not DEAD
    assert (f.state, f.attempt, f.claimed_at) == (FiringState.QUEUED, 0, None)
    assert harness.store.start("w-dead", [(fid, held.claim_token)]) == set()
    (again,) = harness.store.claim("w-new", tasks=["t"], limit=1)
    assert again.firing.attempt == 1 and again.started


def test_a_running_firing_asked_to_stop_ends_cancelled_when_its_worker_dies(
    harness: Harness,
) -> None:
    (fid,) = _queued(harness)
    (claim,) = harness.store.claim("w", tasks=["t"], limit=1)
    assert harness.store.cancel_firing(fid).outcome == "cancel_requested"
    harness.advance(31 * S)  # the lease (30 s) expires before the cancel grace (30 s) is used
    assert harness.store.requeue_expired() >= 1
    f = harness.store.get_firing(fid)
    assert f.state is FiringState.CANCELLED and f.attempt == 1
    assert harness.store.claim("w2", tasks=["t"], limit=5) == []
    assert not _complete(harness, claim)


def test_held_firings_count_toward_a_jobs_cap(harness: Harness) -> None:
    job = _capped_job(harness, "cap", "skip")
    t = job.next_fire_at
    a, b = _enqueue_instants(harness, job, [t, t + S])
    harness.advance(S)
    (held,) = harness.store.claim("w1", tasks=["t"], limit=1, start=0)
    assert held.firing.id == a and not held.started
    harness.store.claim("w2", tasks=["t"], limit=5)
    assert harness.store.get_firing(b).state is FiringState.SKIPPED


def test_terminate_other_cancels_a_held_firing_outright(harness: Harness) -> None:
    job = _capped_job(harness, "term", "terminate_other")
    t = job.next_fire_at
    (a,) = _enqueue_instants(harness, job, [t])
    (held,) = harness.store.claim("w1", tasks=["t"], limit=1, start=0)
    job = harness.store.get_job_by_id(job.id)
    (b,) = _enqueue_instants(harness, job, [job.next_fire_at])
    harness.advance(timedelta(hours=1, seconds=1))
    (new,) = harness.store.claim("w2", tasks=["t"], limit=5)
    assert new.firing.id == b
    assert harness.store.get_firing(a).state is FiringState.CANCELLED
    assert harness.store.start("w1", [(a, held.claim_token)]) == set()
