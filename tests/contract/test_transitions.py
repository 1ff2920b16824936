"""The firing state machine where it happens: in each store.

Every transition is driven through a store's public methods and checked against
``domain/firing.py``'s ``TRANSITIONS`` both ways:

- each change a store makes is a table entry, with the table's target state; a
  (state, event) pair the table does not have is refused and changes nothing. Beyond
  the firing a test aims at, every store write here is watched (``_Watched``): each
  firing it creates is born QUEUED and each one it changes moves along a table edge
  (the fates a claim or the reaper deal to other firings included);
- each table entry is made by some store call here (``test_the_table_is_what_this_suite_drives``).

``test_event_from_state`` is the matrix: a firing is brought to each state through
the store (``BUILDERS``), then each event with a store operation (``EVENTS``) is
applied. A new state is a table entry, a builder and, for a new event, an operation
(CLAIMED came that way: a claim that starts none of what it takes builds it, ``start``
moves it on). The transitions that need a job policy
(skip, miss, cancel grace, terminate_other, the last attempt's expiry) have scenarios
of their own, and two races run on two store handles.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, cast

import pytest

from cronwheel.domain.firing import TERMINAL_STATES, TRANSITIONS, FiringEvent, FiringState
from cronwheel.domain.models import Firing, FiringId, JobSpec
from cronwheel.domain.schedules import now
from cronwheel.errors import InvalidTransitionError
from cronwheel.store.protocol import (
    DISPATCHER_LEASE,
    ApiStore,
    Completion,
    JobAdvance,
    PlannedFiring,
    Store,
)
from tests.contract.conftest import Harness, spec

S, E = FiringState, FiringEvent
SEC = timedelta(seconds=1)
NEVER_ISSUED = "0" * 32  # a claim token no store hands out


def _api(h: Harness) -> ApiStore:
    return cast(ApiStore, h.store)


EDGES = {(source, target) for (source, _), target in TRANSITIONS.items()}
# a claim that starts what it takes makes both moves in one transaction
EDGES.add((S.QUEUED, TRANSITIONS[(TRANSITIONS[(S.QUEUED, E.CLAIM)], E.START)]))
BORN = TRANSITIONS[(S.SCHEDULED, E.ENQUEUE)]
WRITES = frozenset(
    {
        "enqueue",
        "enqueue_now",
        "enqueue_now_once",
        "add_firings",
        "claim",
        "start",
        "complete",
        "complete_and_claim",
        "heartbeat",
        "requeue_expired",
        "cancel_firing",
        "redrive_firing",
    }
)


class _Watched:
    """A store whose writes are checked: every firing a write creates is born QUEUED, and
    every firing it changes moves along an edge of the table."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def _states(self) -> dict[FiringId, FiringState]:
        return {f.id: f.state for f in self._store.list_firings(limit=1_000_000)}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name not in WRITES:
            return attr

        def write(*args: Any, **kwargs: Any) -> Any:
            before = self._states()
            result = attr(*args, **kwargs)
            for fid, state in self._states().items():
                was = before.get(fid)
                if was is None:
                    assert state is BORN, f"{name} created firing {fid} {state}"
                else:
                    assert was is state or (was, state) in EDGES, (
                        f"{name} moved firing {fid} {was} -> {state}: not in the table"
                    )
            return result

        return write


@pytest.fixture
def harness(harness: Harness) -> Harness:
    """The contract harness, its stores watched (``_Watched``)."""
    return Harness(
        store=cast(Store, _Watched(harness.store)),
        advance=harness.advance,
        open_another=lambda: cast(Store, _Watched(harness.open_another())),
    )


def _moved(before: Firing, after: Firing, event: FiringEvent) -> None:
    """``after`` is what the table says ``event`` makes of ``before``; an event the table
    does not have for that state must have changed nothing at all."""
    target = TRANSITIONS.get((before.state, event))
    if target is None:
        assert after == before, f"{event} on a {before.state} firing changed it: {after}"
    else:
        assert after.state is target, f"{event}: {before.state} -> {after.state}, not {target}"


