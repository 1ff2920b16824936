"""PostgreSQL-only behaviour of PostgresStore: plans, row locks, fencing under
concurrency, recovery of the pool, LISTEN/NOTIFY, concurrent migration, job policies
(caps, overlap) under concurrent claimers without deadlocks, migration in place."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from cronwheel.domain.firing import FiringState
from cronwheel.errors import LeaseLostError, StoreUnavailableError
from cronwheel.store.protocol import DISPATCHER_LEASE, Completion, JobAdvance, PlannedFiring
from cronwheel.store.sql import load_queries
from tests.conftest import PG_URL
from tests.contract.conftest import Harness, spec
from tests.contract.pg_harness import fresh_schema, postgres_harness

S = timedelta(seconds=1)


@pytest.fixture
def h(tmp_path: Any) -> Iterator[Harness]:
    yield from postgres_harness(tmp_path)


@pytest.fixture
def schema() -> Iterator[str]:
    """A fresh empty schema (skips locally / fails in CI without a server)."""
    with fresh_schema() as name:
        yield name


def _store(h: Harness) -> Any:
    return h.store


def _raw(h: Harness) -> psycopg.Connection[Any]:
    """A plain connection on the test's schema (autocommit off: explicit transactions)."""
    return psycopg.connect(_store(h).db.conninfo)


def _queued(h: Harness, n: int, name: str = "q") -> list[int]:
    lease = h.store.acquire_lease(DISPATCHER_LEASE, "leader", 60 * S)
    assert lease is not None
    jobs = [h.store.create_job(spec(f"{name}{i}"), first_fire_at=h.now()) for i in range(n)]
    advances = [
        JobAdvance(
            job_id=j.id,
            expected_next_fire_at=j.next_fire_at,  # type: ignore[arg-type]
            new_next_fire_at=h.now() + 60 * S,
            firings=[PlannedFiring(scheduled_for=h.now())],
        )
        for j in jobs
    ]
    return list(h.store.enqueue(lease, advances).inserted)


def test_due_jobs_query_uses_the_partial_index(h: Harness) -> None:
    with _raw(h) as conn:
        # 20k jobs, almost all due far in the future, paused or exhausted
        conn.execute(
            """
            INSERT INTO jobs (namespace, name, task, schedule, payload, policies, spec_hash,
                              priority, max_attempts, visibility_us, paused, next_fire_at,
                              created_at, updated_at, shard)
            SELECT 'default', 'bulk' || g, 't', '{}', '{"args": [], "kwargs": {}}', '{}', 'h',
                   1, 3, 30000000, g % 10 = 0,
                   CASE WHEN g % 7 = 0 THEN NULL ELSE now() + g * interval '1 minute' END,
                   now(), now(), g % 256
            FROM generate_series(1, 20000) AS g
            """
        )
        conn.execute("ANALYZE jobs")
        conn.commit()
        sql = _store(h).db.q["due_jobs"]
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                "EXPLAIN " + sql,
                {
                    "horizon": h.now() + 60 * S,
                    "limit": 1000,
                    "after_at": h.now() - 3600 * S,
                    "after_id": 0,
                },
            ).fetchall()
        )
    assert "jobs_due" in plan, plan
    assert "Seq Scan" not in plan, plan


def _bulk_jobs(conn: psycopg.Connection[Any], n: int) -> None:
    """``n`` exhausted jobs of task t, inserted by SQL (fast, and unseen by ANALYZE)."""
    conn.execute(
        """
        INSERT INTO jobs (namespace, name, task, schedule, payload, policies, spec_hash,
                          priority, max_attempts, visibility_us, next_fire_at,
                          created_at, updated_at, shard)
        SELECT 'default', 'bulk' || g, 't', '{}', '{"args": [], "kwargs": {}}', '{}', 'h',
               1, 3, 30000000, NULL, now(), now(), 0
        FROM generate_series(1, %s) AS g
        """,
        (n,),
    )


def _queue_one_per_job(
    conn: psycopg.Connection[Any], h: Harness, due: str, vdeadline: str = "at"
) -> None:
    """One QUEUED firing per job, due at the SQL expression ``due``, with virtual
    deadline ``vdeadline`` (unseen by ANALYZE). In both, ``at`` is the store's clock
    (frozen when the test began), not the server's running now(): a bulk insert that
    takes a second must not move "due a second ago" past the store's present."""
    conn.execute(
        f"""
        INSERT INTO firings (job_id, namespace, job_name, task, payload, scheduled_for,
                             due_at, vdeadline, state, max_attempts, priority,
                             visibility_us, enqueued_at, shard)
        SELECT j.id, 'default', j.name, 't', '{{"args": [], "kwargs": {{}}}}', c.at,
               {due}, {vdeadline}, 'queued', 3, 1, 30000000, c.at, 0
        FROM jobs j, (SELECT %s::timestamptz AS at) c
        """,
        (h.now(),),
    )
    conn.commit()


