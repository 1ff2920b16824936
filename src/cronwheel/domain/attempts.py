"""A firing's attempts: each claim of it that counted, in order.

A claim counts as an attempt when it starts the firing's handler, or when it still
holds the firing (CLAIMED) or was cancelled while holding it; a held claim whose lease
expired gave its attempt back (the firing went back to QUEUED as it was) and is not
one. The stores record an attempt when a later one may overwrite the firing's row
(a failure, a lease that expired on a running firing) in ``firing_attempts``; the
current, last attempt is the firing row itself (no write on the success path).
:func:`attempts_of` joins the two so that each attempt appears exactly once.

A firing's lateness is its first attempt's ``started_at - scheduled_for``
(:func:`first_lateness`): a retry's later start does not make the occurrence later.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from cronwheel.domain.firing import FiringState, format_instant
from cronwheel.domain.models import Firing, FiringId


class AttemptOutcome(StrEnum):
    CLAIMED = "claimed"  # held by its worker, not started yet
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    LEASE_EXPIRED = "lease_expired"  # its worker stopped heartbeating while it ran
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """One attempt of a firing: who claimed it, when it started and finished, how it
    ended (``outcome``) and its error, if any."""

    attempt: int
    worker_id: str | None
    claimed_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    outcome: AttemptOutcome
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        def ts(v: datetime | None) -> str | None:
            return None if v is None else format_instant(v)

        return {
            "attempt": self.attempt,
            "worker_id": self.worker_id,
            "claimed_at": ts(self.claimed_at),
            "started_at": ts(self.started_at),
            "finished_at": ts(self.finished_at),
            "outcome": self.outcome.value,
            "error": self.error,
        }


# the outcome of the current attempt, read from the firing row's state
_CURRENT: dict[FiringState, AttemptOutcome] = {
    FiringState.CLAIMED: AttemptOutcome.CLAIMED,
    FiringState.RUNNING: AttemptOutcome.RUNNING,
    FiringState.SUCCEEDED: AttemptOutcome.SUCCEEDED,
    FiringState.CANCELLED: AttemptOutcome.CANCELLED,
    FiringState.DEAD: AttemptOutcome.FAILED,
}


def attempts_of(firing: Firing, recorded: Iterable[Attempt]) -> list[Attempt]:
    """The recorded attempts plus the firing's current one, derived from its row when
    no record has its number (a firing that is queued, skipped or missed has none:
    its last attempt, if any, was recorded when it went back to the queue)."""
    by_number = {a.attempt: a for a in recorded}
    outcome = _CURRENT.get(firing.state)
    if firing.attempt >= 1 and firing.attempt not in by_number and outcome is not None:
        by_number[firing.attempt] = Attempt(
            attempt=firing.attempt,
            worker_id=firing.worker_id,
            claimed_at=firing.claimed_at,
            started_at=firing.started_at,
            finished_at=firing.finished_at if outcome not in _OPEN else None,
            outcome=outcome,
            error=firing.error,
        )
    return [by_number[n] for n in sorted(by_number)]


_OPEN = frozenset({AttemptOutcome.CLAIMED, AttemptOutcome.RUNNING})


def first_lateness(firing: Firing, attempts: Iterable[Attempt]) -> timedelta | None:
    """The firing's lateness: its first started attempt's start minus scheduled_for."""
    for a in attempts:
        if a.started_at is not None:
            return a.started_at - firing.scheduled_for
    return None


def lateness_of(
    firing: Firing, attempts_of_id: Callable[[FiringId], Sequence[Attempt]]
) -> timedelta | None:
    """The firing's lateness, reading its attempts (``attempts_of_id``) only when its row
    cannot tell: a retried firing's row holds its last start, not its first."""
    if firing.attempt <= 1:
        return firing.lateness
    return first_lateness(firing, attempts_of_id(firing.id))