def _completion(
    h: Harness,
    fid: FiringId,
    token: str,
    *,
    ok: bool = True,
    retry_in: timedelta | None = None,
    cancelled: bool = False,
) -> Completion:
    at = h.now()
    return Completion(
        firing_id=fid,
        claim_token=token,
        succeeded=ok,
        started_at=at,
        finished_at=at,
        error=None if ok else "boom",
        retry_at=None if retry_in is None else at + retry_in,
        cancelled=cancelled,
    )


# -- firings in each state, through the store ---------------------------------------------
@dataclass
class Held:
    """A firing in a given state and the last claim token issued for it (if any)."""

    id: FiringId
    task: str
    token: str = NEVER_ISSUED

    def get(self, h: Harness) -> Firing:
        return h.store.get_firing(self.id)


def _queued(h: Harness, name: str, **policies: Any) -> Held:
    s = JobSpec(name=name, task=name, schedule=now(), policies=spec(**policies).policies)
    return Held(h.store.enqueue_now(s).id, name)


def _taken(h: Harness, name: str, start: int | None, **policies: Any) -> Held:
    held = _queued(h, name, **policies)
    (claim,) = h.store.claim("w", tasks=[held.task], limit=1, start=start)
    assert claim.firing.id == held.id
    held.token = claim.claim_token
    return held


def _claimed(h: Harness, name: str, **policies: Any) -> Held:
    """Held by a worker, not started (a claim that starts none of what it takes)."""
    held = _taken(h, name, 0, **policies)
    assert held.get(h).state is TRANSITIONS[(S.QUEUED, E.CLAIM)] is S.CLAIMED
    return held


def _running(h: Harness, name: str, **policies: Any) -> Held:
    """Claimed and started in one claim: both entries, one transaction."""
    held = _taken(h, name, None, **policies)
    assert held.get(h).state is TRANSITIONS[(TRANSITIONS[(S.QUEUED, E.CLAIM)], E.START)]
    return held


def _finished(h: Harness, name: str, completion: dict[str, Any], state: FiringState) -> Held:
    held = _running(h, name)
    assert h.store.complete([_completion(h, held.id, held.token, **completion)]) == [True]
    assert held.get(h).state is state
    return held


def _cancelled(h: Harness, name: str) -> Held:
    held = _queued(h, name)
    assert h.store.cancel_firing(held.id).outcome == "cancelled"
    return held


def _skipped(h: Harness, name: str) -> Held:
    """Two firings of a job capped at one (overlap skip) fall due: one runs, one is skipped."""
    h.store.create_job(spec(name, task=name, visibility_timeout=3600 * SEC), first_fire_at=None)
    t = h.now()
    added = _api(h).add_firings("default", name, [t - 2 * SEC, t - SEC], note="test")
    first, second = (f.id for f in added.inserted)
    (claim,) = h.store.claim("w", tasks=[name], limit=5)
    assert claim.firing.id == first
    return Held(second, name)


def _missed(h: Harness, name: str) -> Held:
    """A queued firing whose start deadline passes before any worker takes it."""
    h.store.create_job(spec(name, task=name, start_deadline=SEC), first_fire_at=None)
    (f,) = _api(h).add_firings("default", name, [h.now()], note="test").inserted
    h.advance(2 * SEC)
    h.store.requeue_expired()
    return Held(f.id, name)


BUILDERS: dict[FiringState, Callable[[Harness, str], Held]] = {
    S.QUEUED: _queued,
    S.CLAIMED: _claimed,
    S.RUNNING: _running,
    S.SUCCEEDED: lambda h, n: _finished(h, n, {"ok": True}, S.SUCCEEDED),
    S.DEAD: lambda h, n: _finished(h, n, {"ok": False}, S.DEAD),
    S.CANCELLED: _cancelled,
    S.SKIPPED: _skipped,
    S.MISSED: _missed,
}


