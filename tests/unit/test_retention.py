"""domain/retention.py: the decision pruning makes for one firing, over random inputs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cronwheel.domain.firing import TERMINAL_STATES, FiringState
from cronwheel.domain.retention import (
    Candidate,
    Retention,
    merge_pruned,
    prunable,
    pruned_counts,
    retention_with,
)
from cronwheel.errors import ValidationError

NOW = datetime(2026, 6, 1, tzinfo=UTC)
ages = st.integers(0, 60 * 86400).map(lambda s: timedelta(seconds=s))
policies = st.builds(
    Retention,
    keep_for=st.integers(0, 30 * 86400).map(lambda s: timedelta(seconds=s)),
    keep_last=st.integers(0, 5),
)


@given(st.sampled_from(list(FiringState)), ages, st.booleans(), st.integers(0, 10), policies)
def test_only_a_terminal_firing_past_both_halves_goes(
    state: FiringState, age: timedelta, one_shot: bool, newer: int, policy: Retention
) -> None:
    c = Candidate(state=state, finished_at=NOW - age, one_shot=one_shot, newer_same_outcome=newer)
    goes = prunable(c, policy, NOW)
    if state not in TERMINAL_STATES or age < policy.keep_for:
        assert not goes
    elif one_shot:
        assert goes  # keep_last does not hold a one-shot job's only firing
    else:
        assert goes == (newer >= policy.keep_last)


def test_unfinished_is_never_prunable_whatever_its_age() -> None:
    c = Candidate(
        state=FiringState.SUCCEEDED, finished_at=None, one_shot=True, newer_same_outcome=9
    )
    assert not prunable(c, Retention(keep_for=timedelta(0), keep_last=0), NOW)


def test_changes_and_bad_values() -> None:
    base = Retention()
    assert retention_with(base, {"keep_for": 60}).keep_for == timedelta(minutes=1)
    assert retention_with(base, {"keep_last": 0}).keep_last == 0
    for changes, field in (
        ({"keep_for": -1}, "keep_for"),
        ({"keep_for": True}, "keep_for"),
        ({"keep_last": 2.5}, "keep_last"),
        ({"other": 1}, "other"),
    ):
        with pytest.raises(ValidationError) as err:
            retention_with(base, changes)
        assert err.value.field == field


def test_pruned_summaries_add_up() -> None:
    t = NOW - timedelta(days=9)
    one = merge_pruned(None, [("succeeded", t), ("dead", t + timedelta(hours=1))])
    two = merge_pruned(one, [("succeeded", t - timedelta(hours=1))])
    assert (two.first_at, two.last_at, two.count) == (t - timedelta(hours=1), one.last_at, 3)
    assert pruned_counts(two.detail) == {"succeeded": 2, "dead": 1}