def _buffers(conn: psycopg.Connection[Any], h: Harness, name: str, params: Any) -> Any:
    """The top node of ``EXPLAIN (ANALYZE, BUFFERS)`` of the store's query ``name``, with
    the buffers it touched as ``touched`` (rolled back)."""
    sql = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + _store(h).db.q[name]
    row = conn.execute(sql, _store(h).db.params(params)).fetchone()
    conn.rollback()
    assert row is not None
    top = row[0][0]["Plan"]
    top["touched"] = top["Shared Hit Blocks"] + top["Shared Read Blocks"]
    return top


def test_claim_scan_stays_an_ordered_index_walk_when_statistics_are_stale(h: Harness) -> None:
    """A herd of one-shot jobs is enqueued before any ANALYZE has seen it (as on a new
    database, or after a burst): the planner's own choice was then a bitmap scan and a
    sort of the whole queue on every claim (50 ms per claim at 20,000 queued). The
    claim scan must read a few pages per claim, not every queued firing."""
    with _raw(h) as conn:
        # the session's catalog caches warmed first, as on a pooled connection: planning
        # over the partitions of firings reads their catalog rows once per session
        # (~1,900 buffers for five partitions), which is not the scan measured here
        conn.execute("SELECT * FROM cronwheel_claim_scan(ARRAY['t'], now(), 50)")
        conn.rollback()
        _bulk_jobs(conn, 5000)
        _queue_one_per_job(
            conn, h, "now() - interval '1 s'", vdeadline="now() + mod(j.id, 4999) * interval '1 ms'"
        )
        row = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
            "SELECT * FROM cronwheel_claim_scan(ARRAY['t'], now(), 50)"
        ).fetchone()
        conn.rollback()
        assert row is not None
        top = row[0][0]["Plan"]
        assert top["Actual Rows"] == 50
        touched = top["Shared Hit Blocks"] + top["Shared Read Blocks"]
        # a walk of 50 entries: index pages, ~a page of heap each, the job by key; a sort
        # of the queue reads all 5,000 firings and looks up their job 5,000 times
        assert touched < 1500, f"{touched} buffers for a scan of 50 rows"
        first = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM cronwheel_claim_scan(ARRAY['t'], now(), 50)"
            ).fetchall()
        ]
        expect = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM firings WHERE state = 'queued' ORDER BY vdeadline LIMIT 50"
            ).fetchall()
        ]
        conn.rollback()
        assert sorted(first) == sorted(expect)


def test_next_due_hint_reads_an_index_not_the_queue(h: Harness) -> None:
    """An idle worker asks when the next queued firing falls due. With 5,000 firings
    queued (a deep backlog no ANALYZE has seen): half already due, half a burst queued
    ahead of its instants an hour from now, the answer must come from a few index pages,
    not from every queued firing (16 ms per call at 50,000); an aggregate over the
    matching range, the planner's choice for min() here, read all 2,500 of the burst."""
    with _raw(h) as conn:
        _bulk_jobs(conn, 5000)
        _queue_one_per_job(
            conn,
            h,
            "at - interval '1 s' + CASE WHEN mod(j.id, 2) = 0 "
            "THEN interval '1 h' + mod(j.id, 977) * interval '1 s' ELSE interval '0' END",
        )
        # once first: the statement's function is compiled and planned at its first
        # call in a session (catalog reads), which is not the walk measured here
        _buffers(conn, h, "next_due_at", None)
        top = _buffers(conn, h, "next_due_at", None)
        expect = conn.execute(
            "SELECT min(due_at) FROM firings WHERE due_at > %s AND state = 'queued'",
            (h.now(),),
        ).fetchone()
        conn.rollback()
    assert top["touched"] < 20, f"{top['touched']} buffers to find the next due instant"
    assert expect is not None and expect[0] is not None
    assert h.store.next_due_at() == expect[0]


def test_claim_facts_look_up_their_jobs_not_the_queue(h: Harness) -> None:
    """A planned claim (capped jobs) reads, for the jobs it decides for, their RUNNING
    count and due QUEUED firings. During a burst every queued firing is due and no
    ANALYZE has seen them: the facts for 64 jobs must come from 64 lookups, not from a
    walk of the whole queue (which bounded a minute's burst of cron jobs)."""
    with _raw(h) as conn:
        _bulk_jobs(conn, 40000)
        _queue_one_per_job(conn, h, "at - interval '1 s'")
        jobs = [r[0] for r in conn.execute("SELECT id FROM jobs ORDER BY id LIMIT 64 OFFSET 500")]
        top = _buffers(conn, h, "claim_facts", {"jobs": jobs})
        parts = conn.execute(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'firings'::regclass"
        ).fetchone()
        facts = conn.execute(_store(h).db.q["claim_facts"], _store(h).db.params({"jobs": jobs}))
        due = {r[0]: list(r[2]) for r in facts.fetchall()}
        conn.rollback()
    assert top["Actual Rows"] == 64
    assert all(len(ids) == 1 for ids in due.values()) and len(due) == 64
    # 64 lookups: a few index pages and a heap page each, and an index probe (a page or
    # two) in each other partition of firings (the day ahead); the walk read all 40,000
    assert parts is not None
    bound = 600 + 64 * 2 * (parts[0] - 1)
    assert top["touched"] < bound, f"{top['touched']} buffers for the facts of 64 jobs"


