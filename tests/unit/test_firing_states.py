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


@pytest.mark.parametrize(
    ("state", "event", "after"),
    [
        (FiringState.QUEUED, FiringEvent.CLAIM, FiringState.RUNNING),
        (FiringState.RUNNING, FiringEvent.SUCCEED, FiringState.SUCCEEDED),
        (FiringState.RUNNING, FiringEvent.RETRY, FiringState.QUEUED),
        (FiringState.RUNNING, FiringEvent.FAIL, FiringState.DEAD),
        (FiringState.RUNNING, FiringEvent.LEASE_EXPIRED, FiringState.QUEUED),
        (FiringState.QUEUED, FiringEvent.CANCEL, FiringState.CANCELLED),
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
        (FiringState.SKIPPED, FiringEvent.ENQUEUE),
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
