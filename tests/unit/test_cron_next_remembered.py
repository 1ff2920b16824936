"""A cron schedule remembers its latest search (cron_schedule._next_any_day): whatever
the order of the questions, across DST transitions and a change of policies, every
answer is the one a search from scratch gives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronwheel.domain import cron_schedule
from cronwheel.domain.cron_schedule import CronSchedule
from cronwheel.domain.transitions import StepBudget
from cronwheel.domain.tz import next_instant

START = datetime(2026, 3, 1, tzinfo=UTC)  # the spring and autumn transitions of 2026 ahead
EXPRS = ["30 2 * * *", "*/7 1-3 * * *", "0 */2 * * *", "15 9 * * 1-5", "* 2 * * 0"]
ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "UTC"]


def _fresh(schedule: CronSchedule, t: datetime) -> object:
    return next_instant(
        schedule.expr_obj.next_wall,
        schedule.zone,
        schedule.gap,
        schedule.overlap,
        t,
        budget=StepBudget(),
    )


@settings(max_examples=150, deadline=None)
@given(
    expr=st.sampled_from(EXPRS),
    tz=st.sampled_from(ZONES),
    overlap=st.sampled_from([None, "once", "twice"]),
    minutes=st.lists(st.integers(0, 60 * 24 * 300), min_size=1, max_size=25),
)
def test_every_answer_is_a_search_from_scratch(
    expr: str, tz: str, overlap: str | None, minutes: list[int]
) -> None:
    schedule = CronSchedule(expr=expr, tz=tz, dst_overlap=overlap)  # type: ignore[arg-type]
    for m in minutes:
        # each instant asked, and the one just before its answer (the remembered range's end)
        t = START + timedelta(minutes=m, seconds=m % 61)
        found = schedule.next_after_with_note(t)
        assert found == _fresh(schedule, t)
        if found is not None:
            edge = found.utc - timedelta(microseconds=1)
            assert schedule.next_after_with_note(edge) == found
            assert schedule.next_after_with_note(found.utc) == _fresh(schedule, found.utc)


def test_a_question_before_the_remembered_search_is_searched_again() -> None:
    schedule = CronSchedule(expr="0 12 * * *", tz="Europe/Berlin")
    late = schedule.next_after(datetime(2026, 6, 10, 13, tzinfo=UTC))
    early = schedule.next_after(datetime(2026, 6, 1, 9, tzinfo=UTC))
    assert late == datetime(2026, 6, 11, 10, tzinfo=UTC)
    assert early == datetime(2026, 6, 1, 10, tzinfo=UTC)


def test_the_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cron_schedule, "_LAST_NEXT_MAX", 50)
    monkeypatch.setattr(cron_schedule, "_LAST_NEXT", {})
    for i in range(120):
        schedule = CronSchedule(expr=f"{i % 60} {i // 60} * * *", tz="UTC")
        after = START - timedelta(seconds=1)
        assert schedule.next_after(after) == START + timedelta(hours=i // 60, minutes=i % 60)
        assert len(cron_schedule._LAST_NEXT) <= 50