def test_reaper_start_deadline_pass_does_not_walk_the_queue(h: Harness) -> None:
    """Once a second the leader's reaper looks for queued firings past their job's start
    deadline. With 20,000 firings queued (none of whose jobs has a deadline) and one
    job that has one, it must start from that job, not read every queued firing."""
    with _raw(h) as conn:
        _bulk_jobs(conn, 20000)
        conn.execute(
            "UPDATE jobs SET start_deadline_us = 1000000 WHERE id = (SELECT min(id) FROM jobs)"
        )
        _queue_one_per_job(conn, h, "at - interval '1 minute'")
        _buffers(conn, h, "requeue_expired", {"limit": 1000})  # plans the function
        top = _buffers(conn, h, "requeue_expired", {"limit": 1000})
    assert top["touched"] < 100, f"{top['touched']} buffers for one late firing"
    assert h.store.requeue_expired() == 1  # the one late firing: MISSED
    assert h.store.status().counts.get("missed") == 1


def test_completions_and_heartbeats_find_their_rows_by_key(h: Harness) -> None:
    """With thousands of firings RUNNING cluster-wide, a batch of 5 completions (or
    heartbeats) must read a handful of pages, not every RUNNING firing."""
    from cronwheel.store.postgres.params import complete_params

    with _raw(h) as conn:
        _bulk_jobs(conn, 20000)
        conn.execute(
            """
            INSERT INTO firings (job_id, namespace, job_name, task, payload, scheduled_for,
                                 due_at, vdeadline, state, max_attempts, priority,
                                 visibility_us, enqueued_at, shard, claim_token, attempt,
                                 lease_until)
            SELECT j.id, 'default', j.name, 't', '{"args": [], "kwargs": {}}', now(), now(),
                   now(), CASE WHEN j.id % 4 = 0 THEN 'running' ELSE 'succeeded' END, 3, 1,
                   30000000, now(), 0, 'tok' || j.id, 1, now() + interval '1 min'
            FROM jobs j
            """
        )
        conn.execute("ANALYZE firings")
        conn.commit()
        ids = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM firings WHERE state = 'running' ORDER BY id LIMIT 5"
            ).fetchall()
        ]
        tokens = [
            f"tok{r[0]}"
            for r in conn.execute(
                "SELECT job_id FROM firings WHERE id = ANY (%s) ORDER BY id", (ids,)
            ).fetchall()
        ]
        now = h.now()
        batch = complete_params(
            [
                Completion(
                    firing_id=i, claim_token=t, succeeded=True, started_at=now, finished_at=now
                )
                for i, t in zip(ids, tokens, strict=True)
            ]
        )
        store = _store(h)
        for name, params in (
            ("complete_batch", batch),
            ("heartbeat", {"ids": ids, "tokens": tokens, "instants": None}),
        ):
            # once first, rolled back: the statement's function is compiled and planned
            # at its first call in a session (catalog reads), not counted here
            conn.execute(store.db.q[name], store.db.params(params)).fetchall()
            conn.rollback()
            row = conn.execute(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + store.db.q[name],
                store.db.params(params),
            ).fetchone()
            conn.rollback()
            assert row is not None
            top = row[0][0]["Plan"]
            touched = top["Shared Hit Blocks"] + top["Shared Read Blocks"]
            # updating 5 rows touches ~20 pages each (the row and its index entries); a
            # scan of the 5,000 RUNNING firings touches 500+
            assert touched < 300, f"{name}: {touched} buffers for 5 rows"
            assert top["Actual Rows"] == 5


def test_claim_skips_locked_rows_without_blocking(h: Harness) -> None:
    ids = _queued(h, 5)
    locked = ids[0]
    with _raw(h) as conn:
        conn.execute("SELECT id FROM firings WHERE id = %s FOR UPDATE", (locked,))
        got: list[Any] = []
        t = threading.Thread(target=lambda: got.extend(h.store.claim("w", tasks=["t"], limit=10)))
        started = time.monotonic()
        t.start()
        t.join(timeout=5)
        assert not t.is_alive(), "claim blocked behind a locked row"
        assert time.monotonic() - started < 2
        assert sorted(c.firing.id for c in got) == sorted(ids[1:])
        conn.rollback()
    # once the lock is gone the skipped firing is claimable
    assert [c.firing.id for c in h.store.claim("w", tasks=["t"], limit=10)] == [locked]


def _advance(job: Any, at: Any) -> list[JobAdvance]:
    return [
        JobAdvance(
            job_id=job.id,
            expected_next_fire_at=job.next_fire_at,
            new_next_fire_at=at + 60 * S,
            firings=[PlannedFiring(scheduled_for=at)],
        )
    ]


