"""The firing state machine.

A *firing* is one occurrence of a job: ``(job_id, scheduled_for)``, unique. It is
the unit of tracking, cancellation and idempotency. Every state change in a store
is a compare-and-swap on ``(state, claim_token)`` that follows ``TRANSITIONS``.
The table is what the stores do, checked both ways on every store by
``tests/contract/test_transitions.py``: each change a store makes is an entry, and
each entry is made by a store.

::

    (planned) ─enqueue─▶ QUEUED ─claim─▶ CLAIMED ─start─▶ RUNNING ─succeed─▶ SUCCEEDED
                           │ ▲ ▲            │ │               │ ├──retry──▶ QUEUED (backoff)
                           │ │ └lease_expired┘ │               │ └──fail───▶ DEAD (no attempts left)
                           │ └──lease_expired (not cancel-requested)──┘
                           │ └──────redrive──────────────────────────────── DEAD
                           ├──cancel──▶ CANCELLED ◀──cancel── CLAIMED, RUNNING
                           ├──skip────▶ SKIPPED   (overlap policy, at claim time;
                           │                        an operator's skip, also CLAIMED)
                           └──miss────▶ MISSED    (start deadline passed)

- ``enqueue``: every firing is born QUEUED (a leader's enqueue, ``enqueue_now``, a
  trigger or backfill), but for an occurrence an operator skips ahead (born SKIPPED,
  see ``skip``); SCHEDULED names the planned occurrence before its row exists.
  Occurrences that never become firings (missed while no leader ran, skipped by the
  misfire policy, catch-ups coalesced into an on-time firing) are recorded as job
  events, not as firings.
- ``skip``: the overlap policy skips a QUEUED firing at claim time; an operator's skip
  (``jobs skip``) makes an occurrence SKIPPED before its row exists (SCHEDULED: the
  leader's later insert of that instant is a duplicate), or a QUEUED or CLAIMED one at
  once (a held one's start then fails), with ``reason`` "skipped by <who>: <why>".
- ``fail``: an attempt that fails with no retry left, or whose claim lease expires on
  the last attempt (the reaper), ends DEAD. ``FAILED`` is not a resting state: a
  failure goes back to QUEUED (retries left) or to DEAD in the same transaction, so a
  crash can never leave a firing parked in "failed, retry pending".
- ``claim``/``start``: a claim holds a firing (CLAIMED: prefetched, claimed early for
  a crowd, or ahead of a free slot); it becomes RUNNING by a compare-and-swap on its
  claim token at the moment its handler is about to be called. A claim whose firings
  are due and have free slots takes both steps in one transaction. A held firing whose
  lease expires goes back to QUEUED as it was (it never ran: its attempt is given back).
- ``cancel``: a QUEUED or CLAIMED firing is cancelled at once (a held one's start then
  fails, so its handler never starts). Cancelling a RUNNING firing only
  requests it (``cancel_requested_at``; the state does not change); it becomes
  CANCELLED when its handler stops on the request, when the job's cancel grace passes
  (the reaper revokes the claim), or when a newer firing's ``terminate_other`` overlap
  policy revokes it, or when its lease expires while the request stands (its worker
  died: it is never run again). A revoked claim's late result is rejected.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum

from cronwheel.errors import InvalidTransitionError


class FiringState(StrEnum):
    SCHEDULED = "scheduled"
    QUEUED = "queued"
    CLAIMED = "claimed"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    MISSED = "missed"


class FiringEvent(StrEnum):
    ENQUEUE = "enqueue"
    CLAIM = "claim"
    START = "start"
    SUCCEED = "succeed"
    RETRY = "retry"
    FAIL = "fail"
    LEASE_EXPIRED = "lease_expired"
    CANCEL = "cancel"
    SKIP = "skip"
    MISS = "miss"
    REDRIVE = "redrive"


S, E = FiringState, FiringEvent

TRANSITIONS: dict[tuple[FiringState, FiringEvent], FiringState] = {
    (S.SCHEDULED, E.ENQUEUE): S.QUEUED,
    (S.QUEUED, E.CLAIM): S.CLAIMED,
    (S.CLAIMED, E.START): S.RUNNING,
    (S.CLAIMED, E.CANCEL): S.CANCELLED,
    (S.CLAIMED, E.LEASE_EXPIRED): S.QUEUED,
    (S.QUEUED, E.CANCEL): S.CANCELLED,
    (S.QUEUED, E.SKIP): S.SKIPPED,
    (S.SCHEDULED, E.SKIP): S.SKIPPED,
    (S.CLAIMED, E.SKIP): S.SKIPPED,
    (S.QUEUED, E.MISS): S.MISSED,
    (S.RUNNING, E.SUCCEED): S.SUCCEEDED,
    (S.RUNNING, E.RETRY): S.QUEUED,
    (S.RUNNING, E.FAIL): S.DEAD,
    (S.RUNNING, E.LEASE_EXPIRED): S.QUEUED,
    (S.RUNNING, E.CANCEL): S.CANCELLED,
    (S.DEAD, E.REDRIVE): S.QUEUED,
}

TERMINAL_STATES: frozenset[FiringState] = frozenset(
    {S.SUCCEEDED, S.DEAD, S.CANCELLED, S.SKIPPED, S.MISSED}
)
ACTIVE_STATES: frozenset[FiringState] = frozenset({S.SCHEDULED, S.QUEUED, S.CLAIMED, S.RUNNING})

del S, E


def transition(state: FiringState, event: FiringEvent) -> FiringState:
    """The state after ``event``; raises InvalidTransitionError when the table forbids it."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise InvalidTransitionError(
            f"a {state.value} firing cannot {event.value}", field="state"
        ) from None


def format_instant(instant: datetime) -> str:
    """RFC 3339 in UTC with a ``Z``; microseconds only when there are any."""
    # isoformat: microseconds only when there are any, as wanted, and ~4x faster
    # than strftime (the API formats several instants per answer)
    return instant.astimezone(UTC).replace(tzinfo=None).isoformat() + "Z"


def idempotency_key(job_id: int, scheduled_for: datetime) -> str:
    """``<job_id>:<scheduled_for RFC 3339 UTC>`` — stable across retries and redeliveries."""
    return f"{job_id}:{format_instant(scheduled_for)}"
