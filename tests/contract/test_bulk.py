"""The bulk path on every store (memory, SQLite, PostgreSQL): ``create_jobs_batch`` and
``enqueue_now_batch`` keep every invariant of the single-item path (the same rows and
states, the same quotas charged in the same transaction), with a result per item or,
all or nothing, none written."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import JobPolicies, JobSpec
from cronwheel.domain.overlap import OverlapPolicy
from cronwheel.domain.schedules import at, cron, every, now
from cronwheel.errors import (
    BatchError,
    ConflictError,
    JobNotFoundError,
    QuotaExceededError,
)
from tests.contract.conftest import Harness, spec

S = timedelta(seconds=1)
NS = "ns-bulk"


def _full(h: Harness, name: str) -> JobSpec:
    t = h.now()
    return JobSpec(
        name=name,
        task="t.x",
        schedule=cron("0 9 * * *", tz="Europe/Berlin"),
        args=("é\u2028", 1e300, {"z": [None, -0.0]}),
        kwargs={"ü": "\U0001f600"},
        namespace="team-a",
        policies=JobPolicies(
            priority=3,
            overlap=OverlapPolicy.BUFFER_ALL,
            max_concurrency=2,
            timeout=timedelta(seconds=3),
            start_deadline=timedelta(seconds=9),
        ),
        paused=True,
        start_at=t - 60 * S,
        end_at=t + 86400 * S,
        max_runs=5,
        trace_context={"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    )


def test_a_batch_job_is_the_job_create_job_makes(harness: Harness) -> None:
    store, t = harness.store, harness.now()
    single = store.create_job(_full(harness, "one"), first_fire_at=t + S)
    version = store.jobs_version()
    (made,) = store.create_jobs_batch([(_full(harness, "bulk"), t + S)])
    assert not isinstance(made, Exception)
    stored = store.get_job("team-a", "bulk")
    assert made == stored  # what the batch returns is what was stored
    assert stored.spec == replace(single.spec, name="bulk")
    assert stored.spec.spec_hash() == replace(single.spec, name="bulk").spec_hash()
    fields = ("next_fire_at", "last_fired_at", "paused", "missed_total", "remaining_runs")
    assert [getattr(stored, f) for f in fields] == [getattr(single, f) for f in fields]
    assert stored.created_at == stored.updated_at == single.created_at == t
    assert store.jobs_version() != version
    # the cursor is the one given: the leader finds it due like the single one
    due = store.due_jobs(t + S, limit=10)
    assert {j.name for j in due} == set()  # both paused
    store.set_paused("team-a", "bulk", False)
    assert [j.name for j in store.due_jobs(t + S, limit=10)] == ["bulk"]


def test_a_batch_job_carries_its_trace_context(harness: Harness) -> None:
    """jobs.trace_context is written by the bulk path as by create_job: each claim of
    the job's firings carries it."""
    from tests.contract.test_store_contract import _fire

    t = harness.now()
    ctx = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    (job,) = harness.store.create_jobs_batch([(replace(spec("traced"), trace_context=ctx), t)])
    assert not isinstance(job, Exception)
    _fire(harness, job, t)
    (claimed,) = harness.store.claim("w", tasks=["t"], limit=1)
    assert claimed.trace_context == ctx


def test_per_item_a_taken_name_is_that_items_conflict(harness: Harness) -> None:
    store, t = harness.store, harness.now()
    store.set_quota(NS, {"jobs": 10})
    store.create_job(spec("taken", namespace=NS), first_fire_at=t)
    results = store.create_jobs_batch(
        [
            (spec("a", namespace=NS), t + S),
            (spec("taken", namespace=NS), t),
            (spec("b", namespace=NS, schedule=at(t + 5 * S)), t + 5 * S),
            (spec("a", namespace=NS), t),  # an earlier item took it
            (spec("a", namespace="other-ns"), t),  # names are per namespace
        ]
    )
    kinds = [type(r).__name__ for r in results]
    assert kinds == ["Job", "ConflictError", "Job", "ConflictError", "Job"]
    assert all(r.code == "job_exists" and r.field == "name" for r in results[1::2])
    assert store.get_job(NS, "a").next_fire_at == t + S
    assert store.get_job(NS, "b").next_fire_at == t + 5 * S
    (use,) = store.quota_usage(NS)
    assert use.used["jobs"] == 3  # taken + a + b: only what was created is charged


def test_all_or_nothing_writes_nothing_and_names_every_item(harness: Harness) -> None:
    store, t = harness.store, harness.now()
    store.create_job(spec("taken", namespace=NS), first_fire_at=t)
    version = store.jobs_version()
    with pytest.raises(BatchError) as info:
        store.create_jobs_batch(
            [
                (spec("fresh", namespace=NS), t),
                (spec("taken", namespace=NS), t),
                (spec("fresh", namespace=NS), t),
            ],
            all_or_nothing=True,
        )
    assert [(i, type(e)) for i, e in info.value.errors] == [
        (1, ConflictError),
        (2, ConflictError),
    ]
    assert info.value.code == "batch_conflict"
    with pytest.raises(JobNotFoundError):
        store.get_job(NS, "fresh")
    assert store.jobs_version() == version
    (use,) = store.quota_usage(NS)
    assert use.used["jobs"] == 1