def test_enqueue_waiting_behind_a_takeover_is_fenced_out(h: Harness) -> None:
    job = h.store.create_job(spec("f"), first_fire_at=h.now())
    old = h.store.acquire_lease(DISPATCHER_LEASE, "old", 10 * S)
    assert old is not None
    outcome: list[BaseException | None] = []

    def enqueue() -> None:
        try:
            h.store.enqueue(old, _advance(job, job.next_fire_at))
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    with _raw(h) as takeover:  # a takeover in flight: it holds the lease row
        takeover.execute("SELECT * FROM leases WHERE name = %s FOR UPDATE", (DISPATCHER_LEASE,))
        t = threading.Thread(target=enqueue)
        t.start()
        time.sleep(0.3)
        assert t.is_alive(), "the enqueue must wait for the lease row"
        takeover.execute(
            "UPDATE leases SET holder = 'new', epoch = epoch + 1 WHERE name = %s",
            (DISPATCHER_LEASE,),
        )
        takeover.commit()
        t.join(timeout=10)
    assert len(outcome) == 1 and isinstance(outcome[0], LeaseLostError)
    assert h.store.list_firings(job_id=job.id) == []
    assert h.store.get_job_by_id(job.id).next_fire_at == job.next_fire_at


def test_takeover_waits_for_an_enqueue_in_flight(h: Harness) -> None:
    job = h.store.create_job(spec("f"), first_fire_at=h.now())
    old = h.store.acquire_lease(DISPATCHER_LEASE, "old", 2 * S)
    assert old is not None
    results: dict[str, Any] = {}

    def enqueue() -> None:
        results["enqueue"] = h.store.enqueue(old, _advance(job, job.next_fire_at))

    def takeover() -> None:
        results["lease"] = h.store.acquire_lease(DISPATCHER_LEASE, "new", 10 * S)

    with _raw(h) as blocker:  # holds the job row: the enqueue stops after its fence check
        blocker.execute("SELECT * FROM jobs WHERE id = %s FOR UPDATE", (job.id,))
        te = threading.Thread(target=enqueue)
        te.start()
        time.sleep(0.3)
        h.advance(3 * S)  # the old lease has now expired: a takeover may proceed...
        tt = threading.Thread(target=takeover)
        tt.start()
        time.sleep(0.3)
        assert te.is_alive() and tt.is_alive(), "...but only after the enqueue in flight ends"
        blocker.rollback()
        te.join(timeout=10)
        tt.join(timeout=10)
    (fid,) = results["enqueue"].inserted
    assert h.store.get_firing(fid).enqueued_epoch == old.epoch
    assert results["lease"].holder == "new" and results["lease"].epoch == old.epoch + 1


def test_enqueue_racing_a_takeover_is_linearizable(h: Harness) -> None:
    """The old leader's enqueue and a takeover, started together, 20 times. The taker's
    view of time is 1 s ahead (the lease has just expired for it, not for the old
    leader): either the enqueue commits under the old epoch and the takeover follows,
    or the takeover wins and the enqueue is fenced out having written nothing."""
    from cronwheel.store.postgres import DbTime, PostgresStore

    mine = _store(h).db_time
    taker_time = DbTime(frozen_at=mine.frozen_at)
    taker = PostgresStore(PG_URL, schema=_store(h).schema, db_time=taker_time, pool_size=1)
    wins = {"enqueue": 0, "takeover": 0}
    try:
        for i in range(20):
            job = h.store.create_job(spec(f"race{i}"), first_fire_at=h.now())
            old = h.store.acquire_lease(DISPATCHER_LEASE, f"old{i}", 1 * S)
            assert old is not None
            taker_time.offset = mine.offset + 1 * S
            barrier = threading.Barrier(2)
            out: dict[str, Any] = {}

            def enqueue(
                old: Any = old, job: Any = job, barrier: Any = barrier, out: Any = out
            ) -> None:
                barrier.wait()
                try:
                    out["e"] = h.store.enqueue(old, _advance(job, job.next_fire_at))
                except LeaseLostError as exc:
                    out["e"] = exc

            def takeover(i: int = i, barrier: Any = barrier, out: Any = out) -> None:
                barrier.wait()
                out["t"] = taker.acquire_lease(DISPATCHER_LEASE, f"new{i}", 1 * S)

            threads = [threading.Thread(target=enqueue), threading.Thread(target=takeover)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=10)
            assert out["t"] is not None and out["t"].epoch == old.epoch + 1
            firings = h.store.list_firings(job_id=job.id)
            cursor = h.store.get_job_by_id(job.id).next_fire_at
            if isinstance(out["e"], LeaseLostError):  # the takeover won: nothing written
                wins["takeover"] += 1
                assert firings == [] and cursor == job.next_fire_at
            else:  # the enqueue won: all of it, under the old epoch, before the takeover
                wins["enqueue"] += 1
                assert [f.enqueued_epoch for f in firings] == [old.epoch]
                assert cursor != job.next_fire_at
            h.advance(3 * S)  # let the new lease lapse for the next round
    finally:
        taker.close()
    assert sum(wins.values()) == 20


def test_pool_recovers_after_its_connections_are_terminated(schema: str) -> None:
    from cronwheel.store.postgres import PostgresStore

    app = f"cw_term_{schema[-6:]}"
    sep = "&" if "?" in PG_URL else "?"
    store = PostgresStore(f"{PG_URL}{sep}application_name={app}", schema=schema, pool_size=4)
    try:
        store.migrate()
        assert store.acquire_lease(DISPATCHER_LEASE, "a", 10 * S) is not None
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (app,),
            ).fetchone()
        assert killed is not None and killed[0] >= 1
        errors = 0
        for call in [lambda: store.get_lease(DISPATCHER_LEASE)] * 3 + [
            lambda: store.acquire_lease(DISPATCHER_LEASE, "a", 10 * S)
        ] * 3:
            try:
                call()
            except StoreUnavailableError:
                errors += 1
        assert errors <= 1
        lease = store.acquire_lease(DISPATCHER_LEASE, "a", 10 * S)
        assert lease is not None and lease.holder == "a"
    finally:
        store.close()


