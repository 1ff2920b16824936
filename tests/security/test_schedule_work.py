"""Issue 15, item 1: every schedule computation has a hard bound on work.

Work is counted, never timed: :class:`Work` counts the Python function calls a
computation makes (``sys.setprofile``), a measure independent of the step budget
that bounds it. Over random cron expressions x every zone of the tz database x DST
policies x start instants (years 1 to 9999), each computation -- the next instant,
a preview of up to 1000, a job's upcoming instants, a backfill's range, ``jobs
explain`` -- answers or raises the bounded error (ScheduleBudgetError or
NoFiringInHorizonError, a 422 naming ``schedule``) within a fixed number of calls.

Then the API on both stores: hostile schedules are refused with that 422 in
preview, create, PUT, PATCH and backfill, after a bounded number of steps, storing
nothing; the dashboard's fates of a hostile job are bounded too. And the dispatcher:
a job whose next instant cannot be computed ends alone (recorded for ``jobs
explain``), while the other jobs keep firing.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cronwheel.dispatch.dispatcher import Dispatcher, DispatcherConfig
from cronwheel.domain import cron_schedule, transitions
from cronwheel.domain.clock import FakeClock
from cronwheel.domain.fates import explain
from cronwheel.domain.models import Job, JobEvent, JobId, JobSpec
from cronwheel.domain.policies import SCHEDULE_ERROR, instants_between
from cronwheel.domain.schedules import (
    LISTING_STEPS,
    CronSchedule,
    cron,
    every,
    next_after_within,
    next_firings,
    upcoming_instants,
)
from cronwheel.domain.transitions import MAX_STEPS, StepBudget
from cronwheel.domain.tz import zone_names
from cronwheel.errors import (
    InvalidScheduleError,
    NoFiringInHorizonError,
    ScheduleBudgetError,
    ValidationError,
)
from cronwheel.store.sqlite import SqliteStore
from cronwheel.web.ids import ids_for
from tests.security.conftest import NS, Sec

ZONES = sorted(zone_names())
FIRST = datetime.min.replace(tzinfo=UTC)
LAST = datetime.max.replace(tzinfo=UTC)
BOUNDED = (ScheduleBudgetError, NoFiringInHorizonError)

# Python calls per budget step, at most: a step is a cron field jump, a segment
# between two offset changes, or one year's table of a zone's changes (built once
# per zone and year: ~180 offset probes and a bisection per change, each a handful
# of calls). Measured at most ~100 on the hostile cases below; the bound is generous
# so that it states the order of the work, not this machine's exact count.
CALLS_PER_STEP = 400
ONE_SEARCH = MAX_STEPS * CALLS_PER_STEP
ONE_LISTING = LISTING_STEPS * CALLS_PER_STEP

HOSTILE = [
    "30 2 * 3 0L",  # Europe's spring-forward Sunday: in the gap every year
    "* * 2 * 3 0L",  # every second of it
    "*/7 2 8-14 3 0",  # OR rule: every Sunday and 8-14 March
    "0 2 * 3,10 0#2",  # New York's change days
    "0 0 29 2 */7",  # 29 February on a Sunday: up to 40 years apart
    "0 0 ? 2 1#5",  # the fifth Monday of February
    "15 2 * 10 0#1",  # Lord Howe's 30-minute gap
    "0 0 30 12 *",  # Apia skipped 2011-12-30
    "* * * * * *",
    "59 59 23 L 12 *",
    "0 0 31 12 5",  # OR rule, sparse both ways
]
PLAIN = st.builds(
    lambda *f: " ".join(f),
    st.sampled_from(["0", "*", "*/15", "30", "0-5", "59", "7,37"]),
    st.sampled_from(["*", "0", "1", "2", "3", "1-3", "23", "*/6", "2,14"]),
    st.sampled_from(["*", "1", "L", "29", "31", "1-7", "15W", "LW", "L-3"]),
    st.sampled_from(["*", "2", "3", "10", "3,10", "1-6", "12"]),
    st.sampled_from(["*", "0", "0L", "0#1", "1-5", "6", "5#5"]),
)
EXPRS = st.one_of(st.sampled_from(HOSTILE), PLAIN)
INSTANTS = st.one_of(
    st.datetimes(
        min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31), timezones=st.just(UTC)
    ),
    st.builds(
        lambda year, day, seconds: (
            datetime(year, 1, 1, tzinfo=UTC) + timedelta(days=day, seconds=seconds)
        ),
        st.integers(1900, 2100),
        st.integers(0, 364),
        st.integers(0, 86399),
    ),
    st.sampled_from([FIRST, LAST, FIRST + timedelta(days=1), LAST - timedelta(days=1)]),
)
GAPS = st.sampled_from([None, "next_valid", "skip", "shift"])
OVERLAPS = st.sampled_from([None, "once", "twice"])
WORK = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Work:
    """Counts the Python function calls made while it is active."""

    def __init__(self) -> None:
        self.calls = 0

    def _hook(self, _frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call":
            self.calls += 1

    @contextmanager
    def counting(self) -> Iterator[Work]:
        previous = sys.getprofile()
        sys.setprofile(self._hook)
        try:
            yield self
        finally:
            sys.setprofile(previous)


def bounded_run(compute: Callable[[], Any], limit: int) -> Any:
    """``compute()``'s answer, or its bounded error; either way within ``limit`` calls."""
    work = Work()
    answer: Any
    with work.counting():
        try:
            answer = compute()
        except BOUNDED as exc:
            answer = exc
    assert work.calls <= limit, work.calls
    if isinstance(answer, BOUNDED):
        assert answer.field == "schedule"
    return answer


