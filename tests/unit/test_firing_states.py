from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cronwheel.domain.firing import (
    TERMINAL_STATES,
    TRANSITIONS,
    FiringEvent,
    FiringState,
    idempotency_key,
    transition,
)
from cronwheel.errors import InvalidTransitionError


def test_no_transition_leaves_a_terminal_state_except_redrive_of_dead() -> None:
    for (state, event), _ in TRANSITIONS.items():
        if state in TERMINAL_STATES:
            assert (state, event) == (FiringState.DEAD, FiringEvent.REDRIVE)


def test_every_state_but_the_planned_one_is_reached_from_queued() -> None:
    """The table is a graph from the birth of a firing (QUEUED): no state it names is
    unreachable (tests/contract/test_transitions.py drives each edge through the stores)."""
    reached = {FiringState.QUEUED}
    frontier = [FiringState.QUEUED]
    while frontier:
        state = frontier.pop()
        for (source, _), target in TRANSITIONS.items():
            if source is state and target not in reached:
                reached.add(target)
                frontier.append(target)
    named = {s for s, _ in TRANSITIONS} | set(TRANSITIONS.values())
    assert named - reached == {FiringState.SCHEDULED}
    # a planned occurrence is enqueued, or skipped ahead by an operator (jobs skip)
    planned = {e for s, e in TRANSITIONS if s is FiringState.SCHEDULED}
    assert planned == {FiringEvent.ENQUEUE, FiringEvent.SKIP}


@pytest.mark.parametrize(
    ("state", "event", "after"),
    [
        (FiringState.QUEUED, FiringEvent.CLAIM, FiringState.CLAIMED),
        (FiringState.CLAIMED, FiringEvent.START, FiringState.RUNNING),
        (FiringState.CLAIMED, FiringEvent.CANCEL, FiringState.CANCELLED),
        (FiringState.CLAIMED, FiringEvent.LEASE_EXPIRED, FiringState.QUEUED),
        (FiringState.RUNNING, FiringEvent.SUCCEED, FiringState.SUCCEEDED),
        (FiringState.RUNNING, FiringEvent.RETRY, FiringState.QUEUED),
        (FiringState.RUNNING, FiringEvent.FAIL, FiringState.DEAD),
        (FiringState.RUNNING, FiringEvent.LEASE_EXPIRED, FiringState.QUEUED),
        (FiringState.QUEUED, FiringEvent.CANCEL, FiringState.CANCELLED),
        (FiringState.RUNNING, FiringEvent.CANCEL, FiringState.CANCELLED),
        (FiringState.QUEUED, FiringEvent.SKIP, FiringState.SKIPPED),
        (FiringState.CLAIMED, FiringEvent.SKIP, FiringState.SKIPPED),
        (FiringState.SCHEDULED, FiringEvent.SKIP, FiringState.SKIPPED),
        (FiringState.QUEUED, FiringEvent.MISS, FiringState.MISSED),
        (FiringState.DEAD, FiringEvent.REDRIVE, FiringState.QUEUED),
        (FiringState.SCHEDULED, FiringEvent.ENQUEUE, FiringState.QUEUED),
    ],
)
def test_allowed_transitions(state: FiringState, event: FiringEvent, after: FiringState) -> None:
    assert transition(state, event) is after


@pytest.mark.parametrize(
    ("state", "event"),
    [
        (FiringState.SUCCEEDED, FiringEvent.CANCEL),
        (FiringState.CANCELLED, FiringEvent.CLAIM),
        (FiringState.QUEUED, FiringEvent.SUCCEED),
        (FiringState.QUEUED, FiringEvent.START),
        (FiringState.CLAIMED, FiringEvent.SUCCEED),
        (FiringState.RUNNING, FiringEvent.START),
        (FiringState.SKIPPED, FiringEvent.ENQUEUE),
        (FiringState.RUNNING, FiringEvent.SKIP),
        (FiringState.RUNNING, FiringEvent.MISS),
        # no store holds a SCHEDULED firing: a planned occurrence is enqueued or skipped
        (FiringState.SCHEDULED, FiringEvent.CANCEL),
    ],
)
def test_forbidden_transitions_raise(state: FiringState, event: FiringEvent) -> None:
    with pytest.raises(InvalidTransitionError, match=state.value):
        transition(state, event)


def test_idempotency_key_is_job_and_rfc3339_utc() -> None:
    assert idempotency_key(42, datetime(2026, 3, 29, 1, 0, tzinfo=UTC)) == "42:2026-03-29T01:00:00Z"
    assert idempotency_key(7, datetime(2026, 3, 29, 1, 0, 0, 250000, tzinfo=UTC)) == (
        "7:2026-03-29T01:00:00.250000Z"
    )