# -- events, through the store ------------------------------------------------------------------
def _claim(h: Harness, held: Held) -> None:
    for c in h.store.claim("w2", tasks=[held.task], limit=5, start=0):
        assert c.firing.id == held.id
        held.token = c.claim_token


def _start(h: Harness, held: Held) -> None:
    before = held.get(h)
    started = h.store.start("w", [(held.id, held.token)])
    assert started == ({held.id} if before.state is S.CLAIMED else set())


def _complete(**completion: Any) -> Callable[[Harness, Held], None]:
    def apply(h: Harness, held: Held) -> None:
        before = held.get(h)
        (accepted,) = h.store.complete([_completion(h, held.id, held.token, **completion)])
        assert accepted == (held.get(h) != before), "accepted means changed, refused unchanged"

    return apply


def _lease_expires(h: Harness, held: Held) -> None:
    h.advance(timedelta(seconds=31))  # past the default 30 s visibility timeout
    h.store.requeue_expired()


def _cancel(h: Harness, held: Held) -> None:
    before = held.get(h)
    result = h.store.cancel_firing(held.id)
    if result.outcome == "cancel_requested":
        # a request, not a transition: the state is the same until the handler stops
        assert before.state is S.RUNNING
        assert result.firing.state is S.RUNNING and result.firing.cancel_requested_at
        assert h.store.cancel_requested([(held.id, held.token)]) == {held.id}
        stopped = _completion(h, held.id, held.token, ok=False, cancelled=True)
        assert h.store.complete([stopped]) == [True]
        assert held.get(h).reason is not None
    elif result.outcome == "cancelled":
        assert before.state in (S.QUEUED, S.CLAIMED)
        assert result.firing.state is S.CANCELLED
        assert h.store.start("w", [(held.id, held.token)]) == set()  # a held one never starts
    else:
        assert result.outcome == "already_final" and result.firing == before
        assert before.state in TERMINAL_STATES
        stopped = _completion(h, held.id, held.token, ok=False, cancelled=True)
        assert h.store.complete([stopped]) == [False]


def _redrive(h: Harness, held: Held) -> None:
    before = held.get(h)
    if before.state is S.DEAD:
        f = h.store.redrive_firing(held.id)
        assert f.max_attempts == before.attempt + 3 and f.due_at == h.now()
    else:
        with pytest.raises(InvalidTransitionError):
            h.store.redrive_firing(held.id)


def _enqueue_again(h: Harness, held: Held) -> None:
    f = held.get(h)
    again = _api(h).add_firings(f.namespace, f.job_name, [f.scheduled_for], note="again")
    assert (again.inserted, again.duplicates) == ([], 1)  # the unique instant holds


EVENTS: dict[FiringEvent, Callable[[Harness, Held], None]] = {
    E.ENQUEUE: _enqueue_again,
    E.CLAIM: _claim,
    E.START: _start,
    E.SUCCEED: _complete(ok=True),
    E.RETRY: _complete(ok=False, retry_in=10 * SEC),
    E.FAIL: _complete(ok=False),
    E.LEASE_EXPIRED: _lease_expires,
    E.CANCEL: _cancel,
    E.REDRIVE: _redrive,
}
MATRIX = [(s, e) for s in BUILDERS for e in EVENTS]


@pytest.mark.parametrize(("state", "event"), MATRIX, ids=[f"{s}-{e}" for s, e in MATRIX])
def test_event_from_state(harness: Harness, state: FiringState, event: FiringEvent) -> None:
    held = BUILDERS[state](harness, f"m-{state}-{event}")
    before = held.get(harness)
    assert before.state is state
    EVENTS[event](harness, held)
    _moved(before, held.get(harness), event)


