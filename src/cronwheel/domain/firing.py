"""The firing state machine.

A *firing* is one occurrence of a job: ``(job_id, scheduled_for)``, unique. It is
the unit of tracking, cancellation and idempotency. Every state change in a store
is a compare-and-swap on ``(state, claim_token)`` that follows this table; the
same table is repeated as comments in the store schemas.

::

    SCHEDULED ─enqueue─▶ QUEUED ─claim─▶ CLAIMED ─start─▶ RUNNING ─succeed─▶ SUCCEEDED
        │                  │ ▲ ▲            │ │               │ ├──retry──▶ QUEUED (backoff)
        │                  │ │ └lease_expired┘ │               │ └──fail───▶ DEAD (no attempts left)
        │                  │ └──lease_expired (not cancel-requested)──┘
        │                  │ └──────redrive──────────────────────────────── DEAD
        └──────cancel──────┴──────cancel────┴──▶ CANCELLED ◀── cancel deadline / cooperative
                           ├──skip──▶ SKIPPED      stop / lease expired while cancel-requested
                           └──miss──▶ MISSED   (start deadline or catch-up window passed)

CLAIMED is a firing a worker holds but has not started (prefetched, claimed early for
a crowd, or ahead of a free slot). It becomes RUNNING by a compare-and-swap at the
moment its handler is about to be called; a cancel before that wins, and the handler
never starts. A claim whose firings are due and have free slots claims and starts them
in one transaction (both steps, one commit).

``FAILED`` is not a resting state: an attempt that fails either goes back to
QUEUED (retries left) or to DEAD in the same transaction, so a crash can never
leave a firing parked in "failed, retry pending".
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
    (S.SCHEDULED, E.CANCEL): S.CANCELLED,
    (S.SCHEDULED, E.SKIP): S.SKIPPED,
    (S.SCHEDULED, E.MISS): S.MISSED,
    (S.QUEUED, E.CLAIM): S.CLAIMED,
    (S.CLAIMED, E.START): S.RUNNING,
    (S.CLAIMED, E.CANCEL): S.CANCELLED,
    (S.CLAIMED, E.LEASE_EXPIRED): S.QUEUED,
    (S.QUEUED, E.CANCEL): S.CANCELLED,
    (S.QUEUED, E.SKIP): S.SKIPPED,
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
    instant = instant.astimezone(UTC)
    if instant.microsecond:
        return instant.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def idempotency_key(job_id: int, scheduled_for: datetime) -> str:
    """``<job_id>:<scheduled_for RFC 3339 UTC>`` — stable across retries and redeliveries."""
    return f"{job_id}:{format_instant(scheduled_for)}"