def _schedule(expr: str, zone: str, gap: Any, overlap: Any) -> CronSchedule | None:
    try:
        return cron(expr, zone, dst_gap=gap, dst_overlap=overlap)
    except InvalidScheduleError:
        return None


def _job(schedule: Any, *, created: datetime, cursor: datetime | None) -> Job:
    spec = JobSpec(name="j", task="t", schedule=schedule, namespace=NS)
    return Job(
        id=JobId(1),
        spec=spec,
        next_fire_at=cursor,
        last_fired_at=None,
        paused=False,
        missed_total=0,
        created_at=created,
        updated_at=created,
    )


# --- the property: random expressions x zones x policies x instants ------------------


@WORK
@given(EXPRS, st.sampled_from(ZONES), GAPS, OVERLAPS, INSTANTS)
def test_next_instant_and_preview_work_is_bounded(
    expr: str, zone: str, gap: Any, overlap: Any, t: datetime
) -> None:
    schedule = _schedule(expr, zone, gap, overlap)
    if schedule is None:
        return
    got = bounded_run(lambda: schedule.next_after_with_note(t), ONE_SEARCH)
    if got is not None and not isinstance(got, Exception):
        assert got.utc > t
    rows = bounded_run(lambda: next_firings(schedule, t, 1000), ONE_LISTING)
    if isinstance(rows, list):
        assert all(a.utc < b.utc for a, b in itertools.pairwise(rows))


@WORK
@given(
    EXPRS,
    st.sampled_from(ZONES),
    GAPS,
    OVERLAPS,
    INSTANTS,
    st.integers(0, 10_000 * 86400),  # a range of up to ~27 years
)
def test_listing_backfill_and_explain_work_is_bounded(
    expr: str, zone: str, gap: Any, overlap: Any, t: datetime, span_s: int
) -> None:
    schedule = _schedule(expr, zone, gap, overlap)
    if schedule is None:
        return
    end = t + min(timedelta(seconds=span_s), LAST - t)
    # a job's upcoming instants never raise: they stop where the budget does
    got = bounded_run(lambda: upcoming_instants(schedule, t, 100), ONE_LISTING)
    assert isinstance(got, list) and got[:1] == [t]

    def backfill() -> list[datetime]:
        next_after = next_after_within(schedule, StepBudget(LISTING_STEPS))
        try:
            return instants_between(next_after, t, end)
        except ValidationError as exc:  # more than 1000 instants: "backfill in parts"
            if isinstance(exc, BOUNDED) or exc.field != "end":
                raise
        return []

    bounded_run(backfill, ONE_LISTING)
    job = _job(schedule, created=t, cursor=None)
    bounded_run(
        lambda: explain(job, since=t, until=end, now=end, firings=[], events=[]), ONE_SEARCH
    )