# -- heartbeats: held claims only -----------------------------------------------------------------
@pytest.mark.parametrize("state", list(BUILDERS), ids=str)
def test_heartbeat_renews_only_the_claim_it_names(harness: Harness, state: FiringState) -> None:
    held = BUILDERS[state](harness, f"hb-{state}")
    harness.advance(5 * SEC)
    before = held.get(harness)
    assert harness.store.heartbeat("w", [(held.id, "f" * 32)]) == {held.id}  # a wrong token
    assert held.get(harness) == before
    lost = harness.store.heartbeat("w", [(held.id, held.token)])
    after = held.get(harness)
    if state in (S.CLAIMED, S.RUNNING):
        assert lost == set() and after.lease_until == harness.now() + timedelta(seconds=30)
        assert replace(after, lease_until=before.lease_until) == before
    else:
        assert lost == {held.id} and after == before


# -- transitions that need a job policy ------------------------------------------------------------
def _lease(h: Harness) -> Any:
    lease = h.store.acquire_lease(DISPATCHER_LEASE, "leader", 10 * SEC)
    assert lease is not None
    return lease


def test_every_firing_is_born_queued(harness: Harness) -> None:
    h = harness
    born = TRANSITIONS[(S.SCHEDULED, E.ENQUEUE)]
    job = h.store.create_job(spec("cron"), first_fire_at=h.now())
    assert job.next_fire_at is not None
    r = h.store.enqueue(
        _lease(h),
        [
            JobAdvance(
                job_id=job.id,
                expected_next_fire_at=job.next_fire_at,
                new_next_fire_at=job.next_fire_at + 2 * SEC,
                firings=[PlannedFiring(scheduled_for=job.next_fire_at + i * SEC) for i in (0, 1)],
            )
        ],
    )
    now_firing = h.store.enqueue_now(JobSpec(name="adhoc", task="t", schedule=now()))
    added = _api(h).add_firings("default", "cron", [h.now() + 5 * SEC], note="trigger")
    once, _ = _api(h).enqueue_now_once(
        JobSpec(name="keyed", task="t", schedule=now()), key_hash="k", request_hash="r"
    )
    ids = [*r.inserted, now_firing.id, *(f.id for f in added.inserted), once.id]
    assert len(ids) == 5
    assert all(h.store.get_firing(i).state is born for i in ids)


def test_overlap_policy_skips_due_firings_beyond_the_cap(harness: Harness) -> None:
    h = harness
    h.store.create_job(
        spec("b1", task="b1", visibility_timeout=3600 * SEC, overlap="buffer_one"),
        first_fire_at=None,
    )
    t = h.now()
    added = _api(h).add_firings("default", "b1", [t, t + SEC, t + 2 * SEC], note="x")
    ids = [f.id for f in added.inserted]
    h.advance(3 * SEC)
    queued = {i: h.store.get_firing(i) for i in ids}
    (claim,) = h.store.claim("w", tasks=["b1"], limit=5, start=0)
    assert claim.firing.id == ids[0]
    _moved(queued[ids[0]], h.store.get_firing(ids[0]), E.CLAIM)
    assert h.store.get_firing(ids[1]).state is S.QUEUED  # the one buffered firing waits
    skipped = h.store.get_firing(ids[2])
    _moved(queued[ids[2]], skipped, E.SKIP)
    assert "buffer full" in (skipped.reason or "")
    assert h.store.cancel_firing(ids[2]).outcome == "already_final"  # final: left alone


def test_an_operators_skip_of_planned_queued_held_and_running_firings(
    harness: Harness,
) -> None:
    """``jobs skip``: a planned occurrence is born SKIPPED; a queued or held one becomes
    SKIPPED at once (the held one never starts); a running or final one is left alone."""
    h = harness
    held, queued, running = _claimed(h, "sk-c"), _queued(h, "sk-q"), _running(h, "sk-r")
    for target in (held, queued, running):
        before = target.get(h)
        (r,) = h.store.skip_occurrences("default", before.job_name, [before.scheduled_for], "x")
        _moved(before, target.get(h), E.SKIP)
        assert r.outcome == ("refused" if before.state is S.RUNNING else "skipped")
    assert h.store.start("w", [(held.id, held.token)]) == set()
    h.store.create_job(spec("sk-p", task="sk-p"), first_fire_at=None)
    planned = h.now() + 60 * SEC
    (r,) = h.store.skip_occurrences("default", "sk-p", [planned], "x")
    born = h.store.get_firing(FiringId(r.firing_id or 0))
    assert born.state is TRANSITIONS[(S.SCHEDULED, E.SKIP)]


