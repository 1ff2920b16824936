"""Calendars from Python: ``app.calendar`` and ``cron(..., calendar=)`` on the memory
store and a FakeClock; the dispatcher skips the excluded days and ``explain`` names why."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from cronwheel import App, Context, FakeClock, cron
from cronwheel.dispatch.dispatcher import Dispatcher
from cronwheel.domain.fates import explain
from cronwheel.errors import ValidationError
from cronwheel.worker.worker import Worker

S = timedelta(seconds=1)


def test_a_stored_calendar_includes_a_holiday_and_excludes_a_workday() -> None:
    clock = FakeClock(datetime(2027, 1, 4, 12, tzinfo=UTC))
    app = App("memory://", clock=clock)
    ran: list[datetime] = []

    @app.task(schedule=cron("0 9 * * *", tz="Europe/Berlin", calendar="office"))
    def standup(ctx: Context) -> None:
        ran.append(ctx.scheduled_for)

    @app.task(schedule=cron("0 9 * * *", tz="Europe/Berlin", calendar="DE-BY"))
    def bavaria(ctx: Context) -> None:
        ran.append(ctx.scheduled_for)

    with pytest.raises(ValidationError, match="no calendar named 'office'"):
        app.sync_jobs()  # the calendar must exist first
    # Bavaria's holidays, but Epiphany (6 January) is a working day here and the 7th is not
    change = app.calendar(
        "office", holidays="DE-BY", include=["2027-01-06"], exclude=["2027-01-07"]
    )
    assert change.replanned == ()
    app.sync_jobs()
    worker = Worker(app.store, app.registry, clock)
    for day in (5, 6, 7, 8):
        clock.set(datetime(2027, 1, day, 8, tzinfo=UTC) - 2 * S)
        # one leader per day (the same holder): its timing wheel never spans a day
        dispatcher = Dispatcher(app.store, clock, holder="leader")
        for _ in range(4):
            dispatcher.step()
            asyncio.run(worker.drain_once())
            clock.advance(S)
    jobs = {j.name: j for j in app.store.list_jobs()}
    fired = {
        name: sorted(f.scheduled_for.day for f in app.store.list_firings(job_id=job.id))
        for name, job in jobs.items()
    }
    assert fired == {"standup": [5, 6, 8], "bavaria": [5, 7, 8]}
    assert len(ran) == 6
    since, until = datetime(2027, 1, 5, tzinfo=UTC), datetime(2027, 1, 8, 12, tzinfo=UTC)
    fates = {
        name: [
            (o.instant.day if o.instant else None, o.fate, o.detail)
            for o in explain(
                app.store.get_job_by_id(job.id),
                since=since,
                until=until,
                now=clock.now(),
                firings=app.store.list_firings(job_id=job.id),
                events=app.store.job_events(job.id),
            )
        ]
        for name, job in jobs.items()
    }
    assert [(d, f) for d, f, _ in fates["standup"]] == [
        (5, "fired"),
        (6, "fired"),
        (7, "excluded_by_calendar"),
        (8, "fired"),
    ]
    assert fates["standup"][2][2] == (
        "the calendar excludes this day: calendar office: an excluded date"
    )
    assert fates["bavaria"][1][1:] == (
        "excluded_by_calendar",
        "the calendar excludes this day: Heilige Drei Könige (DE-BY)",
    )
    # a change re-plans the job naming it: from the 9th on, only weekdays
    change = app.calendar("office", weekdays="mon-fri")
    assert change.replanned == ("standup",)
    standup_job = app.store.get_job("default", "standup")
    assert standup_job.next_fire_at == datetime(2027, 1, 11, 8, tzinfo=UTC)  # Monday