@pytest.mark.parametrize("expr", HOSTILE)
@pytest.mark.parametrize(
    ("zone", "gap"),
    [("Europe/Berlin", "skip"), ("Pacific/Apia", "skip"), ("Australia/Lord_Howe", "shift")],
)
@pytest.mark.parametrize("t", [FIRST, datetime(2026, 12, 1, tzinfo=UTC), LAST])
def test_hostile_cases_are_bounded(expr: str, zone: str, gap: Any, t: datetime) -> None:
    schedule = cron(expr, zone, dst_gap=gap)
    bounded_run(lambda: schedule.next_after_with_note(t), ONE_SEARCH)
    bounded_run(lambda: next_firings(schedule, t, 1000), ONE_LISTING)
    end = t + min(timedelta(days=3650), LAST - t)
    job = _job(schedule, created=t, cursor=None)
    bounded_run(
        lambda: explain(job, since=t, until=end, now=end, firings=[], events=[]), ONE_SEARCH
    )


def test_a_listing_shares_one_budget() -> None:
    """1000 instants of an every-second schedule fit the listing's budget; a budget
    spent is the bounded error, not more work."""
    schedule = cron("* * * * * *", "Europe/Berlin")
    t = datetime(2026, 3, 29, 0, 59, 30, tzinfo=UTC)  # across the spring-forward change
    budget = StepBudget(LISTING_STEPS)
    assert len(next_firings(schedule, t, 1000, budget=budget)) == 1000
    assert budget.used <= LISTING_STEPS // 4
    with pytest.raises(ScheduleBudgetError):
        next_firings(schedule, t, 1000, budget=StepBudget(100))
    # 1000 yearly instants in a zone with DST (two changes a year) fit too
    yearly = cron("0 0 1 1 *", "Europe/Berlin")
    assert len(next_firings(yearly, datetime(2026, 3, 1, tzinfo=UTC), 1000)) == 1000
    # 1000 of 29 February on a Monday would reach year 9999 first: refused, saying why
    with pytest.raises(ScheduleBudgetError) as info:
        next_firings(cron("0 0 ? 2 1#5", "America/New_York"), t, 1000)
    assert "of the 1000 instants asked for" in info.value.message
    assert info.value.message.endswith("ask for fewer")


def test_explain_of_a_dense_schedule_stays_within_its_budget() -> None:
    """Explain walks wall times; its walk spends one budget (default MAX_STEPS)."""
    schedule = cron("* * * * * *", "Pacific/Apia")
    t = datetime(2011, 12, 29, 9, tzinfo=UTC)  # Samoa skipped 2011-12-30 (a whole day)
    job = _job(schedule, created=t, cursor=None)
    budget = StepBudget(10**9)
    got = explain(
        job, since=t, until=t + timedelta(days=3), now=t, firings=[], events=[], budget=budget
    )
    assert len(got) == 2000  # MAX_OCCURRENCES
    assert budget.used <= MAX_STEPS
    with pytest.raises(ScheduleBudgetError):
        explain(
            job,
            since=t,
            until=t + timedelta(days=3),
            now=t,
            firings=[],
            events=[],
            budget=StepBudget(100),
        )


# --- the API, on both stores ----------------------------------------------------------

HOSTILE_BODY: dict[str, Any] = {
    "kind": "cron",
    "cron": "30 2 * 3 0L",
    "tz": "Europe/Berlin",
    "dst_gap": "skip",
}


@dataclass
class Steps:
    """Every budget step spent while it is installed (monkeypatched StepBudget.spend)."""

    total: int = 0


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> Steps:
    counter = Steps()
    spend = transitions.StepBudget.spend

    def counted(self: StepBudget, n: int = 1) -> None:
        counter.total += n
        spend(self, n)

    monkeypatch.setattr(transitions.StepBudget, "spend", counted)
    return counter


def _refused(r: Any, field: str = "schedule") -> None:
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["field"] == field, err
    assert err["code"] in ("no_firing_in_horizon", "schedule_budget_exceeded"), err