def test_min_interval_refuses_the_item_and_the_jobs_quota_the_batch(harness: Harness) -> None:
    store, t = harness.store, harness.now()
    store.set_quota(NS, {"min_interval": "1h", "jobs": 3})
    results = store.create_jobs_batch(
        [
            (spec("hourly", namespace=NS, schedule=every("1h")), t + 3600 * S),
            (spec("dense", namespace=NS, schedule=every("1m")), t + 60 * S),
        ]
    )
    assert type(results[0]).__name__ == "Job"
    assert isinstance(results[1], QuotaExceededError) and results[1].quota == "min_interval"
    with pytest.raises(QuotaExceededError) as info:  # 1 + 3 > 3: the whole batch
        store.create_jobs_batch(
            [(spec(f"j{i}", namespace=NS, schedule=at(t + S)), t + S) for i in range(3)]
        )
    assert info.value.quota == "jobs"
    assert [j.name for j in store.list_jobs(namespace=NS)] == ["hourly"]
    (use,) = store.quota_usage(NS)
    assert use.used["jobs"] == 1


def test_an_empty_batch_writes_nothing(harness: Harness) -> None:
    version = harness.store.jobs_version()
    assert harness.store.create_jobs_batch([]) == []
    assert harness.store.enqueue_now_batch([]) == []
    assert harness.store.jobs_version() == version


def _now_spec(name: str, *args: object, namespace: str = "default") -> JobSpec:
    return JobSpec(name=name, task="t", schedule=now(), args=args, namespace=namespace)


def test_a_batch_firing_is_the_firing_enqueue_now_makes(harness: Harness) -> None:
    store, t = harness.store, harness.now()
    single = store.enqueue_now(_now_spec("one", 1))
    batch = store.enqueue_now_batch([_now_spec("two", 2), _now_spec("three", 3)])
    assert all(not isinstance(f, Exception) for f in batch)
    for f in batch:
        assert not isinstance(f, Exception)
        assert store.get_firing(f.id) == f
        same = ("state", "scheduled_for", "due_at", "attempt", "max_attempts", "priority")
        assert [getattr(f, k) for k in same] == [getattr(single, k) for k in same]
        assert (f.enqueued_at, f.enqueued_epoch, f.note) == (t, None, None)
        assert store.get_job_by_id(f.job_id).last_fired_at == t
    assert [f.args for f in batch if not isinstance(f, Exception)] == [(2,), (3,)]
    assert batch[0].state is FiringState.QUEUED  # type: ignore[union-attr]
    claimed = store.claim("w", tasks=["t"], limit=10)
    assert {c.firing.id for c in claimed} == {single.id, *(f.id for f in batch)}  # type: ignore[union-attr]
    # the one-shots of immediate runs are not counted as jobs, as for enqueue_now
    (use,) = store.quota_usage("default")
    assert use.used.get("jobs", 0) == 0


def test_enqueue_batch_conflicts_and_firings_quota(harness: Harness) -> None:
    store = harness.store
    store.set_quota(NS, {"firings_per_minute": 3})
    store.enqueue_now(_now_spec("taken", namespace=NS))
    results = store.enqueue_now_batch(
        [_now_spec("x", namespace=NS), _now_spec("taken", namespace=NS)]
    )
    assert [type(r).__name__ for r in results] == ["Firing", "ConflictError"]
    with pytest.raises(BatchError):
        store.enqueue_now_batch(
            [_now_spec("y", namespace=NS), _now_spec("taken", namespace=NS)],
            all_or_nothing=True,
        )
    with pytest.raises(QuotaExceededError) as info:  # 2 used + 2 > 3: the whole batch
        store.enqueue_now_batch([_now_spec("p", namespace=NS), _now_spec("q", namespace=NS)])
    assert info.value.quota == "firings_per_minute" and info.value.retry_after is not None
    assert len(store.list_firings(namespace=NS)) == 2
    (use,) = store.quota_usage(NS)
    assert use.used["firings_per_minute"] == 2


# -- App.schedule_many / enqueue_many, on every store ----------------------------------
def _app(h: Harness):  # type: ignore[no-untyped-def]
    from cronwheel.app import App
    from cronwheel.domain.clock import FakeClock

    app = App("memory://", clock=FakeClock(h.now()), allow_unknown_task=False)
    app.use_store(h.store)
    return app