def test_start_deadline_misses_queued_firings_never_running_ones(harness: Harness) -> None:
    h = harness
    h.store.create_job(
        spec("dl", task="dl", start_deadline=5 * SEC, visibility_timeout=3600 * SEC),
        first_fire_at=None,
    )
    t = h.now()
    added = _api(h).add_firings(
        "default", "dl", [t, t + SEC, t + 10 * SEC], note="x", overlap="allow"
    )
    a, b, c = (f.id for f in added.inserted)
    (running,) = h.store.claim("w", tasks=["dl"], limit=1)
    assert running.firing.id == a
    h.advance(7 * SEC)  # b is due for longer than its deadline
    before = {i: h.store.get_firing(i) for i in (a, b, c)}
    assert h.store.claim("w", tasks=["dl"], limit=1) == []  # at claim time: b missed
    _moved(before[b], h.store.get_firing(b), E.MISS)
    assert h.store.get_firing(c) == before[c]  # not due yet
    h.advance(9 * SEC)  # c is due for longer than its deadline: the reaper misses it
    h.store.requeue_expired()
    _moved(before[c], h.store.get_firing(c), E.MISS)
    assert h.store.get_firing(a) == before[a]  # a started in time: the deadline is behind it
    assert {h.store.get_firing(i).reason for i in (b, c)} == {
        "start deadline passed before a worker could start it"
    }


def test_the_last_attempt_fails_to_dead_by_result_or_by_lease(harness: Harness) -> None:
    h = harness
    by_result = _running(h, "last-result", max_attempts=1)
    before = by_result.get(h)
    retry = _completion(h, by_result.id, by_result.token, ok=False, retry_in=SEC)
    assert h.store.complete([retry]) == [True]  # a retry asked for, no attempt left
    _moved(before, by_result.get(h), E.FAIL)
    by_lease = _running(h, "last-lease", max_attempts=1)
    before = by_lease.get(h)
    h.advance(31 * SEC)
    h.store.requeue_expired()
    dead = by_lease.get(h)
    _moved(before, dead, E.FAIL)
    assert "lease expired" in (dead.error or "")
    assert h.store.complete([_completion(h, by_lease.id, by_lease.token)]) == [False]


def test_cancel_grace_expiry_revokes_the_claim(harness: Harness) -> None:
    h = harness
    held = _running(h, "grace", cancel_grace=5 * SEC)
    assert h.store.cancel_firing(held.id).outcome == "cancel_requested"
    before = held.get(h)
    h.advance(5 * SEC)
    h.store.requeue_expired()
    assert held.get(h) == before  # within the grace: still the worker's
    h.advance(SEC + timedelta(microseconds=1))
    h.store.requeue_expired()
    revoked = held.get(h)
    _moved(before, revoked, E.CANCEL)
    # complete after cancel: the late result of a revoked claim is rejected, whatever it is
    for late in (
        _completion(h, held.id, held.token),
        _completion(h, held.id, held.token, ok=False, retry_in=SEC),
        _completion(h, held.id, held.token, ok=False, cancelled=True),
    ):
        assert h.store.complete([late]) == [False]
    assert held.get(h) == revoked
    assert h.store.heartbeat("w", [(held.id, held.token)]) == {held.id}