def test_notify_wakes_a_listener_after_commit(h: Harness) -> None:
    woken = threading.Event()
    wakeup = h.store.open_wakeup(woken.set)
    try:
        assert wakeup.address is None
        time.sleep(0.3)  # let the listener connect
        woken.clear()
        h.store.enqueue_now(spec("now-1"))
        assert woken.wait(5)
    finally:
        started = time.monotonic()
        wakeup.close()
        assert time.monotonic() - started < 2


def test_concurrent_migrations_apply_once(schema: str) -> None:
    from cronwheel.store.postgres import PostgresStore

    stores = [PostgresStore(PG_URL, schema=schema, pool_size=1) for _ in range(4)]
    try:
        versions: list[int] = []
        threads = [
            threading.Thread(target=lambda s=s: versions.append(s.migrate())) for s in stores
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert len(versions) == 4 and len(set(versions)) == 1 and versions[0] >= 1
    finally:
        for s in stores:
            s.close()


def _hold_migration_lock(store: Any) -> psycopg.Connection[Any]:
    """Another session holding the schema's migration lock (a migration under way)."""
    conn = psycopg.connect(store.db.conninfo, autocommit=True)
    conn.execute(
        "SELECT pg_advisory_lock(hashtextextended('cronwheel.migrate:' || current_schema(), 0))"
    )
    return conn


def _migrate_within(store: Any, seconds: float) -> list[Any]:
    """``store.migrate()`` in a thread, joined for ``seconds``: a list that holds its
    version or error once it ends (empty if still running then; filled when it ends)."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(store.migrate())
        except Exception as exc:  # reported to the test
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    return out


def test_a_migrated_schema_is_migrated_again_without_the_lock(schema: str) -> None:
    """Every process of a deployment migrates as it starts: on a schema already at the
    code's last migration that is a read, not a turn on the lock (a fleet starting
    through a pooler queued there, each waiter holding a server connection)."""
    from cronwheel.store.postgres import PostgresStore

    store = PostgresStore(PG_URL, schema=schema, pool_size=2)
    try:
        latest = store.migrate()
        holder = _hold_migration_lock(store)
        try:
            assert _migrate_within(store, 10) == [latest]
        finally:
            holder.close()
    finally:
        store.close()


def test_a_migration_waits_for_anothers_past_the_stall_timeout(schema: str) -> None:
    """A migrate with work to do waits for the lock as long as another process's
    migration holds it (migrations are exempt from ``stall_timeout``): the wait is not
    shut as a frozen server's would be."""
    from cronwheel.store.postgres import PostgresStore

    sep = "&" if "?" in PG_URL else "?"
    store = PostgresStore(f"{PG_URL}{sep}stall_timeout=0.5", schema=schema, pool_size=2)
    try:
        latest = store.migrate()
        with psycopg.connect(store.db.conninfo, autocommit=True) as conn:
            conn.execute("DELETE FROM meta WHERE key = 'id_key'")  # a write left to do
        holder = _hold_migration_lock(store)
        try:
            waiting = _migrate_within(store, 2.0)  # four stall bounds
            assert waiting == []  # still waiting for the lock, not failed
        finally:
            holder.close()
        deadline = time.monotonic() + 10
        while not waiting and time.monotonic() < deadline:
            time.sleep(0.05)
        assert waiting == [latest]
        with psycopg.connect(store.db.conninfo, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM meta WHERE key = 'id_key'").fetchone()
        assert row == (1,)
    finally:
        store.close()


def test_payload_and_error_text_round_trip_exactly(h: Harness) -> None:
    from cronwheel.domain.models import JobSpec
    from cronwheel.domain.schedules import every
    from cronwheel.store.protocol import Completion

    s = JobSpec(
        name="exact",
        task="t",
        schedule=every("1m"),
        args=("nul\x00inside", 1e300, -0.0, 2**70),
        kwargs={"f": 1.5},
    )
    f = h.store.enqueue_now(s)  # json, not jsonb: no "\u0000" refusal, no number rewrite
    assert f.args == s.args and type(f.args[1]) is float
    assert h.store.get_job("default", "exact").spec == s
    (c,) = h.store.claim("w", tasks=["t"], limit=1)
    now = h.now()
    done = Completion(
        firing_id=c.firing.id,
        claim_token=c.claim_token,
        succeeded=False,
        started_at=now,
        finished_at=now,
        error="stderr: \x00 garbage",
    )
    assert h.store.complete([done]) == [True]
    assert h.store.get_firing(c.firing.id).error == "stderr: \ufffd garbage"


# -- policies under concurrency ------------------------------------------------------------
def _retried(stores: list[Any]) -> dict[str, int]:
    out = {"deadlock": 0, "serialization": 0}
    for s in stores:
        for k, v in s.db.retried.items():
            out[k] += v
    return out


class _RunningMonitor:
    """Polls the RUNNING count of some jobs from its own connection; keeps the maximum."""

    def __init__(self, h: Harness, job_ids: list[int]) -> None:
        self.max: dict[int, int] = dict.fromkeys(job_ids, 0)
        self._conninfo = _store(h).db.conninfo
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with psycopg.connect(self._conninfo, autocommit=True) as conn:
            while not self._stop.is_set():
                for job_id, n in conn.execute(
                    "SELECT job_id, count(*) FROM firings WHERE job_id = ANY (%s) "
                    "AND state = 'running' GROUP BY job_id",
                    (list(self.max),),
                ).fetchall():
                    self.max[job_id] = max(self.max[job_id], n)

    def stop(self) -> dict[int, int]:
        self._stop.set()
        self._thread.join(timeout=5)
        return self.max


def test_concurrent_claimers_never_exceed_a_jobs_cap(h: Harness) -> None:
    """Six claimers (each its own pool) drain 60 due firings of a job capped at 2
    (buffer_all): the cap holds at every instant, nothing is skipped or lost, and no
    transaction is ever rolled back as a deadlock (not even one retried silently)."""
    from cronwheel.domain.overlap import OverlapPolicy
    from cronwheel.store.protocol import Completion

    job = h.store.create_job(
        spec(
            "capped",
            overlap=OverlapPolicy.BUFFER_ALL,
            max_concurrency=2,
            visibility_timeout=3600 * S,
        ),
        first_fire_at=h.now() - 60 * S,
    )
    lease = h.store.acquire_lease(DISPATCHER_LEASE, "leader", 60 * S)
    assert lease is not None
    instants = [h.now() - (60 - i) * S for i in range(60)]
    ids = h.store.enqueue(
        lease,
        [
            JobAdvance(
                job_id=job.id,
                expected_next_fire_at=job.next_fire_at,  # type: ignore[arg-type]
                new_next_fire_at=h.now() + 60 * S,
                firings=[PlannedFiring(scheduled_for=t) for t in instants],
            )
        ],
    ).inserted
    assert len(ids) == 60
    stores = [h.open_another() for _ in range(6)]
    held = {"now": 0, "max": 0}
    lock = threading.Lock()
    errors: list[BaseException] = []
    done: list[int] = []
    monitor = _RunningMonitor(h, [job.id])

    def worker(i: int) -> None:
        store = stores[i]
        try:
            idle_since = time.monotonic()
            while time.monotonic() - idle_since < 1.0:
                claims = store.claim(f"w{i}", tasks=["t"], limit=3)
                if not claims:
                    time.sleep(0.002)
                    continue
                idle_since = time.monotonic()
                with lock:
                    held["now"] += len(claims)
                    held["max"] = max(held["max"], held["now"])
                time.sleep(0.003 * (1 + i % 3))
                with lock:  # before completing: the store still counts them RUNNING
                    held["now"] -= len(claims)
                now = store.now()
                ok = store.complete(
                    [
                        Completion(
                            firing_id=c.firing.id,
                            claim_token=c.claim_token,
                            succeeded=True,
                            started_at=now,
                            finished_at=now,
                        )
                        for c in claims
                    ]
                )
                assert all(ok)
                with lock:
                    done.extend(c.firing.id for c in claims)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    peak = monitor.stop()
    assert not errors, errors
    assert held["max"] <= 2 and peak[job.id] <= 2, (held, peak)
    assert sorted(done) == sorted(ids)
    states = {f.state.value for f in h.store.list_firings(job_id=job.id, limit=100)}
    assert states == {"succeeded"}
    assert _retried([_store(h), *stores]) == {"deadlock": 0, "serialization": 0}


def test_mixed_policies_under_load_keep_caps_without_deadlocks(h: Harness) -> None:
    """Claimers, workers (heartbeats, completions, cancellations honoured), a trigger
    source (add_firings) and the reaper, all at once, on jobs with every overlap
    policy that takes locks beyond the candidates (cancel_other, terminate_other,
    skip, buffer_one) and an uncapped one: caps hold and no deadlock is ever detected."""
    from cronwheel.domain.overlap import OverlapPolicy
    from cronwheel.store.protocol import Completion

    policies = {
        "co": OverlapPolicy.CANCEL_OTHER,
        "to": OverlapPolicy.TERMINATE_OTHER,
        "sk": OverlapPolicy.SKIP,
        "b1": OverlapPolicy.BUFFER_ONE,
        "al": OverlapPolicy.ALLOW,
    }
    jobs = {
        name: h.store.create_job(
            spec(
                name,
                overlap=p,
                visibility_timeout=3600 * S,
                cancel_grace=timedelta(milliseconds=20),
            ),
            first_fire_at=None,
        )
        for name, p in policies.items()
    }
    capped_ids = [j.id for n, j in jobs.items() if n != "al"]
    stores = [h.open_another() for _ in range(6)]
    api = stores[4]
    errors: list[BaseException] = []
    stop = threading.Event()
    monitor = _RunningMonitor(h, capped_ids)

    def guard(fn: Any) -> Any:
        def run(*args: Any) -> None:
            try:
                fn(*args)
            except BaseException as exc:
                errors.append(exc)
                stop.set()

        return run

    @guard
    def worker(i: int) -> None:
        store = stores[i]
        mine: list[Any] = []
        n = 0
        while not stop.is_set():
            mine.extend(store.claim(f"w{i}", tasks=["t"], limit=2))
            if not mine:
                time.sleep(0.001)
                continue
            claims = [(c.firing.id, c.claim_token) for c in mine]
            lost = store.heartbeat(f"w{i}", claims)
            cancel = store.cancel_requested(claims)
            now = store.now()
            n += 1
            finish = [c for c in mine if c.firing.id in lost | cancel or n % 2 == 0]
            store.complete(
                [
                    Completion(
                        firing_id=c.firing.id,
                        claim_token=c.claim_token,
                        succeeded=c.firing.id not in cancel,
                        cancelled=c.firing.id in cancel,
                        started_at=now,
                        finished_at=now,
                    )
                    for c in finish
                ]
            )
            mine = [c for c in mine if c not in finish]

    @guard
    def triggers() -> None:
        k = 0
        while not stop.is_set():
            k += 1
            for name in jobs:
                api.add_firings("default", name, [h.now() - k * S], note="trigger")
            time.sleep(0.002)

    @guard
    def reaper() -> None:
        while not stop.is_set():
            stores[5].requeue_expired()
            time.sleep(0.005)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    threads += [threading.Thread(target=triggers), threading.Thread(target=reaper)]
    for t in threads:
        t.start()
    # run the mixed load until every fate has occurred (bounded: 75 s; the pytest timeout is
    # 120 s), at least 1 s
    # (each fate is looked up by state over the whole history: a window of the newest firings
    # can be all queued and skipped on a loaded machine, where the triggers outrun the workers)
    fates = [FiringState.SUCCEEDED, FiringState.SKIPPED, FiringState.CANCELLED]

    def occurred(store: Any) -> set[str]:
        return {s.value for s in fates if store.list_firings(states=[s], limit=1)}

    started = time.monotonic()
    while time.monotonic() - started < 75 and not stop.is_set():
        time.sleep(0.2)
        if time.monotonic() - started > 1 and occurred(api) == {s.value for s in fates}:
            break
    stop.set()
    for t in threads:
        t.join(timeout=30)
    peak = monitor.stop()
    assert not errors, errors
    assert all(n <= 1 for n in peak.values()), peak
    assert occurred(h.store) == {"succeeded", "skipped", "cancelled"}
    assert _retried([_store(h), *stores]) == {"deadlock": 0, "serialization": 0}


def test_a_version_1_database_migrates_in_place(schema: str) -> None:
    """A database made by the first release keeps its jobs and firings: the policy
    columns arrive with their defaults, and the old work stays claimable."""
    from psycopg.types.json import Jsonb

    from cronwheel.domain.models import JobPolicies
    from cronwheel.domain.schedules import every
    from cronwheel.store.postgres import PostgresStore

    old_policies = {  # JobPolicies.to_dict() as the first release wrote it
        k: v
        for k, v in JobPolicies().to_dict().items()
        if k not in {"max_concurrency", "overlap", "max_buffer", "cancel_grace_s"}
        and k not in {"start_deadline_s", "jitter_s"}
    }
    store = PostgresStore(PG_URL, schema=schema, pool_size=2)
    try:
        with psycopg.connect(store.db.conninfo, autocommit=True) as conn:
            conn.execute(store.db.migrations()["migration_1"])  # type: ignore[arg-type]
            conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '1')")
            conn.execute(
                """
                INSERT INTO jobs (namespace, name, task, schedule, payload, policies, spec_hash,
                                  priority, max_attempts, visibility_us, next_fire_at,
                                  created_at, updated_at, shard)
                VALUES ('default', 'old', 't', %s, '{"args": [], "kwargs": {}}', %s, 'h', 1, 3,
                        30000000, now(), now(), now(), 7)
                """,
                (Jsonb(every("1m").to_dict()), Jsonb(old_policies)),
            )
            conn.execute(
                """
                INSERT INTO firings (job_id, namespace, job_name, task, payload, scheduled_for,
                                     due_at, vdeadline, state, max_attempts, priority,
                                     visibility_us, enqueued_at, shard)
                SELECT id, namespace, name, task, payload, now(), now(), now(), 'queued',
                       3, 1, 30000000, now(), 7
                FROM jobs
                """
            )
        latest = len(
            [
                k
                for k in load_queries("cronwheel.store.postgres", "schema.sql")
                if k.startswith("migration_")
            ]
        )
        assert store.migrate() == latest >= 3
        assert store.migrate() == latest
        row = store.db.read(lambda tx: tx.conn.execute("SELECT * FROM jobs").fetchall())[0]
        assert (row["max_concurrency"], row["overlap"], row["max_buffer"]) == (None, "skip", 100)
        assert (row["cancel_grace_us"], row["start_deadline_us"]) == (30_000_000, None)
        assert (row["bounds"], row["remaining_runs"]) == ({}, None)
        (claim,) = store.claim("w", tasks=["t"], limit=5)
        assert claim.firing.job_name == "old" and claim.firing.reason is None
        assert claim.firing.overlap_override is None
        tables = {
            r["t"]
            for r in store.db.read(
                lambda tx: tx.conn.execute(
                    "SELECT tablename AS t FROM pg_tables WHERE schemaname = current_schema()"
                ).fetchall()
            )
        }
        assert {"api_tokens", "idempotency_keys", "fair_clocks"} <= tables
    finally:
        store.close()


