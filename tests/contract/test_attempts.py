"""Every attempt of a firing, recorded once, on every store (``list_attempts``).

A claim that started the handler (or still holds the firing, or was cancelled while
holding it) is an attempt; a held claim whose lease expired gave its attempt back and
is not one. The recorded ones (failed, lease expired) come from ``firing_attempts``;
the current one is the firing's row.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from cronwheel.domain.attempts import AttemptOutcome, first_lateness, lateness_of
from cronwheel.domain.models import FiringId
from cronwheel.errors import FiringNotFoundError
from cronwheel.store.protocol import Completion
from tests.contract.conftest import Harness, spec
from tests.contract.test_store_contract import _complete, _enqueue_instants, _queued

S = timedelta(seconds=1)
A = AttemptOutcome


def _outcomes(h: Harness, fid: FiringId) -> list[tuple[int, AttemptOutcome]]:
    return [(a.attempt, a.outcome) for a in h.store.list_attempts(fid)]


def test_retried_twice_then_succeeded_is_three_attempts(harness: Harness) -> None:
    job = harness.store.create_job(spec("retry", max_attempts=3), first_fire_at=harness.now())
    (fid,) = _enqueue_instants(harness, job, [job.next_fire_at])
    assert harness.store.list_attempts(fid) == []  # queued, never claimed
    first_start = None
    for n in (1, 2):
        harness.advance(S)
        (claim,) = harness.store.claim(f"w{n}", tasks=["t"], limit=1)
        first_start = first_start or harness.now()
        assert _outcomes(harness, fid)[-1] == (n, A.RUNNING)
        assert _complete(harness, claim, ok=False, retry_in=timedelta(0))
    harness.advance(S)
    (claim,) = harness.store.claim("w3", tasks=["t"], limit=1)
    assert _complete(harness, claim)
    attempts = harness.store.list_attempts(fid)
    assert [(a.attempt, a.outcome, a.worker_id) for a in attempts] == [
        (1, A.FAILED, "w1"),
        (2, A.FAILED, "w2"),
        (3, A.SUCCEEDED, "w3"),
    ]
    assert [a.error for a in attempts] == ["boom", "boom", None]
    assert all(a.claimed_at is not None and a.finished_at is not None for a in attempts)
    assert attempts[0].claimed_at is not None and attempts[2].claimed_at is not None
    assert attempts[0].claimed_at < attempts[2].claimed_at
    firing = harness.store.get_firing(fid)
    # the firing's lateness is its first attempt's, not its last one's
    assert first_lateness(firing, attempts) == first_start - firing.scheduled_for
    # the row holds the last start: it does not claim to know the first one's lateness
    assert firing.started_at == harness.now() and firing.lateness is None
    assert lateness_of(firing, harness.store.list_attempts) == first_start - firing.scheduled_for
    # one read of both (the API's firing document): the same firing and attempts
    assert harness.store.firing_with_attempts(fid) == (firing, attempts)


def test_failing_for_good_records_every_attempt_once(harness: Harness) -> None:
    job = harness.store.create_job(spec("dies", max_attempts=2), first_fire_at=harness.now())
    (fid,) = _enqueue_instants(harness, job, [job.next_fire_at])
    for _ in range(2):
        (claim,) = harness.store.claim("w", tasks=["t"], limit=1)
        assert _complete(harness, claim, ok=False, retry_in=timedelta(0))
    assert _outcomes(harness, fid) == [(1, A.FAILED), (2, A.FAILED)]
    harness.store.redrive_firing(fid)
    assert _outcomes(harness, fid) == [(1, A.FAILED), (2, A.FAILED)]  # queued again
    (claim,) = harness.store.claim("w", tasks=["t"], limit=1)
    assert _complete(harness, claim)
    assert _outcomes(harness, fid) == [(1, A.FAILED), (2, A.FAILED), (3, A.SUCCEEDED)]


def test_an_expired_claim_is_an_attempt_then_the_next_one(harness: Harness) -> None:
    job = harness.store.create_job(spec("crash", max_attempts=3), first_fire_at=harness.now())
    (fid,) = _enqueue_instants(harness, job, [job.next_fire_at])
    (lost,) = harness.store.claim("w-dead", tasks=["t"], limit=1)
    harness.advance(31 * S)
    assert harness.store.requeue_expired() == 1
    assert _outcomes(harness, fid) == [(1, A.LEASE_EXPIRED)]
    (claim,) = harness.store.claim("w-new", tasks=["t"], limit=1)
    assert _outcomes(harness, fid) == [(1, A.LEASE_EXPIRED), (2, A.RUNNING)]
    assert _complete(harness, claim)
    attempts = harness.store.list_attempts(fid)
    assert [(a.attempt, a.outcome, a.worker_id) for a in attempts] == [
        (1, A.LEASE_EXPIRED, "w-dead"),
        (2, A.SUCCEEDED, "w-new"),
    ]
    assert attempts[0].started_at is not None and attempts[0].finished_at == attempts[1].claimed_at
    assert not _complete(harness, lost)


def test_an_expired_held_claim_is_not_an_attempt(harness: Harness) -> None:
    (fid,) = _queued(harness)
    (held,) = harness.store.claim("w-dead", tasks=["t"], limit=1, start=0)
    assert _outcomes(harness, fid) == [(1, A.CLAIMED)]
    assert harness.store.list_attempts(fid)[0].started_at is None
    harness.advance(31 * S)
    assert harness.store.requeue_expired() == 1
    assert harness.store.list_attempts(fid) == []
    (claim,) = harness.store.claim("w-new", tasks=["t"], limit=1, start=0)
    assert harness.store.start("w-new", [(fid, claim.claim_token)]) == {fid}
    assert _complete(harness, claim)
    attempts = harness.store.list_attempts(fid)
    assert [(a.attempt, a.outcome, a.worker_id) for a in attempts] == [(1, A.SUCCEEDED, "w-new")]
    assert held.firing.id == fid


def test_cancelled_attempts_appear_once(harness: Harness) -> None:
    _queued(harness, 3)
    claims = harness.store.claim("w", tasks=["t"], limit=3, start=2)
    (unstarted,) = [c for c in claims if not c.started]
    stopped, dying = [c for c in claims if c.started]
    for c in claims:
        harness.store.cancel_firing(c.firing.id)
    # the held one is cancelled at once; a running one ends cancelled by its handler ...
    now = harness.now()
    stop = Completion(
        firing_id=stopped.firing.id,
        claim_token=stopped.claim_token,
        succeeded=False,
        cancelled=True,
        started_at=now,
        finished_at=now,
    )
    assert harness.store.complete([stop]) == [True]
    # ... or when its worker dies while the request stands (recorded: lease expired)
    harness.advance(31 * S)
    assert harness.store.requeue_expired() == 1
    assert _outcomes(harness, unstarted.firing.id) == [(1, A.CANCELLED)]
    assert harness.store.list_attempts(unstarted.firing.id)[0].started_at is None
    assert _outcomes(harness, stopped.firing.id) == [(1, A.CANCELLED)]
    assert _outcomes(harness, dying.firing.id) == [(1, A.LEASE_EXPIRED)]


def test_attempts_of_an_unknown_firing(harness: Harness) -> None:
    with pytest.raises(FiringNotFoundError):
        harness.store.list_attempts(FiringId(987654))
    with pytest.raises(FiringNotFoundError):
        harness.store.firing_with_attempts(FiringId(987654))


def test_status_lateness_counts_first_attempts_only(harness: Harness) -> None:
    job = harness.store.create_job(spec("late", max_attempts=2), first_fire_at=harness.now())
    (fid,) = _enqueue_instants(harness, job, [job.next_fire_at])
    (prompt,) = _queued(harness, name="prompt")
    harness.advance(S)
    claims = {c.firing.id: c for c in harness.store.claim("w", tasks=["t"], limit=2)}
    assert _complete(harness, claims[prompt])
    assert _complete(harness, claims[fid], ok=False, retry_in=timedelta(0))
    harness.advance(S)
    (again,) = harness.store.claim("w", tasks=["t"], limit=1)
    assert _complete(harness, again)  # succeeded at its second attempt, 2 s late
    assert harness.store.status().lateness_ms == [1000.0]  # the first-attempt success only
    mine = harness.store.status(namespace="default")  # a namespace token's view
    assert mine.lateness_ms == [1000.0] and mine.counts.get("succeeded") == 2
    other = harness.store.status(namespace="other")
    assert other.lateness_ms == [] and other.counts.get("succeeded") is None


def test_status_of_a_namespace_counts_only_its_live_firings(harness: Harness) -> None:
    """A namespace token's view: queued and held counts, and the oldest queued instant,
    of its own firings only."""
    now = harness.now()
    due = {"a": [now, now + S], "b": [now + 2 * S]}
    for ns, instants in due.items():
        for i, at in enumerate(instants):
            job = harness.store.create_job(spec(f"{ns}{i}", namespace=ns), first_fire_at=at)
            _enqueue_instants(harness, job, [at])
    harness.advance(3 * S)
    (held,) = harness.store.claim("w", tasks=["t"], limit=1)
    due[held.firing.namespace].remove(held.firing.due_at)
    for ns in ("a", "b"):
        status = harness.store.status(namespace=ns)
        mine = int(held.firing.namespace == ns)
        assert status.counts["queued"] == len(due[ns])
        assert status.counts["claimed"] + status.counts["running"] == mine
        assert status.oldest_queued_due_at == min(due[ns], default=None)
    everyone = harness.store.status()
    assert everyone.counts["queued"] == 2
    assert everyone.counts["claimed"] + everyone.counts["running"] == 1
    assert everyone.oldest_queued_due_at == min(due["a"] + due["b"])