@pytest.mark.parametrize(
    ("attempts", "grace_s"),
    [(3, 60), (1, 60), (3, 5)],
    ids=["attempts-left", "last-attempt", "grace-passed-too"],
)
def test_a_cancel_requested_firing_whose_worker_died_ends_cancelled(
    harness: Harness, attempts: int, grace_s: int
) -> None:
    """Cancelling a RUNNING firing only requests it; when its worker dies before the handler
    stops, the lease runs out: the firing is cancelled then, never run again nor failed."""
    h = harness
    held = _running(h, "orphan", max_attempts=attempts, cancel_grace=grace_s * SEC)
    h.advance(10 * SEC)
    assert h.store.cancel_firing(held.id).outcome == "cancel_requested"
    before = held.get(h)
    h.advance(21 * SEC)  # the 30 s lease has run out (the worker is gone)
    h.store.requeue_expired()
    after = held.get(h)
    _moved(before, after, E.CANCEL)
    assert h.store.claim("w2", tasks=[held.task], limit=1) == []
    assert h.store.complete([_completion(h, held.id, held.token)]) == [False]
    assert held.get(h) == after


def test_a_cancel_requested_firing_that_fails_is_not_retried(harness: Harness) -> None:
    """A handler asked to stop fails instead (its worker asks for a retry, maybe before it
    heard of the request): the cancel stands, the firing is not run again."""
    h = harness
    held = _running(h, "no-retry")
    assert h.store.cancel_firing(held.id).outcome == "cancel_requested"
    before = held.get(h)
    failed = _completion(h, held.id, held.token, ok=False, retry_in=SEC)
    assert h.store.complete([failed]) == [True]  # the attempt's outcome is recorded...
    after = held.get(h)
    _moved(before, after, E.CANCEL)  # ... and it ends the firing
    assert after.error == "boom" and after.reason is not None
    h.advance(2 * SEC)
    assert h.store.claim("w2", tasks=[held.task], limit=1) == []


def test_a_redriven_firing_starts_without_its_old_cancel_request(harness: Harness) -> None:
    """A firing whose cancel was requested but whose handler failed instead, on its last
    attempt, is DEAD; a redrive is a fresh start that runs to its own outcome."""
    h = harness
    held = _running(h, "redo", max_attempts=1)
    assert h.store.cancel_firing(held.id).outcome == "cancel_requested"
    assert h.store.complete([_completion(h, held.id, held.token, ok=False)]) == [True]
    dead = held.get(h)
    assert dead.state is S.DEAD
    h.advance(60 * SEC)
    _moved(dead, h.store.redrive_firing(held.id), E.REDRIVE)
    (again,) = h.store.claim("w2", tasks=[held.task], limit=1)
    assert h.store.cancel_requested([(held.id, again.claim_token)]) == set()
    h.advance(SEC)
    h.store.requeue_expired()
    assert held.get(h).state is S.RUNNING  # not revoked by the spent request's grace
    assert h.store.complete([_completion(h, held.id, again.claim_token)]) == [True]
    assert held.get(h).state is S.SUCCEEDED


def test_a_retried_firing_is_hinted_at_its_retry_instant(harness: Harness) -> None:
    """A capped job's firing waits for a slot (buffered), runs, fails and is queued for
    a retry: the wake-up hint names its retry instant, as for any queued firing."""
    h = harness
    h.store.create_job(
        spec("buf", task="buf", overlap="buffer_all", visibility_timeout=3600 * SEC),
        first_fire_at=None,
    )
    t = h.now()
    a, b = _api(h).add_firings("default", "buf", [t, t + SEC], note="x").inserted
    h.advance(SEC)
    (first,) = h.store.claim("w", tasks=["buf"], limit=5)  # b waits: the job is at its cap
    assert first.firing.id == a.id
    assert h.store.complete([_completion(h, a.id, first.claim_token)]) == [True]
    (second,) = h.store.claim("w", tasks=["buf"], limit=5)
    assert second.firing.id == b.id
    before = h.store.get_firing(b.id)
    retry = _completion(h, b.id, second.claim_token, ok=False, retry_in=10 * SEC)
    assert h.store.complete([retry]) == [True]
    _moved(before, h.store.get_firing(b.id), E.RETRY)
    assert h.store.next_due_at() == h.now() + 10 * SEC


