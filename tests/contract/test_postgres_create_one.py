"""PostgreSQL: a job's creation in one statement (schema.sql migration_23,
store/postgres/jobs_quota.py ``create_job``). The common creation is one autocommitted
call of cronwheel_create_job; whatever needs a decision (a namespace with no shards yet,
no free shard with room, a schedule under ``min_interval``, an unserved task when asked
to check it) is left, with nothing written, to CoreStore's transaction, which decides as
before. Either way the job, its quota charge and the job set's version are the same."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from cronwheel.domain.models import Job, JobSpec
from cronwheel.domain.schedules import cron, every
from cronwheel.errors import ConflictError, QuotaExceededError
from cronwheel.store.postgres import PostgresStore
from tests.contract.conftest import Harness, spec, worker_node
from tests.contract.pg_harness import PG_URL, await_a_lock_wait, pg_store, postgres_harness

NS = "one"
FIRST = datetime(2030, 1, 1, 9, tzinfo=UTC)  # a first instant: no store call to make it


@pytest.fixture
def h(tmp_path: Any) -> Iterator[Harness]:
    yield from postgres_harness(tmp_path)


class Units:
    """Records the store's units of work: (write, atomic) of each ``Database.run``."""

    def __init__(self, store: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[tuple[bool, bool]] = []
        run = store.db.run

        def recording(body: Any, *, write: bool, atomic: bool = True, **kw: Any) -> Any:
            self.seen.append((write, atomic))
            return run(body, write=write, atomic=atomic, **kw)

        monkeypatch.setattr(store.db, "run", recording)


def _used(store: PostgresStore) -> int:
    row = store.db.read(
        lambda tx: tx.conn.execute(
            "SELECT coalesce(sum(used), 0) AS n FROM quota_jobs WHERE namespace = %s", (NS,)
        ).fetchone()
    )
    return int(row["n"])


def _create(h: Harness, name: str, **kw: Any) -> Job:
    s = spec(name, namespace=NS, **kw)
    return h.store.create_job(s, first_fire_at=FIRST)


def _awaited(
    store: PostgresStore, job: JobSpec, first: datetime, since: datetime, *, check_task: bool
) -> Job | None:
    """The store's AsyncCalls.create_job, on an event loop of its own."""

    async def main() -> Job | None:
        calls = store.async_calls()
        await calls.open()
        try:
            return await calls.create_job(
                job, first_fire_at=first, valid_from=since, check_task=check_task
            )
        finally:
            await calls.close()

    return asyncio.run(main())


def test_a_creation_with_a_free_shard_is_one_autocommitted_statement(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = pg_store(h)
    _create(h, "first")  # the namespace's first job: its shards are made by the transaction
    version = store.jobs_version()
    units = Units(store, monkeypatch)
    job = _create(h, "second", schedule=cron("0 9 * * *", tz="Europe/Berlin"))
    assert units.seen == [(True, False)]  # one unit: one statement, no BEGIN/COMMIT
    assert store.get_job(NS, "second") == job
    assert job.spec.schedule == cron("0 9 * * *", tz="Europe/Berlin")
    assert _used(store) == 2  # charged to the jobs quota as the transaction charges
    assert store.jobs_version() == version + 1  # the leader is told the job set changed


def test_a_namespace_without_shards_is_left_to_the_transaction(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = pg_store(h)
    units = Units(store, monkeypatch)
    _create(h, "first")
    # the statement found no shard (nothing written), then the transaction made them
    assert units.seen == [(True, False), (True, True)]
    assert _used(store) == 1
    assert [j.spec.name for j in store.list_jobs(namespace=NS)] == ["first"]


def test_a_taken_name_is_a_conflict_and_charges_nothing(h: Harness) -> None:
    store = pg_store(h)
    _create(h, "taken")
    version = store.jobs_version()
    with pytest.raises(ConflictError) as caught:
        _create(h, "taken")
    assert caught.value.code == "job_exists"
    assert caught.value.field == "name"
    assert _used(store) == 1
    assert store.jobs_version() == version


def test_the_jobs_limit_is_refused_by_the_transaction_with_nothing_written(h: Harness) -> None:
    store = pg_store(h)
    store.set_quota(NS, {"jobs": 2})
    _create(h, "a")
    _create(h, "b")
    version = store.jobs_version()
    with pytest.raises(QuotaExceededError) as caught:
        _create(h, "c")
    assert caught.value.quota == "jobs"
    assert sorted(j.spec.name for j in store.list_jobs(namespace=NS)) == ["a", "b"]
    assert _used(store) == 2
    assert store.jobs_version() == version


@pytest.mark.parametrize("record", [True, False], ids=["own-record", "default-quota"])
def test_a_schedule_under_min_interval_is_refused_naming_schedule(h: Harness, record: bool) -> None:
    store = pg_store(h)
    _create(h, "ok")
    if record:
        store.set_quota(NS, {"min_interval": "1h"})
        too_often = every(timedelta(minutes=30))
    else:  # the default quota's min_interval, passed to the statement by the store
        too_often = every(timedelta(milliseconds=10))
    with pytest.raises(QuotaExceededError) as caught:
        _create(h, "flood", schedule=too_often)
    assert (caught.value.quota, caught.value.field) == ("min_interval", "schedule")
    assert [j.spec.name for j in store.list_jobs(namespace=NS)] == ["ok"]
    assert _used(store) == 1


def test_every_shard_held_leaves_the_creation_to_the_transaction_which_waits(
    h: Harness,
) -> None:
    store = pg_store(h)
    _create(h, "first")
    # another session holds every shard of the namespace until it commits
    other = psycopg.connect(PG_URL)
    try:
        other.execute(f'SET search_path TO "{store.schema}"')
        other.execute("SELECT * FROM quota_jobs WHERE namespace = %s FOR UPDATE", (NS,))

        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(_create, h, "waiter")
            await_a_lock_wait()
            assert not pending.done()  # the transaction waits for a shard with room
            other.commit()
            job = pending.result(timeout=20)
    finally:
        other.close()
    assert job.spec.name == "waiter"
    assert _used(store) == 2


def test_the_check_of_the_task_is_left_to_the_transaction_once_a_worker_served(
    h: Harness,
) -> None:
    store = pg_store(h)
    _create(h, "first")

    def create(name: str, task: str) -> Job | None:
        since = FIRST - timedelta(days=3650)  # any clock of the store's before FIRST
        return _awaited(store, spec(name, task=task, namespace=NS), FIRST, since, check_task=True)

    # no worker ever registered: every task is accepted in the one statement
    assert create("before", "typo") is not None
    store.register_node(worker_node("w1", h.now(), tasks=["report"]))
    assert create("served", "report") is not None
    assert create("unserved", "typo") is None  # nothing written
    names = sorted(j.spec.name for j in store.list_jobs(namespace=NS))
    assert names == ["before", "first", "served"]
    assert _used(store) == 3


@pytest.mark.parametrize(
    ("since_s", "first_s", "made"),
    [
        (-1, 1, True),  # the store's clock in [since, first): the guess holds
        (1, 60, False),  # the store's clock behind the range
        (-60, 0, False),  # the store's clock at the first instant: it may be another
        (-60, -1, False),  # past it
    ],
)
def test_the_statement_checks_the_stores_clock_against_the_guess(
    h: Harness, since_s: int, first_s: int, made: bool
) -> None:
    store = pg_store(h)
    _create(h, "first")
    now = h.now()

    first = now + timedelta(seconds=first_s)
    since = now + timedelta(seconds=since_s)
    job = _awaited(store, spec("guessed", namespace=NS), first, since, check_task=False)
    assert (job is not None) == made
    names = sorted(j.spec.name for j in store.list_jobs(namespace=NS))
    assert names == (["first", "guessed"] if made else ["first"])
    assert _used(store) == (2 if made else 1)
    if job is not None:
        assert job.next_fire_at == first


def test_an_upsert_of_a_new_name_is_the_one_statement(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``upsert_job`` (App.schedule's default, the API's PUT) of a name the namespace
    does not have is created by the statement: one unit, the same row, charge and
    version as the transaction's creation."""
    store = pg_store(h)
    _create(h, "first")
    version = store.jobs_version()
    units = Units(store, monkeypatch)
    job, changed = store.upsert_job(spec("new", namespace=NS), first_fire_at=FIRST)
    assert changed
    assert units.seen == [(True, False)]
    assert store.get_job(NS, "new") == job
    assert job.next_fire_at == FIRST
    assert _used(store) == 2
    assert store.jobs_version() == version + 1


STATEMENT, THEN_TRANSACTION = [(True, False)], [(True, False), (True, True)]


@pytest.mark.parametrize(
    ("change", "units_seen", "changed", "cursor_moves"),
    [
        # every deploy re-declares its jobs: returned as stored, nothing written
        ({}, STATEMENT, False, False),
        # another definition (max_attempts), the same schedule: updated by the statement
        ({"max_attempts": 7}, STATEMENT, True, False),
        # a new schedule (its min_interval to check, its cursor to move): "decide",
        # nothing written by the statement, then the transaction updates under the lock
        ({"schedule": every(timedelta(minutes=5))}, THEN_TRANSACTION, True, True),
    ],
    ids=["as-stored", "same-schedule", "new-schedule"],
)
def test_an_upsert_of_a_stored_name(
    h: Harness,
    monkeypatch: pytest.MonkeyPatch,
    change: dict[str, Any],
    units_seen: list[tuple[bool, bool]],
    changed: bool,
    cursor_moves: bool,
) -> None:
    """A name the namespace has: the same id, no second charge, the job set's version
    moved once when the job changed and not otherwise; the cursor moves only with a new
    schedule."""
    store = pg_store(h)
    first = _create(h, "kept")
    version = store.jobs_version()
    units = Units(store, monkeypatch)
    later = FIRST + timedelta(days=1)
    job, was_changed = store.upsert_job(spec("kept", namespace=NS, **change), first_fire_at=later)
    assert units.seen == units_seen
    assert was_changed == changed and job.id == first.id
    assert job == (store.get_job(NS, "kept") if changed else first)
    assert job.next_fire_at == (later if cursor_moves else first.next_fire_at)
    if "max_attempts" in change:
        assert job.spec.policies.max_attempts == 7
    assert _used(store) == 1  # an update charges nothing
    assert store.jobs_version() == version + changed


def test_an_upsert_whose_job_changed_since_its_read_is_the_transactions(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The statement's update is a compare-and-swap on the definition it read: another
    session's change, committed while the update waited for its row, makes it answer
    "decide" with nothing written, and the transaction compares with what is stored
    now and writes this upsert's definition."""
    store = pg_store(h)
    _create(h, "kept")
    with psycopg.connect(PG_URL) as other:
        other.execute(f'SET search_path TO "{store.schema}"')
        other.execute(
            "UPDATE jobs SET spec_hash = 'another', max_attempts = 2"
            " WHERE namespace = %s AND name = 'kept'",
            (NS,),
        )
        units = Units(store, monkeypatch)
        mine = spec("kept", namespace=NS, max_attempts=7)
        with ThreadPoolExecutor(1) as pool:
            upsert = pool.submit(store.upsert_job, mine, first_fire_at=FIRST)
            await_a_lock_wait()
            other.commit()
            updated, changed = upsert.result(timeout=30)
    assert units.seen == [(True, False), (True, True)]
    assert changed and updated.spec.policies.max_attempts == 7
    assert store.get_job(NS, "kept").spec.spec_hash() == mine.spec_hash()


def test_an_upsert_racing_a_creation_of_its_name_is_the_transactions(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another session creates the name between the statement's read and its insert
    (held here in an open transaction): the insert waits for it, finds the name taken,
    and the statement leaves the upsert to the transaction ("decide", nothing written),
    which finds that job and compares under its lock: one job, no second charge."""
    store = pg_store(h)
    _create(h, "first")
    with psycopg.connect(PG_URL) as other:
        other.execute(f'SET search_path TO "{store.schema}"')
        (held_id,) = other.execute(
            "INSERT INTO jobs OVERRIDING SYSTEM VALUE"
            " SELECT (jsonb_populate_record(NULL::jobs, to_jsonb(j) || jsonb_build_object("
            "'id', nextval(pg_get_serial_sequence('jobs', 'id')), 'name', 'raced'))).*"
            " FROM jobs j WHERE namespace = %s AND name = 'first'"
            " RETURNING id",
            (NS,),
        ).fetchone()
        units = Units(store, monkeypatch)
        with ThreadPoolExecutor(1) as pool:
            upsert = pool.submit(store.upsert_job, spec("raced", namespace=NS), first_fire_at=FIRST)
            await_a_lock_wait()
            other.commit()
            job, changed = upsert.result(timeout=30)
    # the held row, found by the transaction (its definition is this one: unchanged)
    assert (job.id, changed) == (held_id, False)
    assert units.seen == [(True, False), (True, True)]
    assert [j.spec.name for j in store.list_jobs(namespace=NS)] == ["first", "raced"]
    assert _used(store) == 1


def test_an_upsert_that_needs_a_decision_is_the_transactions(h: Harness) -> None:
    """A schedule under the namespace's min_interval: the statement leaves it (CW001,
    nothing written), and the transaction refuses it naming ``schedule``."""
    store = pg_store(h)
    _create(h, "first")
    store.set_quota(NS, {"min_interval": "1h"})
    often = spec("often", namespace=NS, schedule=every(timedelta(minutes=30)))
    with pytest.raises(QuotaExceededError) as caught:
        store.upsert_job(often, first_fire_at=FIRST)
    assert (caught.value.quota, caught.value.field) == ("min_interval", "schedule")
    assert [j.spec.name for j in store.list_jobs(namespace=NS)] == ["first"]
    assert _used(store) == 1


def _awaited_together(
    store: PostgresStore, asked: list[tuple[JobSpec, datetime]], monkeypatch: pytest.MonkeyPatch
) -> tuple[list[Any], list[str]]:
    """The store's AsyncCalls.create_job of each (spec, valid_from) of ``asked``, all asked
    in one turn of an event loop; each one's answer (a Job, None, or its error) and the
    statements that ran, by name."""
    ran: list[str] = []
    execute = psycopg.AsyncConnection.execute

    async def recording(conn: Any, text: Any, *args: Any, **kw: Any) -> Any:
        for name in ("create_jobs_one", "put_job_one"):
            if text == store.db.q[name]:
                ran.append(name)
        return await execute(conn, text, *args, **kw)

    monkeypatch.setattr(psycopg.AsyncConnection, "execute", recording)

    async def main() -> list[Any]:
        calls = store.async_calls()
        await calls.open()
        try:
            return await asyncio.gather(
                *(
                    calls.create_job(job, first_fire_at=FIRST, valid_from=since, check_task=False)
                    for job, since in asked
                ),
                return_exceptions=True,
            )
        finally:
            await calls.close()

    return asyncio.run(main()), ran


def test_creations_asked_together_are_one_statement_each_with_its_own_answer(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Concurrent creations share one statement: each answers its own job, as one made
    alone; a name taken before, or by an earlier creation of the same statement, is that
    one's 409 and charges nothing; the quota and the job set's version count each job."""
    store = pg_store(h)
    _create(h, "taken")  # the namespace's shards, and a name taken
    version = store.jobs_version()
    since = h.now() - timedelta(seconds=1)
    names = ["a", "b", "taken", "c", "b"]
    asked = [
        (spec(n, namespace=NS, schedule=every(f"{i + 1}m")), since) for i, n in enumerate(names)
    ]
    answers, ran = _awaited_together(store, asked, monkeypatch)
    assert ran == ["create_jobs_one"]
    for (job, _), answer in zip(asked[:2] + asked[3:4], answers[:2] + answers[3:4], strict=True):
        assert isinstance(answer, Job)
        assert answer == store.get_job(NS, job.name)
        assert answer.spec.schedule == job.schedule
        assert answer.next_fire_at == FIRST
    for conflict in (answers[2], answers[4]):
        assert isinstance(conflict, ConflictError)
        assert conflict.code == "job_exists"
    assert store.get_job(NS, "b").spec.schedule == every("2m")  # the first "b" asked
    assert _used(store) == 4
    assert store.jobs_version() == version + 3


def test_creations_asked_together_go_alone_when_one_must_decide(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One creation the statement cannot settle (the store's clock off its guess: CW001)
    makes the shared statement write nothing; each is then made alone: that one is left
    to the transaction (None), the others created."""
    store = pg_store(h)
    _create(h, "first")
    now = h.now()
    asked = [
        (spec("x", namespace=NS), now - timedelta(seconds=1)),
        (spec("off", namespace=NS), now + timedelta(hours=1)),  # a guess ahead of the clock
        (spec("y", namespace=NS), now - timedelta(seconds=1)),
    ]
    answers, ran = _awaited_together(store, asked, monkeypatch)
    assert ran == ["create_jobs_one", "put_job_one", "put_job_one", "put_job_one"]
    assert isinstance(answers[0], Job) and isinstance(answers[2], Job)
    assert answers[1] is None
    names = sorted(j.spec.name for j in store.list_jobs(namespace=NS))
    assert names == ["first", "x", "y"]
    assert _used(store) == 3


def _used_by_shard(store: PostgresStore) -> dict[int, int]:
    rows = store.db.read(
        lambda tx: tx.conn.execute(
            "SELECT shard, used FROM quota_jobs WHERE namespace = %s", (NS,)
        ).fetchall()
    )
    return {int(r["shard"]): int(r["used"]) for r in rows}


def test_creations_asked_together_charge_one_shard_of_the_jobs_counter(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One statement's creations take their jobs from one shard (migration_27: the
    transaction's own first), so that it holds one of the eight until its commit, not
    one per creation; every job is counted."""
    store = pg_store(h)
    _create(h, "first")  # the namespace's shards
    before = _used_by_shard(store)
    since = h.now() - timedelta(seconds=1)
    asked = [(spec(f"s{i}", namespace=NS, schedule=every(f"{i + 1}m")), since) for i in range(6)]
    answers, ran = _awaited_together(store, asked, monkeypatch)
    assert ran == ["create_jobs_one"]
    assert all(isinstance(a, Job) for a in answers)
    after = _used_by_shard(store)
    grew = {shard: after[shard] - before[shard] for shard in after if after[shard] != before[shard]}
    assert list(grew.values()) == [6], grew