def test_only_the_claim_is_planned_once_per_session(h: Harness) -> None:
    """The claim's functions (migration_17) run on generic plans, planned once per
    session: as a prepared statement PostgreSQL planned the claim afresh on every call
    (a few hundred microseconds per partition of firings). The sessions keep the
    default choice for every other statement (a generic plan made status' range read
    of finished_counts a sequential scan), and the claim still claims."""
    store = _store(h)
    rows = store.db.read(
        lambda tx: tx.conn.execute(
            "SELECT proname, proconfig FROM pg_proc WHERE proname IN"
            " ('cronwheel_claim_fast', 'cronwheel_claim_scan')"
            " AND pronamespace = current_schema()::regnamespace ORDER BY proname"
        ).fetchall()
    )
    assert [r["proname"] for r in rows] == ["cronwheel_claim_fast", "cronwheel_claim_scan"]
    assert all("plan_cache_mode=force_generic_plan" in r["proconfig"] for r in rows)
    mode = store.db.read(lambda tx: tx.conn.execute("SHOW plan_cache_mode").fetchone())
    assert mode is not None and mode["plan_cache_mode"] == "auto"
    ids = _queued(h, 3)
    claimed = store.claim("w", tasks=["t"], limit=5)
    assert sorted(c.firing.id for c in claimed) == sorted(ids)
    assert {c.firing.state.value for c in claimed} <= {"running", "claimed"}