def test_terminate_other_revokes_the_running_firing(harness: Harness) -> None:
    h = harness
    h.store.create_job(
        spec("term", task="term", overlap="terminate_other", visibility_timeout=3600 * SEC),
        first_fire_at=None,
    )
    (old,) = _api(h).add_firings("default", "term", [h.now()], note="x").inserted
    (claim,) = h.store.claim("w1", tasks=["term"], limit=1)
    (new,) = _api(h).add_firings("default", "term", [h.now() + SEC], note="x").inserted
    h.advance(SEC)
    before = h.store.get_firing(old.id)
    (taken,) = h.store.claim("w2", tasks=["term"], limit=1)
    assert taken.firing.id == new.id
    _moved(before, h.store.get_firing(old.id), E.CANCEL)
    assert h.store.complete([_completion(h, old.id, claim.claim_token)]) == [False]


def test_a_requeued_claims_old_token_is_dead(harness: Harness) -> None:
    h = harness
    held = _running(h, "zombie")
    before = held.get(h)
    h.advance(31 * SEC)
    h.store.requeue_expired()
    _moved(before, held.get(h), E.LEASE_EXPIRED)
    (fresh,) = h.store.claim("w2", tasks=["zombie"], limit=1)
    assert fresh.firing.attempt == 2 and fresh.claim_token != held.token
    running = held.get(h)
    for stale in (
        _completion(h, held.id, held.token),
        _completion(h, held.id, held.token, ok=False),
        _completion(h, held.id, held.token, ok=False, retry_in=SEC),
        _completion(h, held.id, held.token, ok=False, cancelled=True),
    ):
        assert h.store.complete([stale]) == [False]
    assert h.store.heartbeat("w", [(held.id, held.token)]) == {held.id}
    assert held.get(h) == running
    assert h.store.complete([_completion(h, held.id, fresh.claim_token)]) == [True]


# Table entries that only these scenarios drive (the matrix drives the rest).
SCENARIOS: dict[str, set[tuple[FiringState, FiringEvent]]] = {
    "test_every_firing_is_born_queued": {(S.SCHEDULED, E.ENQUEUE)},
    "test_overlap_policy_skips_due_firings_beyond_the_cap": {(S.QUEUED, E.SKIP)},
    "test_an_operators_skip_of_planned_queued_held_and_running_firings": {
        (S.SCHEDULED, E.SKIP),
        (S.QUEUED, E.SKIP),
        (S.CLAIMED, E.SKIP),
    },
    "test_start_deadline_misses_queued_firings_never_running_ones": {(S.QUEUED, E.MISS)},
    "test_the_last_attempt_fails_to_dead_by_result_or_by_lease": {(S.RUNNING, E.FAIL)},
    "test_cancel_grace_expiry_revokes_the_claim": {(S.RUNNING, E.CANCEL)},
    "test_terminate_other_revokes_the_running_firing": {(S.RUNNING, E.CANCEL)},
    "test_a_requeued_claims_old_token_is_dead": {(S.RUNNING, E.LEASE_EXPIRED)},
}


def test_the_table_is_what_this_suite_drives() -> None:
    """Every table entry is driven through the stores, by the matrix or a scenario; every
    state the table names can be built (a new state needs a builder here)."""
    matrix = {pair for pair in MATRIX if pair in TRANSITIONS}
    scenarios = set().union(*SCENARIOS.values())
    assert scenarios <= set(TRANSITIONS), scenarios - set(TRANSITIONS)
    assert all(callable(globals().get(name)) for name in SCENARIOS)
    assert matrix | scenarios == set(TRANSITIONS), set(TRANSITIONS) - matrix - scenarios
    named = {s for s, _ in TRANSITIONS} | set(TRANSITIONS.values())
    assert named - set(BUILDERS) == {S.SCHEDULED}  # the planned occurrence: not a row


# -- races: two store handles, two threads --------------------------------------------------
# Each race runs its two orders one after the other (so both outcomes are checked on
# every store), then ROUNDS times in two threads released at once (atomicity under real
# concurrency: whichever wins, the answers must agree with the end state).
ROUNDS = 20
ORDERS = ["first-then-second", "second-then-first"] + ["race"] * ROUNDS


