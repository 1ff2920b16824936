"""The dispatcher enqueues nothing on a day the job's calendar excludes, on every store
(memory, SQLite, PostgreSQL), its clock moved only by the test."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cronwheel.dispatch.dispatcher import Dispatcher
from cronwheel.domain.jobs import first_fire_at
from cronwheel.domain.models import JobSpec
from cronwheel.domain.schedules import cron
from tests.contract.conftest import Harness

S = timedelta(seconds=1)


class StoreClock:
    """The harness's store clock as the dispatcher's clock (FakeClock or the frozen
    PostgreSQL server time): it moves only when the test advances it."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness

    def now(self) -> datetime:
        return self.harness.now()

    def monotonic(self) -> float:
        return self.now().timestamp()


def _move_to(h: Harness, target: datetime) -> None:
    h.advance(target - h.now())
    assert h.now() == target


def test_no_firing_on_an_excluded_day(harness: Harness) -> None:
    # the 5th to the 7th of January of a coming year: Epiphany (6 January) is a public
    # holiday in Bavaria, not in Berlin
    year = harness.now().year + 1
    _move_to(harness, datetime(year, 1, 4, 12, tzinfo=UTC))
    store = harness.store
    jobs = {}
    for name, calendar in (("bavaria", "DE-BY"), ("berlin", "DE-BE")):
        schedule = cron("0 9 * * *", tz="Europe/Berlin", calendar=calendar)
        spec = JobSpec(name=name, task="t", schedule=schedule)
        jobs[name] = store.create_job(spec, first_fire_at=first_fire_at(schedule, harness.now()))
    assert jobs["bavaria"].next_fire_at == datetime(year, 1, 5, 8, tzinfo=UTC)
    for day in (5, 6, 7):
        _move_to(harness, datetime(year, 1, day, 8, tzinfo=UTC) - 2 * S)
        # one leader per day (the same holder): its timing wheel never spans a day
        dispatcher = Dispatcher(store, StoreClock(harness), holder="leader")
        for _ in range(4):
            dispatcher.step()
            harness.advance(S)
    fired = {
        name: [f.scheduled_for.day for f in store.list_firings(job_id=job.id)]
        for name, job in jobs.items()
    }
    assert sorted(fired["bavaria"]) == [5, 7]
    assert sorted(fired["berlin"]) == [5, 6, 7]
    got = store.get_job_by_id(jobs["bavaria"].id)
    assert got.next_fire_at == datetime(year, 1, 8, 8, tzinfo=UTC)
