"""A catch-up never displaces an on-time firing: coalesce_catchups and due_room (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cronwheel.domain.overlap import OverlapPolicy, due_room
from cronwheel.domain.policies import (
    COALESCED,
    FiringPlan,
    MisfirePolicy,
    MissedRange,
    coalesce_catchups,
    plan_firings,
)
from cronwheel.domain.schedules import every

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
M = timedelta(minutes=1)
S = timedelta(seconds=1)


def _plan(policy: MisfirePolicy, now: datetime) -> FiringPlan:
    return plan_firings(
        every("1m", anchor=T0).next_after,
        T0,
        now=now,
        horizon=now + S / 2,
        policy=policy,
        misfire_grace=10 * S,
        catchup_window=timedelta(hours=1),
        max_catchup=100,
    )


@pytest.mark.parametrize(
    ("policy", "coalesced", "missed_before"),
    [
        (MisfirePolicy.FIRE_ONCE, [T0 + 3 * M], 3),
        (MisfirePolicy.FIRE_ALL, [T0, T0 + M, T0 + 2 * M, T0 + 3 * M], 0),
    ],
)
def test_the_catch_ups_that_do_not_fit_are_coalesced_into_the_on_time_firing(
    policy: MisfirePolicy, coalesced: list[datetime], missed_before: int
) -> None:
    now = T0 + 4 * M - S / 4  # 12:04 is within the lead: it falls due with the catch-up
    before = _plan(policy, now)
    assert before.fire[-1] == T0 + 4 * M and len(before.fire) == len(coalesced) + 1
    after = coalesce_catchups(before, late_cutoff=now - 10 * S, room=1)
    assert after.fire == [T0 + 4 * M]
    assert after.next_cursor == before.next_cursor
    assert sum(m.count for m in after.missed[:-1]) == missed_before
    record = after.missed[-1]
    assert (record.first, record.last, record.count) == (
        coalesced[0],
        coalesced[-1],
        len(coalesced),
    )
    assert record.reason == f"{COALESCED}the on-time firing at 2026-06-01T12:04:00Z"
    assert "coalesced the catch-up of 2026-06-01T12:0" in after.notes[T0 + 4 * M]


def test_nothing_changes_with_room_without_catch_ups_or_without_an_on_time_firing() -> None:
    catch_up, on_time = T0, T0 + M
    cutoff = T0 + 30 * S
    both = FiringPlan(fire=[catch_up, on_time], next_cursor=T0 + 2 * M)
    assert coalesce_catchups(both, late_cutoff=cutoff, room=2) == both  # room for both
    assert coalesce_catchups(both, late_cutoff=cutoff, room=None) == both  # no cap
    alone = FiringPlan(fire=[catch_up], next_cursor=T0 + 2 * M)  # on time is not due yet
    assert coalesce_catchups(alone, late_cutoff=cutoff, room=1) == alone
    skip = _plan(MisfirePolicy.SKIP, T0 + 4 * M - S / 4)
    assert coalesce_catchups(skip, late_cutoff=T0 + 4 * M - 10 * S, room=1) == skip


def test_only_the_oldest_catch_ups_make_room() -> None:
    fire = [T0, T0 + M, T0 + 2 * M, T0 + 3 * M]
    plan = FiringPlan(fire=fire, missed=[MissedRange(first=T0 - M, last=T0 - M, count=1)])
    after = coalesce_catchups(plan, late_cutoff=T0 + 150 * S, room=3)  # 1 on time, 2 kept
    assert after.fire == [T0 + M, T0 + 2 * M, T0 + 3 * M]
    assert [(m.first, m.count) for m in after.missed] == [(T0 - M, 1), (T0, 1)]


@pytest.mark.parametrize(
    ("policy", "cap", "room"),
    [
        (OverlapPolicy.SKIP, 1, 1),
        (OverlapPolicy.SKIP, 3, 3),
        (OverlapPolicy.BUFFER_ONE, 1, 2),
        (OverlapPolicy.BUFFER_ALL, 2, 12),
        (OverlapPolicy.ALLOW, 1, None),
        (OverlapPolicy.CANCEL_OTHER, 1, None),  # the newest wins: the on-time one
        (OverlapPolicy.TERMINATE_OTHER, 1, None),
        (OverlapPolicy.SKIP, None, None),  # a one-shot: no cap
    ],
)
def test_due_room(policy: OverlapPolicy, cap: int | None, room: int | None) -> None:
    assert due_room(policy, max_concurrency=cap, max_buffer=10) == room


def test_an_on_time_firing_late_within_the_grace_is_not_displaced_either() -> None:
    now = T0 + 4 * M + 5 * S  # 12:04 is 5 s late (grace 10 s): it fires late, on time
    before = _plan(MisfirePolicy.FIRE_ONCE, now)
    assert before.fire == [T0 + 3 * M, T0 + 4 * M]
    after = coalesce_catchups(before, late_cutoff=now - 10 * S, room=1)
    assert after.fire == [T0 + 4 * M]
    assert (after.missed[-1].first, after.missed[-1].count) == (T0 + 3 * M, 1)
