"""The dispatcher enqueues nothing on a day the job's calendar excludes, on every store
(memory, SQLite, PostgreSQL), its clock moved only by the test."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from cronwheel.dispatch.dispatcher import Dispatcher
from cronwheel.domain.calendars import CalendarRules
from cronwheel.domain.jobs import bind_calendar, first_fire_at
from cronwheel.domain.models import JobSpec
from cronwheel.domain.schedules import cron
from cronwheel.errors import ConflictError, InvalidScheduleError, NotFoundError, ValidationError
from cronwheel.store.calendar_port import calendar_rules_of
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


# -- stored calendars -------------------------------------------------------------------
def _office_job(h: Harness, name: str, namespace: str = "default", expr: str = "0 9 * * *"):
    spec = bind_calendar(
        JobSpec(
            name=name,
            task="t",
            namespace=namespace,
            schedule=cron(expr, tz="Europe/Berlin", calendar="office"),
        ),
        calendar_rules_of(h.store),
    )
    return h.store.create_job(spec, first_fire_at=first_fire_at(spec.schedule, h.now()))


def _day(t: datetime) -> date:
    return t.astimezone(ZoneInfo("Europe/Berlin")).date()


def test_stored_calendars_round_trip_per_namespace(harness: Harness) -> None:
    store = harness.store
    rules = CalendarRules.from_dict(
        {
            "holidays": "DE-BY",
            "exclude": ["2030-12-24", "2030-12-31"],
            "include": ["2030-12-26"],
            "weekdays": "mon-fri",
        }
    )
    change = store.set_calendar("team-a", "office", rules)
    assert change.replanned == ()
    assert change.calendar.rules == rules and change.calendar.updated_at == harness.now()
    got = store.get_calendar("team-a", "office")
    assert got is not None and got.rules == rules and got.rules.to_dict() == rules.to_dict()
    assert store.get_calendar("team-b", "office") is None
    assert [c.name for c in store.list_calendars("team-a")] == ["office"]
    assert store.list_calendars("team-b") == []
    with pytest.raises(InvalidScheduleError, match="not a calendar name"):
        store.set_calendar("team-a", "DE-BY", rules)
    with pytest.raises(NotFoundError, match="no calendar named 'nope'"):
        store.delete_calendar("team-a", "nope")
    store.delete_calendar("team-a", "office")
    assert store.get_calendar("team-a", "office") is None


def test_a_job_names_a_stored_calendar_and_follows_its_changes(harness: Harness) -> None:
    store = harness.store
    with pytest.raises(ValidationError, match="no calendar named 'office'") as caught:
        _office_job(harness, "standup")
    assert caught.value.field == "schedule.calendar"
    store.set_calendar("default", "office", CalendarRules())
    job = _office_job(harness, "standup")
    with pytest.raises(ValidationError, match="in namespace 'team-b'"):
        _office_job(harness, "elsewhere", namespace="team-b")  # calendars are per namespace
    first = job.next_fire_at
    assert first is not None
    version = store.jobs_version()
    # exclude the day of its next instant: the cursor moves to the day after
    change = store.set_calendar("default", "office", CalendarRules(exclude=(_day(first),)))
    assert change.replanned == ("standup",)
    moved = store.get_job("default", "standup")
    assert moved.next_fire_at == first + timedelta(days=1)
    assert moved.spec.schedule.calendar_def == CalendarRules(exclude=(_day(first),))
    assert moved.spec.schedule.excluded_by_calendar(first) == "calendar office: an excluded date"
    assert store.jobs_version() > version
    # include it again (an empty calendar): back to the first instant
    store.set_calendar("default", "office", CalendarRules())
    assert store.get_job("default", "standup").next_fire_at == first
    # the same rules again: nothing to re-plan
    assert store.set_calendar("default", "office", CalendarRules()).replanned == ()
    # deleting a calendar in use is refused, naming the job
    with pytest.raises(ConflictError, match="named by 1 job\\(s\\): 'standup'") as refused:
        store.delete_calendar("default", "office")
    assert refused.value.code == "calendar_in_use"
    assert store.calendar_jobs("default", "office") == ["standup"]
    store.delete_job("default", "standup")
    store.delete_calendar("default", "office")


def test_a_change_that_leaves_a_job_without_firings_is_refused(harness: Harness) -> None:
    store = harness.store
    store.set_calendar("default", "office", CalendarRules())
    job = _office_job(harness, "newyear", expr="0 9 1 1 *")
    # a yearly job on 1 January: Germany's holidays exclude every one of its days
    with pytest.raises(InvalidScheduleError, match="job 'newyear'"):
        store.set_calendar("default", "office", CalendarRules(holidays="DE"))
    got = store.get_calendar("default", "office")
    assert got is not None and got.rules == CalendarRules()  # nothing written
    assert store.get_job("default", "newyear").next_fire_at == job.next_fire_at


def test_the_dispatcher_follows_a_stored_calendar(harness: Harness) -> None:
    # Bavaria's holidays, but 6 January included; 7 January excluded
    year = harness.now().year + 1
    store = harness.store
    rules = CalendarRules(
        holidays="DE-BY", include=(date(year, 1, 6),), exclude=(date(year, 1, 7),)
    )
    store.set_calendar("default", "office", rules)
    _move_to(harness, datetime(year, 1, 4, 12, tzinfo=UTC))
    job = _office_job(harness, "standup")
    for day in (5, 6, 7, 8):
        _move_to(harness, datetime(year, 1, day, 8, tzinfo=UTC) - 2 * S)
        dispatcher = Dispatcher(store, StoreClock(harness), holder="leader")
        for _ in range(4):
            dispatcher.step()
            harness.advance(S)
    fired = sorted(f.scheduled_for.day for f in store.list_firings(job_id=job.id))
    assert fired == [5, 6, 8]


def test_a_running_leader_takes_a_calendar_change(harness: Harness) -> None:
    # the leader holds the job (due in 2 s) when the calendar changes a later day: the
    # job's cursor stays, its schedule does not; the next cursor follows the new rules
    year = harness.now().year + 1
    store = harness.store
    store.set_calendar("default", "office", CalendarRules())
    _move_to(harness, datetime(year, 3, 2, 12, tzinfo=UTC))
    job = _office_job(harness, "standup")
    assert job.next_fire_at == datetime(year, 3, 3, 8, tzinfo=UTC)
    _move_to(harness, datetime(year, 3, 3, 8, tzinfo=UTC) - 2 * S)
    dispatcher = Dispatcher(store, StoreClock(harness), holder="leader")
    dispatcher.step()
    change = store.set_calendar("default", "office", CalendarRules(exclude=(date(year, 3, 4),)))
    assert change.replanned == ("standup",)
    for _ in range(4):
        harness.advance(S)
        dispatcher.step()
    (firing,) = store.list_firings(job_id=job.id)
    assert firing.scheduled_for == datetime(year, 3, 3, 8, tzinfo=UTC)
    assert store.get_job_by_id(job.id).next_fire_at == datetime(year, 3, 5, 8, tzinfo=UTC)