def test_retention_bounds_read_only_the_jobs_that_override(h: Harness) -> None:
    """At the start of each retention pass and for each day it decides: the jobs that
    override a retention policy (jobs_retention_override) and the namespaces by a skip
    scan, never every job (one-shot jobs, kept as long as their firings, are most)."""
    store = _store(h)
    for i in range(200):
        store.create_job(spec(f"plain{i}", namespace=f"ns{i % 3}"), first_fire_at=h.now())
    store.create_job(spec("own", keep_for=timedelta(days=2)), first_fire_at=h.now())
    with _raw(h) as conn:
        conn.execute("SET enable_seqscan = off")  # a small table: ask which index it can use
        for name in ("retention_job_bounds", "retention_longest_keep_for"):
            text = store.db.q[name]
            plan = [r[0] for r in conn.execute("EXPLAIN " + text).fetchall()]
            assert any("jobs_retention_override" in line for line in plan), (name, plan)
            assert not any("Seq Scan on jobs" in line for line in plan), (name, plan)
        plan = [r[0] for r in conn.execute("EXPLAIN " + store.db.q["retention_namespaces"])]
        assert not any("Seq Scan on jobs" in line for line in plan), plan
    row = store.db.read(lambda tx: tx.one("retention_longest_keep_for"))
    assert row is not None and row["keep_for_s"] == 2 * 86400
    assert store.namespaces_in_use() == ["default", "ns0", "ns1", "ns2"]