def test_hostile_schedules_are_refused_with_bounded_work(sec: Sec, steps: Steps) -> None:
    sec.cron_job("nightly")
    before = sec.fingerprint()
    preview = {"cron": "30 2 * 3 0L", "tz": "Europe/Berlin", "dst_gap": "skip", "count": 1000}
    for after in (None, "0001-01-01T00:00:00Z", "2026-12-01T00:00:00Z", "9999-06-01T00:00:00Z"):
        steps.total = 0
        body = preview | ({} if after is None else {"after": after})
        r = sec.call("POST", "/v1/schedules/preview", "read", json=body)
        if after == "0001-01-01T00:00:00Z":  # before Berlin's DST: it fires every year
            assert r.status_code == 200, r.text
            assert len(r.json()["items"]) == 1000
        else:
            _refused(r)
        assert steps.total <= LISTING_STEPS
    job = {"task": "report", "schedule": HOSTILE_BODY, "allow_unknown_task": True}
    for method, path, body in [
        ("POST", "/v1/jobs", job | {"name": "hostile"}),
        ("PUT", "/v1/jobs/hostile", job),
        ("PUT", "/v1/jobs/nightly", job),
        ("PATCH", "/v1/jobs/nightly", {"schedule": HOSTILE_BODY}),
    ]:
        steps.total = 0
        _refused(sec.call(method, path, json=body))
        assert steps.total <= MAX_STEPS
    assert sec.fingerprint() == before


def _store_hostile_job(sec: Sec) -> Job:
    """A job stored as an older version could have stored it (registration refuses it
    now): 02:30 on Europe's spring-forward Sunday under `skip`, which fired in Berlin
    until 1915 and from 1950 to 1979, years without daylight saving time."""
    spec = JobSpec(
        name="hostile",
        task="report",
        schedule=cron("30 2 * 3 0L", "Europe/Berlin", dst_gap="skip"),
        namespace=NS,
    )
    job: Job = sec.store.create_job(spec, first_fire_at=datetime(2027, 1, 1, tzinfo=UTC))
    return job


def test_backfill_and_upcoming_of_a_hostile_job_are_bounded(sec: Sec, steps: Steps) -> None:
    _store_hostile_job(sec)
    before = sec.fingerprint()
    body = {"start": "1900-01-01T00:00:00Z", "end": "2025-01-01T00:00:00Z"}
    r = sec.call("POST", "/v1/jobs/hostile/backfill", json=body)
    _refused(r)
    assert steps.total <= LISTING_STEPS
    assert sec.fingerprint() == before
    steps.total = 0
    r = sec.call("GET", "/v1/jobs/hostile?upcoming=100", "read")
    assert r.status_code == 200, r.text
    # its cursor, then nothing: the next instant is past the horizon
    assert [x["utc"] for x in r.json()["next_fire_times"]] == ["2027-01-01T00:00:00Z"]
    assert steps.total <= LISTING_STEPS


def test_the_dashboard_fates_of_a_hostile_job_are_bounded(sec: Sec, steps: Steps) -> None:
    job = _store_hostile_job(sec)
    shown = ids_for(sec.store).encode("job", job.id)  # the id the dashboard shows
    r = sec.call("POST", "/ui/login", None, json={"token": sec.tokens["read"]})
    assert r.status_code in (200, 204, 303), r.text
    for hours in ("1", "168"):
        steps.total = 0
        r = sec.call("GET", f"/ui/jobs/{shown}?hours={hours}", None)
        assert r.status_code == 200, r.text
        assert steps.total <= MAX_STEPS + 2 * LISTING_STEPS