def test_app_schedule_many_makes_the_jobs_schedule_makes(harness: Harness) -> None:
    app, t = _app(harness), harness.now()
    single = app.schedule(
        "report",
        cron("0 9 * * *", tz="Europe/Paris"),
        name="one",
        args=(1,),
        retries=4,
        replace=False,
    )
    result = app.schedule_many(
        [
            {
                "task": "report",
                "schedule": cron("0 9 * * *", tz="Europe/Paris"),
                "name": "two",
                "args": (1,),
                "retries": 4,
            },
            {"task": "report", "schedule": at(t + 60 * S), "name": "soon", "paused": True},
        ]
    )
    assert result.ok and len(result) == 2
    two, soon = result.created
    assert two.spec == replace(single.spec, name="two")
    assert two.next_fire_at == single.next_fire_at and two.spec.policies.max_attempts == 5
    assert soon.next_fire_at == t + 60 * S and soon.paused
    assert harness.store.get_job("default", "two") == two


def test_app_schedule_many_names_each_bad_item(harness: Harness) -> None:
    app, t = _app(harness), harness.now()
    items: list[object] = [
        {"task": "report", "schedule": at(t + S), "name": "ok"},
        {"schedule": at(t + S), "name": "no-task"},
        {"task": "report", "schedule": "0 9 * * *", "name": "text"},
        {"task": "report", "schedule": at(t - S), "name": "past"},
        {"task": "report", "schedule": at(t + S), "name": "a/../b"},
        {"task": "report", "schedule": at(t + S), "name": "x", "colour": "red"},
        {"task": "report", "schedule": at(t + S), "name": "ok"},
        ["not", "a", "mapping"],
    ]
    with pytest.raises(BatchError) as info:  # all or nothing: every item's error, nothing written
        app.schedule_many(items, all_or_nothing=True)  # type: ignore[arg-type]
    fields = [(i, e.field) for i, e in info.value.errors]
    assert fields == [
        (1, "items[1].task"),
        (2, "items[2].schedule"),
        (3, "items[3].schedule.at"),
        (4, "items[4].name"),
        (5, "items[5].colour"),
        (7, "items[7]"),
    ]
    assert harness.store.list_jobs() == []
    result = app.schedule_many(items)  # type: ignore[arg-type]
    assert [(i, e.field) for i, e in result.errors] == [
        *fields[:5],
        (6, "items[6].name"),
        fields[5],
    ]
    assert [j.name for j in result.created] == ["ok"]


def test_app_batches_refuse_unserved_tasks_per_item_reading_them_once(harness: Harness) -> None:
    from tests.api.test_unknown_tasks import register_worker

    register_worker(harness.store, "report")
    app, t = _app(harness), harness.now()
    reads: list[int] = []
    served = harness.store.served_tasks

    def counting(**kw):  # type: ignore[no-untyped-def]
        reads.append(1)
        return served(**kw)

    harness.store.served_tasks = counting  # type: ignore[method-assign]
    result = app.schedule_many(
        [
            {"task": "report" if i % 2 else "nobody", "schedule": at(t + S), "name": f"j{i}"}
            for i in range(6)
        ]
    )
    assert [i for i, _ in result.errors] == [0, 2, 4]
    assert {e.field for _, e in result.errors} == {
        "items[0].task",
        "items[2].task",
        "items[4].task",
    }
    assert len(reads) == 1
    runs = app.enqueue_many(
        [{"task": "report"}, {"task": "nobody"}, {"task": "report", "args": [1]}]
    )
    assert [type(r).__name__ for r in runs.items] == ["Firing", "ValidationError", "Firing"]


def test_app_enqueue_many_runs_with_the_tasks_policies(harness: Harness) -> None:
    from cronwheel.worker.context import Context

    app = _app(harness)

    @app.task(retries=5, priority=2)
    def resize(ctx: Context, path: str, width: int = 0) -> None: ...

    runs = app.enqueue_many(
        [{"task": resize, "args": ["a.png"], "kwargs": {"width": 640}}, {"task": "resize"}]
    )
    a, b = runs.created
    assert (a.args, a.kwargs, a.max_attempts, a.priority) == (("a.png",), {"width": 640}, 6, 2.0)
    assert a.state is FiringState.QUEUED and a.due_at == harness.now()
    assert b.job_name != a.job_name
    bad = app.enqueue_many([{"task": "resize", "colour": "red"}, {"args": [1]}])
    assert [e.field for _, e in bad.errors] == ["items[0].colour", "items[1].task"]
    with pytest.raises(BatchError):
        app.enqueue_many([{"task": "resize"}, {"args": [1]}], all_or_nothing=True)
    assert len(harness.store.list_firings()) == 2


def test_a_batch_of_runs_rings_the_workers_once() -> None:
    """One wake-up per batch, not per run (the memory store's in-process hints; SQLite
    rings its doorbell once per transaction, PostgreSQL's NOTIFY is one per commit)."""
    from cronwheel.domain.clock import FakeClock
    from cronwheel.store.memory import MemoryStore
    from tests.contract.conftest import T0

    store = MemoryStore(clock=FakeClock(T0))
    rings: list[int] = []
    wakeup = store.open_wakeup(lambda: rings.append(1))
    made = store.enqueue_now_batch([_now_spec(f"r{i}") for i in range(50)])
    assert len(made) == 50 and len(rings) == 1
    store.create_jobs_batch([(spec(f"j{i}"), T0) for i in range(5)])  # no firing
    assert len(rings) == 1
    wakeup.close()