def test_concurrent_finishes_do_not_wait_on_each_others_counter_rows(h: Harness) -> None:
    """Two transactions finishing firings at once (two workers' completion batches) do
    not wait for each other on the finish counters (finished_counts, status' last hour):
    a transaction's finishes of one (minute, namespace, state) go to one slot, picked by
    its transaction id (migration_22). By firing id (id % 8), a batch of eight took
    every slot's row lock until its commit, and the workers' completions ran one at a
    time."""
    h.store.create_job(spec("many"), first_fire_at=None)
    added = h.store.add_firings(
        "default", "many", [h.now() - k * S for k in range(1, 17)], note="t"
    )
    ids = [f.id for f in added.inserted]
    assert len(ids) == 16
    finish = "UPDATE firings SET state = 'succeeded', finished_at = %s WHERE id = ANY (%s)"
    slot = "SELECT pg_current_xact_id()::text::bigint % 16"
    at = h.now()
    first, second = _raw(h), _raw(h)
    try:
        first.execute(finish, (at, ids[:8]))
        (mine,) = first.execute(slot).fetchone() or (None,)
        # the second transaction's slot differs from the first's (transaction ids are
        # consecutive unless another session took one between: then take a new one)
        for _ in range(8):
            (theirs,) = second.execute(slot).fetchone() or (None,)
            if theirs != mine:
                break
            second.rollback()
        assert theirs != mine
        second.execute("SET LOCAL lock_timeout = '2s'")
        # waits (and fails with LockNotAvailable after 2 s) if a counter row is the first's
        second.execute(finish, (at, ids[8:]))
        second.commit()
        first.commit()
        rows = first.execute(
            "SELECT slot, n FROM finished_counts WHERE state = 'succeeded' ORDER BY slot"
        ).fetchall()
    finally:
        first.close()
        second.close()
    assert sorted(rows) == sorted([(mine, 8), (theirs, 8)])