def _race(order: str, *steps: Callable[[], Any]) -> list[Any]:
    """The steps' results, in step order: run in ``order``, or in threads at once."""
    if order != "race":
        ranks = list(range(len(steps)))
        if order == "second-then-first":
            ranks.reverse()
        results = {i: steps[i]() for i in ranks}
        return [results[i] for i in range(len(steps))]
    barrier = threading.Barrier(len(steps))
    results: list[Any] = [None] * len(steps)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait(timeout=30)
        try:
            results[i] = steps[i]()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(steps))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a racer hung"
    assert not errors, errors
    return results


def test_race_cancel_against_completion(harness: Harness) -> None:
    """A worker reports success while an operator cancels and the reaper enforces the
    cancel grace: exactly one of them wins, and every answer agrees with the end state."""
    h = harness
    canceller, worker = h.open_another(), h.open_another()
    for i, order in enumerate(ORDERS):
        held = _running(h, f"cvc-{i}", cancel_grace=SEC)
        before = held.get(h)
        done = _completion(h, held.id, held.token)

        def cancel(store: Store = canceller, fid: FiringId = held.id) -> tuple[str, int]:
            outcome = store.cancel_firing(fid).outcome
            h.advance(2 * SEC)  # past the grace: the reaper revokes a still-running claim
            return outcome, store.requeue_expired()

        def complete(store: Store = worker, done: Completion = done) -> bool:
            return store.complete([done])[0]

        (outcome, revoked), accepted = _race(order, cancel, complete)
        if order != "race":  # the first one wins
            first = order == "first-then-second"
            expected = ("cancel_requested", 1, False) if first else ("already_final", 0, True)
            assert (outcome, revoked, accepted) == expected
        after = held.get(h)
        assert after.state in TERMINAL_STATES
        assert accepted != bool(revoked), (outcome, revoked, accepted, after)
        assert (after.state is S.SUCCEEDED) == accepted
        assert (after.state is S.CANCELLED) == bool(revoked)
        _moved(before, after, E.SUCCEED if accepted else E.CANCEL)
        if outcome == "cancelled":
            assert not accepted  # the firing was not running: no result may be recorded
        if outcome == "already_final":
            assert accepted  # the completion came first
        if outcome == "cancel_requested":
            assert after.cancel_requested_at is not None


def test_race_reaper_against_heartbeat(harness: Harness) -> None:
    """A worker renews its claim just as the lease runs out and the reaper runs: a
    heartbeat that renewed the lease is never requeued; a requeued firing's old token can
    neither renew nor complete."""
    h = harness
    beater, reaper = h.open_another(), h.open_another()
    for i, order in enumerate(ORDERS):
        held = _running(h, f"rvh-{i}")
        before = held.get(h)
        h.advance(29 * SEC)  # one second of lease left

        def beat(store: Store = beater, held: Held = held) -> set[FiringId]:
            return store.heartbeat("w", [(held.id, held.token)])

        def reap(store: Store = reaper) -> int:
            h.advance(2 * SEC)  # the lease ends unless the heartbeat renewed it
            return store.requeue_expired()

        lost, _ = _race(order, beat, reap)
        if order != "race":  # the first one wins
            assert lost == (set() if order == "first-then-second" else {held.id})
        after = held.get(h)
        if lost:
            _moved(before, after, E.LEASE_EXPIRED)  # the reaper came first
            assert h.store.heartbeat("w", [(held.id, held.token)]) == {held.id}
            assert h.store.complete([_completion(h, held.id, held.token)]) == [False]
            assert held.get(h) == after
        else:
            assert after.state is S.RUNNING and after.attempt == before.attempt
            assert after.lease_until is not None and after.lease_until > h.now()
            h.store.requeue_expired()  # the renewed lease has not run out
            assert held.get(h) == after
            assert h.store.complete([_completion(h, held.id, held.token)]) == [True]
