"""The timing wheel: never early, at most one tick late, each item exactly once."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from cronwheel.dispatch.wheel import TimingWheel

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TICK = timedelta(milliseconds=10)


def wheel() -> TimingWheel[str, str]:
    return TimingWheel(tick=TICK, now=T0, slots=8, levels=3)


def test_items_expire_in_deadline_order_and_not_before() -> None:
    w = wheel()
    w.insert("b", T0 + timedelta(milliseconds=55), "b")
    w.insert("a", T0 + timedelta(milliseconds=25), "a")
    assert w.advance(T0 + timedelta(milliseconds=24)) == []
    assert [v for _, v in w.advance(T0 + timedelta(milliseconds=30))] == ["a"]
    assert [v for _, v in w.advance(T0 + timedelta(seconds=1))] == ["b"]
    assert len(w) == 0


def test_far_items_cascade_down_through_levels_and_overflow() -> None:
    w = wheel()  # level spans: 8 ticks, 64 ticks, 512 ticks; beyond: overflow
    deadlines = [timedelta(milliseconds=m) for m in (70, 700, 4_000, 60_000)]
    for i, d in enumerate(deadlines):
        w.insert(str(i), T0 + d, str(i))
    seen: list[tuple[str, datetime]] = []
    now = T0
    while len(seen) < 4:
        now += TICK
        seen += [(v, now) for _, v in w.advance(now)]
    for (v, when), d in zip(seen, deadlines, strict=True):
        assert T0 + d <= when < T0 + d + TICK, v


def test_insert_replaces_and_remove_cancels() -> None:
    w = wheel()
    w.insert("k", T0 + timedelta(seconds=5), "old")
    w.insert("k", T0 + timedelta(milliseconds=20), "new")
    assert len(w) == 1 and w.deadline_of("k") == T0 + timedelta(milliseconds=20)
    assert [v for _, v in w.advance(T0 + timedelta(seconds=10))] == ["new"]
    w.insert("x", T0 + timedelta(seconds=11), "x")
    assert w.remove("x") == "x" and w.remove("x") is None
    assert w.advance(T0 + timedelta(seconds=20)) == []


def test_past_deadlines_expire_on_the_next_advance() -> None:
    w = wheel()
    w.advance(T0 + timedelta(seconds=3))
    w.insert("late", T0, "late")
    assert [v for _, v in w.advance(T0 + timedelta(seconds=3))] == ["late"]


def test_next_expiry_is_a_lower_bound() -> None:
    w = wheel()
    assert w.next_expiry() is None
    w.insert("a", T0 + timedelta(milliseconds=35), "a")
    hint = w.next_expiry()
    assert hint is not None and hint <= T0 + timedelta(milliseconds=40)
    w2 = wheel()
    w2.insert("far", T0 + timedelta(seconds=3), "far")
    hint = w2.next_expiry()
    assert hint is not None and hint <= T0 + timedelta(seconds=3)


@settings(max_examples=200, deadline=None)
@given(
    offsets=st.lists(st.integers(min_value=0, max_value=20_000), min_size=1, max_size=40),
    steps=st.lists(st.integers(min_value=1, max_value=3_000), min_size=1, max_size=60),
)
def test_every_item_expires_exactly_once_never_early_at_most_a_tick_late(
    offsets: list[int], steps: list[int]
) -> None:
    w = wheel()
    for i, ms in enumerate(offsets):
        w.insert(i, T0 + timedelta(milliseconds=ms), i)  # type: ignore[arg-type]
    now = T0
    expired: dict[int, datetime] = {}
    steps_iter = itertools.cycle(steps)
    while len(expired) < len(offsets):
        prev = now
        now += timedelta(milliseconds=next(steps_iter))
        for deadline, v in w.advance(now):
            assert v not in expired
            assert deadline <= now
            # not held back: it would have expired at the previous advance otherwise
            assert deadline > prev - TICK
            expired[v] = now  # type: ignore[index]
    assert len(w) == 0