# --- the dispatcher -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("why", "said"),
    [
        ("horizon", "does not fire within 50 years"),
        ("budget", "exceeded its budget of 50 steps"),
    ],
)
def test_a_job_whose_schedule_cannot_be_computed_ends_alone(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, why: str, said: str
) -> None:
    """The hostile job's cursor is due; the instant after it cannot be computed: past
    the horizon, or (its search given a budget of 50 steps) past its work budget. It
    fires its due instant and ends (a schedule error recorded for `jobs explain`, the
    event reported); the dispatcher keeps stepping and the other job keeps firing."""
    if why == "budget":
        search = cron_schedule.next_instant  # the cron schedule's search

        def small_budget(*args: Any, budget: StepBudget | None = None) -> Any:
            return search(*args, budget=StepBudget(50))

        monkeypatch.setattr(cron_schedule, "next_instant", small_budget)
    t0 = datetime(2026, 12, 31, 23, 59, 50, tzinfo=UTC)
    clock = FakeClock(t0)
    store = SqliteStore(str(tmp_path / "d.db"), clock=clock)
    store.migrate()
    try:
        hostile = store.create_job(
            JobSpec(
                name="hostile",
                task="t",
                schedule=cron("30 2 * 3 0L", "Europe/Berlin", dst_gap="skip"),
                namespace=NS,
            ),
            first_fire_at=datetime(2027, 1, 1, tzinfo=UTC),
        )
        steady = store.create_job(
            JobSpec(name="steady", task="t", schedule=every("1s"), namespace=NS),
            first_fire_at=t0 + timedelta(seconds=1),
        )
        reported: list[tuple[str, datetime, str]] = []

        class Events:
            def __getattr__(self, name: str) -> Any:
                def record(*args: Any, **_kw: Any) -> None:
                    if name == "schedule_failed":
                        reported.append(args)

                return record

        d = Dispatcher(store, clock, holder="a", config=DispatcherConfig(), events=Events())  # type: ignore[arg-type]
        for _ in range(300):  # 30 s in steps of 100 ms
            clock.advance(timedelta(milliseconds=100))
            d.step()
        ended = store.get_job_by_id(hostile.id)
        assert ended.next_fire_at is None
        assert [f.scheduled_for for f in store.list_job_firings(hostile.id, limit=10)] == [
            datetime(2027, 1, 1, tzinfo=UTC)
        ]
        assert [(job, after) for job, after, _ in reported] == [
            ("hostile", datetime(2027, 1, 1, tzinfo=UTC))
        ]
        assert said in reported[0][2]
        assert d.stats.schedule_errors == 1
        # the other job fired every second throughout
        fired = store.list_job_firings(steady.id, limit=100)
        assert len(fired) >= 29
        # `jobs explain` says why the hostile job stopped
        events = store.job_events(hostile.id, limit=10)
        assert [e.detail[: len(SCHEDULE_ERROR)] for e in events] == [SCHEDULE_ERROR]
        occurrences = explain(
            ended,
            since=datetime(2027, 1, 1, tzinfo=UTC),
            until=datetime(2057, 1, 1, tzinfo=UTC),
            now=clock.now(),
            firings=store.list_job_firings(hostile.id, limit=10),
            events=events,
        )
        assert occurrences == [] or {o.fate for o in occurrences} <= {
            "dst_skipped",
            "schedule_error",
        }
        every_dropped = [o for o in occurrences if o.fate == "dst_skipped"]
        assert len(every_dropped) == 30  # 2027..2056: each year's 02:30 is in the gap
    finally:
        store.close()


def test_explain_says_a_job_ended_on_a_schedule_error() -> None:
    """After the dispatcher's record of a schedule error, the occurrences it could not
    reach say so (until the job is changed: a later update clears it)."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    failed_after = t0 + timedelta(hours=2)
    job = _job(every("1h"), created=t0, cursor=None)
    event = JobEvent(
        id=1,
        job_id=job.id,
        at=failed_after,
        kind="missed",
        first_at=failed_after,
        last_at=failed_after,
        count=0,
        exact=True,
        detail=f"{SCHEDULE_ERROR}the schedule computation exceeded its budget",
    )
    now = t0 + timedelta(hours=4)
    got = explain(job, since=t0, until=t0 + timedelta(hours=6), now=now, firings=[], events=[event])
    fates = [(o.instant, o.fate) for o in got]
    assert fates[:4] == [
        (t0, "not_due"),  # the job's creation instant
        (t0 + timedelta(hours=1), "not_due"),
        (t0 + timedelta(hours=2), "not_due"),  # no "missed": the record missed nothing
        (t0 + timedelta(hours=3), "schedule_error"),
    ]
    assert {fate for _, fate in fates[3:]} == {"schedule_error"}
    assert "exceeded its budget" in got[-1].detail and "fix its schedule" in got[-1].detail
    changed = dataclasses.replace(job, updated_at=failed_after + timedelta(minutes=1))
    got = explain(
        changed, since=t0, until=t0 + timedelta(hours=6), now=now, firings=[], events=[event]
    )
    assert "schedule_error" not in {o.fate for o in got}
