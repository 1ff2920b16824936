"""PostgreSQL: firings partitioned by day (schema.sql migration_16,
store/postgres/partitions.py) — whole days dropped by retention when every firing of
them may go, the batched pass for the rest, a day changed under a drop left alone,
and the migration from version 15 on a database holding data."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from cronwheel.domain.firing import FiringState
from cronwheel.domain.retention import DEFAULT_RETENTION
from cronwheel.store.postgres.partitions import _Abandoned
from cronwheel.store.protocol import DISPATCHER_LEASE, Completion, JobAdvance, PlannedFiring
from tests.conftest import require_service
from tests.contract.conftest import Harness, spec
from tests.contract.pg_harness import drop_schema, new_schema, postgres_harness
from tests.contract.test_store_contract import _fire

DAY = timedelta(days=1)
H = timedelta(hours=1)


@pytest.fixture
def h(tmp_path: Any) -> Iterator[Harness]:
    yield from postgres_harness(tmp_path)


@pytest.fixture
def schema() -> Iterator[str]:
    try:
        name = new_schema()
    except psycopg.OperationalError as exc:
        require_service("PostgreSQL", exc)
        raise
    yield name
    drop_schema(name)


def _sql(store: Any, text: str, *args: Any) -> list[Any]:
    return store.db.read(lambda tx: tx.conn.execute(text, args or None).fetchall())


def _parts(store: Any) -> set[str]:
    return {name for name, _, _ in store.partitions()}


def _midnight(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def _expected_survivors(rows: list[Any], now: datetime) -> set[int]:
    """The domain's rules by hand: finished within keep_for, or the newest firing of
    its job with its outcome; on PostgreSQL, also any firing of a day that has not
    ended keep_for ago (the batched walk leaves it to the drop of its whole day)."""
    newest: dict[tuple[int, str], Any] = {}
    for r in rows:
        key = (r["job_id"], r["state"])
        if key not in newest or r["scheduled_for"] > newest[key]["scheduled_for"]:
            newest[key] = r
    keep = {r["id"] for r in newest.values()}
    young = {r["id"] for r in rows if now - r["finished_at"] < DEFAULT_RETENTION.keep_for}
    # a day that is over and holds nothing kept goes whole, as soon as its last firing
    # has aged past keep_for: up to a day before its end + keep_for
    days: dict[datetime, list[int]] = {}
    for r in rows:
        days.setdefault(_midnight(r["scheduled_for"]), []).append(r["id"])
    whole = {d for d, ids in days.items() if d + DAY <= now and not set(ids) & (keep | young)}
    # the others' firings are left to the drop of their day until it has had its chance
    waiting = {
        r["id"]
        for r in rows
        if _midnight(r["scheduled_for"]) not in whole
        and _midnight(r["scheduled_for"]) + DAY + DEFAULT_RETENTION.keep_for > now
    }
    return keep | young | waiting


def test_whole_days_past_the_policy_are_dropped_and_the_rest_pruned_by_rows(h: Harness) -> None:
    store: Any = h.store
    job = store.create_job(spec("hourly"), first_fire_at=h.now())
    other = store.create_job(spec("other"), first_fire_at=h.now())
    start = _midnight(h.now()) - 12 * DAY
    # 12 days of hourly history (one in a hundred DEAD), each day a partition made on insert
    store.load_history(first_job=job.id, jobs=1, start=start, step=H, count=12 * 24 + 5)
    # the other job fired once, 10 days ago: its last success must stay (keep_last), so
    # that day is not dropped whole but pruned row by row
    once = start + 2 * DAY + timedelta(minutes=30)
    store.load_history(first_job=other.id, jobs=1, start=once, step=H, count=1)
    before = _sql(store, "SELECT id, job_id, state, scheduled_for, finished_at FROM firings")
    counts_before = _sql(
        store,
        "SELECT coalesce(sum(n), 0) AS n FROM finished_counts WHERE minute >= %s",
        int((h.now() - 2 * DAY).timestamp()) // 60,
    )
    days = {f"firings_p{(start + i * DAY):%Y%m%d}" for i in range(12)}
    assert days <= _parts(store)

    report = store.prune_history()

    now = h.now()
    left = {r["id"] for r in _sql(store, "SELECT id FROM firings")}
    assert left == _expected_survivors(before, now)
    assert report.deleted == len(before) - len(left)
    # days 12 .. 8 ago ended more than 7 days ago and hold nothing kept: dropped whole,
    # but the day of the other job's only success, which stays
    dropped = days - _parts(store)
    assert report.partitions == len(dropped) >= 3
    assert f"firings_p{(start + 2 * DAY):%Y%m%d}" not in dropped
    assert f"firings_p{(start + 2 * DAY):%Y%m%d}" in _parts(store)
    # what was dropped is in the job's pruned event, as the batched pass would put it
    (event,) = [e for e in store.job_events(job.id) if e.kind == "pruned"]
    assert event.count == sum(1 for r in before if r["job_id"] == job.id and r["id"] not in left)
    assert event.first_at == start
    # finish counters (status' last hour) are counted at finish time, not changed by a drop
    counts_after = _sql(
        store,
        "SELECT coalesce(sum(n), 0) AS n FROM finished_counts WHERE minute >= %s",
        int((h.now() - 2 * DAY).timestamp()) // 60,
    )
    assert counts_after == counts_before
    # a second pass finds nothing more
    again = store.prune_history()
    assert (again.deleted, again.partitions) == (0, 0)


def test_a_day_with_an_unfinished_firing_is_not_dropped(h: Harness) -> None:
    store: Any = h.store
    job = store.create_job(spec("late"), first_fire_at=h.now() - 10 * DAY)
    old = _midnight(h.now()) - 10 * DAY + H
    (fid,) = _fire(h, job, old).inserted  # a catch-up: QUEUED, its day long over
    report = store.prune_history()
    assert report.partitions == 0
    assert f"firings_p{old:%Y%m%d}" in _parts(store)
    assert store.get_firing(fid).state is FiringState.QUEUED


def test_a_day_changed_between_the_decision_and_the_drop_is_left_whole(h: Harness) -> None:
    store: Any = h.store
    job = store.create_job(spec("redriven"), first_fire_at=h.now())
    start = _midnight(h.now()) - 10 * DAY
    store.load_history(first_job=job.id, jobs=1, start=start, step=H, count=24)
    store.load_history(first_job=job.id, jobs=1, start=_midnight(h.now()), step=H, count=1)
    name = f"firings_p{start:%Y%m%d}"
    store.start_drops()
    store._drop_queue = [(n, hi) for n, hi in store._drop_queue if n == name]
    while store._dropping is None or store._dropping.phase in ("groups", "newer"):
        store.drop_step()  # the decision's steps
    drop = store._dropping
    assert drop.name == name and drop.longest == DEFAULT_RETENTION.keep_for
    job = store.get_job_by_id(job.id)
    (late,) = _fire(h, job, start + timedelta(minutes=30)).inserted  # a catch-up, after it
    with pytest.raises(_Abandoned):
        store._detach(drop)
    assert name in _parts(store)
    assert len(_sql(store, f"SELECT id FROM {name}")) == 25
    assert store.get_firing(late).state is FiringState.QUEUED


def _relfile(store: Any, rel: str) -> int:
    return int(_sql(store, "SELECT pg_relation_filenode(%s::regclass) AS f", rel)[0]["f"])


def test_a_version_15_database_holding_data_migrates_online(schema: str) -> None:
    """The migration from version 15 keeps every row (firings in every state, attempts,
    idempotency keys), rewrites no table and builds no index in its transaction (the
    old table and the index built beforehand CONCURRENTLY are the legacy partition's),
    and the work in flight goes on: a RUNNING firing completes with the token it was
    claimed with, a held one starts, a QUEUED one is claimed, ids go on from the old
    ones, (job, instant) stays unique, deleting a job takes its attempts and keys."""
    from tests.contract import pg_legacy

    store = pg_legacy.open_at_version_15(schema)
    try:
        old = pg_legacy.fill(store)
        before = pg_legacy.snapshot(store)
        assert {r["state"] for r in before["firings"]} >= {
            "succeeded",
            "dead",
            "queued",
            "claimed",
            "running",
            "cancelled",
            "skipped",
        }
        assert before["firing_attempts"] and before["idempotency_keys"]
        counted = store.db.read(
            lambda tx: tx.conn.execute(
                "SELECT (SELECT used FROM quota_usage WHERE namespace = %s AND quota = 'jobs'"
                " AND window_start = 0) AS jobs,"
                " (SELECT value::bigint FROM meta WHERE key = 'jobs_version') AS version",
                (pg_legacy.NS,),
            ).fetchone()
        )
        table = _relfile(store, "firings")
        boundary = store.prepare_partitioning()  # online: CHECK NOT VALID, VALIDATE, index
        assert boundary is not None and boundary == pg_legacy.midnight(boundary)
        index = _relfile(store, "firings_id_at")
        latest = max(int(k.split("_")[1]) for k in store.db.migrations())
        assert store.migrate() == latest >= 16
        assert store.migrate() == latest
        assert pg_legacy.snapshot(store) == before
        # the jobs counter moved to its shards, the version stayed (migration 20)
        assert counted["jobs"] == len(old.jobs) == store.status(namespace=pg_legacy.NS).jobs
        assert store.jobs_version() == counted["version"]
        # the old table is the legacy partition, not rewritten; the index not rebuilt
        assert _relfile(store, "firings_legacy") == table
        assert _relfile(store, "firings_legacy_id_at") == index
        parts = store.partitions()
        assert parts[0][0] == "firings_legacy" and parts[0][2] == boundary
        assert all(lo >= boundary for _, lo, _ in parts[1:])

        now = store.now()
        assert old.running is not None and old.claimed is not None
        assert store.start("w-old", [(old.claimed.firing.id, old.claimed.claim_token)]) == {
            old.claimed.firing.id
        }
        assert store.complete(
            [
                Completion(
                    firing_id=old.running.firing.id,
                    claim_token=old.running.claim_token,
                    succeeded=True,
                    started_at=now,
                    finished_at=now,
                )
            ]
        ) == [True]
        claimed = store.claim("w-new", tasks=[pg_legacy.TASK], limit=10)
        assert {c.firing.id for c in claimed} == {old.queued, old.idempotent}
        # new firings: ids after the old ones, in today's partition; a duplicate rejected
        lease = store.acquire_lease(DISPATCHER_LEASE, "leader", timedelta(minutes=5))
        assert lease is not None
        job = store.get_job_by_id(old.jobs["work"])
        instant = now + 3 * DAY
        advance = JobAdvance(
            job_id=job.id,
            expected_next_fire_at=job.next_fire_at,
            new_next_fire_at=instant + H,
            firings=[PlannedFiring(scheduled_for=instant)],
        )
        (new_id,) = store.enqueue(lease, [advance]).inserted
        assert new_id > max(r["id"] for r in before["firings"])
        job = store.get_job_by_id(old.jobs["work"])
        dup = JobAdvance(
            job_id=job.id,
            expected_next_fire_at=job.next_fire_at,
            new_next_fire_at=instant + 2 * H,
            firings=[PlannedFiring(scheduled_for=instant)],
        )
        assert list(store.enqueue(lease, [dup]).inserted) == []
        # deleting jobs takes their attempts and idempotency keys (the cascade trigger)
        store.delete_job(pg_legacy.NS, "fail")
        store.delete_job(pg_legacy.NS, "once")
        after = pg_legacy.snapshot(store)
        assert after["firing_attempts"] == [] and after["idempotency_keys"] == []
    finally:
        store.close()


def test_a_migrated_database_never_waits_for_the_first_steps_lock(h: Harness) -> None:
    """Every process migrates at start: past version 15 the online first step must not
    take its session lock (through PgBouncer in transaction mode the lock and its unlock
    land on different server connections, and 40 workers over a pool of 10 hung). With
    the lock held elsewhere, a migrated store's first step returns at once."""
    import threading

    from cronwheel.store.postgres.db import query

    store = h.store
    done: list[Any] = []
    with psycopg.connect(store.db.conninfo, autocommit=True) as other:
        other.execute(query(store.db.q["prep_lock"]))
        try:
            t = threading.Thread(target=lambda: done.append(store.prepare_partitioning()))
            t.start()
            t.join(timeout=30)  # generous on a loaded machine: the call is a few queries
            assert done == [None], "the first step waited for a lock it does not need"
        finally:
            other.execute(query(store.db.q["prep_unlock"]))
            t.join()


def _one_shot_ids(store: Any, name: str) -> set[int]:
    rows = _sql(
        store,
        f"SELECT p.job_id FROM {name} p JOIN jobs j ON j.id = p.job_id"
        " WHERE j.schedule->>'kind' IN ('at', 'now')",
    )
    return {r["job_id"] for r in rows}


def _day_of_mixed_history(h: Harness) -> tuple[Any, str, datetime]:
    """A day 10 days ago: 24 hourly firings of a recurring job and 30 immediate one-shot
    jobs (a job row each, as app.enqueue leaves them); the recurring job also fired
    today (so that keep_last does not hold its old ones)."""
    store: Any = h.store
    job = store.create_job(spec("hourly"), first_fire_at=h.now())
    start = _midnight(h.now()) - 10 * DAY
    store.load_history(first_job=job.id, jobs=1, start=start, step=H, count=24)
    store.load_history(
        first_job=job.id, jobs=1, start=start + timedelta(minutes=1), step=H / 2, count=30,
        one_shots=True,
    )  # fmt: skip
    store.load_history(first_job=job.id, jobs=1, start=_midnight(h.now()), step=H, count=1)
    return job, f"firings_p{start:%Y%m%d}", start


def test_a_day_of_one_shot_jobs_goes_a_chunk_per_leader_step(h: Harness) -> None:
    """The leader's pass (max_batches=1 per dispatcher step) decides a day (its 54
    firings read in a step, its newer firings counted in the next), deletes its one-shot
    jobs a chunk per step (never more than a chunk's firings), then drops the day: every
    one-shot job gone, the recurring job's firings summed in its pruned event, nothing
    else touched."""
    store: Any = h.store
    job, name, _start = _day_of_mixed_history(h)
    one_shots = _one_shot_ids(store, name)
    assert len(one_shots) == 30
    store.one_shot_scan = 10
    reports = []
    cursor = None
    while True:
        report = store.prune_history(max_batches=1, cursor=cursor)
        reports.append(report)
        cursor = report.cursor
        if not report.partitions:  # a drop deletes no row: its count is the day's
            assert report.deleted <= store.one_shot_scan
        if report.done:
            break
        assert len(reports) < 50
    assert sum(r.partitions for r in reports) == 1
    assert name not in _parts(store)
    assert sum(r.jobs for r in reports) == 30
    # decided, then 54 firings read 10 at a time (the chunks stop once the 30 are gone)
    chunks = [r for r in reports if r.jobs]
    assert len(chunks) >= 3
    left = _sql(store, "SELECT count(*) AS n FROM jobs WHERE id = ANY(%s)", list(one_shots))
    assert left[0]["n"] == 0
    (event,) = [e for e in store.job_events(job.id) if e.kind == "pruned"]
    assert event.count == 24
    assert [r["n"] for r in _sql(store, "SELECT count(*) AS n FROM firings")] == [1]


def _pass_steps(store: Any) -> list[Any]:
    """A whole pass as the leader runs it, a step at a time: each step's report."""
    reports: list[Any] = []
    cursor = None
    while not reports or not reports[-1].done:
        report = store.prune_history(max_batches=1, cursor=cursor)
        reports.append(report)
        cursor = report.cursor
        assert len(reports) < 100, "the pass did not end in 100 steps"
    return reports


def test_a_day_is_decided_and_its_one_shot_jobs_deleted_in_bounded_steps(h: Harness) -> None:
    """The decision reads the day ``decide_scan`` firings a step (its 54: 6 steps, then
    one counting the recurring job's newer firings), and a step deletes at most
    ``one_shot_jobs`` one-shot jobs (the 30: 8 steps of at most 4): every one-shot
    job goes, the day is dropped, its recurring firings summed in the pruned event."""
    store: Any = h.store
    job, name, _start = _day_of_mixed_history(h)
    store.decide_scan, store.one_shot_scan, store.one_shot_jobs = 10, 100, 4
    reports = _pass_steps(store)
    assert name not in _parts(store)
    assert sum(r.partitions for r in reports) == 1
    deciding = [r for r in reports if r.scanned and not r.jobs and not r.partitions]
    assert [r.scanned for r in deciding[:6]] == [10, 10, 10, 10, 10, 4]
    chunks = [r.jobs for r in reports if r.jobs]
    assert max(chunks) == 4 and sum(chunks) == 30 and len(chunks) == 8
    left = _sql(store, "SELECT count(*) AS n FROM jobs WHERE schedule->>'kind' IN ('at', 'now')")
    assert left[0]["n"] == 0
    (event,) = [e for e in store.job_events(job.id) if e.kind == "pruned"]
    assert event.count == 24


def test_a_day_with_a_scheduled_firing_is_not_dropped(h: Harness) -> None:
    """A firing in SCHEDULED state (not terminal, not in the facts' live states) found
    by a chunk of the decision keeps its day: the decision stops at that chunk (the
    third of 10: the recurring job's 24 firings come first), nothing of the day is
    deleted by the drop work, and the walk that follows leaves the firing too."""
    store: Any = h.store
    job, name, _start = _day_of_mixed_history(h)
    (row,) = _sql(
        store,
        f"UPDATE {name} SET state = 'scheduled', finished_at = NULL"
        f" WHERE id = (SELECT max(id) FROM {name} WHERE job_id = %s) RETURNING id",
        job.id,
    )
    store.decide_scan = 10
    chunks: list[int] = []
    read = store._groups_chunk
    store._groups_chunk = lambda drop, report: chunks.append(drop.after_id) or read(drop, report)
    reports = _pass_steps(store)
    assert len(chunks) == 3
    assert sum(r.partitions for r in reports) == 0
    assert name in _parts(store)
    assert store.get_firing(row["id"]).state is FiringState.SCHEDULED


def test_a_day_detached_and_not_dropped_is_dropped_by_the_next_pass(h: Harness) -> None:
    """The drop is two transactions: DETACH (the parent's lock) and, the next step, DROP
    TABLE (its commit unlinks the files, off that lock). A leader stopped between them
    leaves the table detached: it is out of firings at once, and the next pass drops it."""
    store: Any = h.store
    _job, name, _start = _day_of_mixed_history(h)
    store.start_drops()
    for _ in range(50):
        store.drop_step()
        if store._dropping is not None and store._dropping.phase == "release":
            break
    assert name not in _parts(store)
    assert _sql(store, "SELECT to_regclass(%s) IS NOT NULL AS t", name)[0]["t"]
    store._dropping = store._drop_queue = None  # the leader stops here
    _pass_steps(store)
    assert not _sql(store, "SELECT to_regclass(%s) IS NOT NULL AS t", name)[0]["t"]


def _redrive_after_the_decision(store: Any, column: str, value: int) -> None:
    """A pass as the leader runs it (a step at a time, chunks of 10 firings): its first
    step decides the oldest day, then the firings whose ``column`` is ``value`` are
    queued again (a re-drive), then the pass runs to its end."""
    store.one_shot_scan = 10
    first = store.prune_history(max_batches=1)  # the decision
    assert first.deleted == 0 and first.partitions == 0 and not first.done
    _sql(
        store,
        "UPDATE firings SET state = 'queued', finished_at = NULL, due_at = now()"
        f" WHERE {column} = %s RETURNING id",
        value,
    )
    cursor = first.cursor
    for _ in range(50):
        report = store.prune_history(max_batches=1, cursor=cursor)
        cursor = report.cursor
        if report.done:
            return
    raise AssertionError("the pass did not end in 50 steps")


def test_a_one_shot_job_changed_during_the_chunks_keeps_its_day(h: Harness) -> None:
    """A one-shot firing of a day being dropped re-queued after the decision (a re-drive):
    its job stays, the day is not dropped (what the chunks deleted before stays deleted,
    each was prunable on its own), the recurring job's firings go row by row in the walk
    that follows (their day ended more than keep_for ago)."""
    store: Any = h.store
    job, name, _start = _day_of_mixed_history(h)
    redriven = max(_one_shot_ids(store, name))
    _redrive_after_the_decision(store, "job_id", redriven)
    assert name in _parts(store)
    assert _one_shot_ids(store, name) == {redriven}
    states = _sql(store, f"SELECT state FROM {name} WHERE job_id = %s", redriven)
    assert [r["state"] for r in states] == ["queued"]
    recurring = _sql(store, f"SELECT count(*) AS n FROM {name} WHERE job_id <> %s", redriven)
    assert recurring[0]["n"] == 0
    (event,) = [e for e in store.job_events(job.id) if e.kind == "pruned"]
    assert event.count == 24


def _dependents(store: Any, name: str) -> tuple[int, int]:
    """The attempts and idempotency keys of the firings of partition ``name``."""
    (row,) = _sql(
        store,
        f"SELECT (SELECT count(*) FROM firing_attempts a JOIN {name} p ON p.id = a.firing_id)"
        f" AS a, (SELECT count(*) FROM idempotency_keys k JOIN {name} p ON p.id = k.firing_id)"
        " AS k",
    )
    return int(row["a"]), int(row["k"])


def _day_with_dependents(h: Harness) -> tuple[str, list[int]]:
    """A day of 24 finished firings ten days ago, each with an attempt and a key."""
    store: Any = h.store
    job = store.create_job(spec("attempted"), first_fire_at=h.now())
    start = _midnight(h.now()) - 10 * DAY
    store.load_history(first_job=job.id, jobs=1, start=start, step=H, count=24)
    store.load_history(first_job=job.id, jobs=1, start=_midnight(h.now()), step=H, count=1)
    name = f"firings_p{start:%Y%m%d}"
    ids = [int(r["id"]) for r in _sql(store, f"SELECT id FROM {name} ORDER BY id")]
    for fid in ids:
        _sql(
            store,
            "INSERT INTO firing_attempts (firing_id, attempt, worker_id, started_at,"
            " finished_at, outcome) SELECT id, 1, 'w', scheduled_for, finished_at, 'succeeded'"
            " FROM firings WHERE id = %s RETURNING firing_id",
            fid,
        )
        _sql(
            store,
            "INSERT INTO idempotency_keys (namespace, key_hash, request_hash, firing_id,"
            " created_at) VALUES ('default', %s, 'r', %s, now()) RETURNING firing_id",
            f"k{fid}",
            fid,
        )
    assert _dependents(store, name) == (24, 24)
    return name, ids


def test_a_days_attempts_and_keys_go_a_chunk_per_leader_step(h: Harness) -> None:
    """Before its drop, a day's attempts and idempotency keys are deleted a chunk of its
    firings per step (the drop's own transaction then has none of that work); the drop
    leaves none behind."""
    store: Any = h.store
    name, _ids = _day_with_dependents(h)
    store.one_shot_scan = 10
    left: list[tuple[int, int]] = []
    cursor = None
    for _ in range(50):
        report = store.prune_history(max_batches=1, cursor=cursor)
        cursor = report.cursor
        if name in _parts(store):
            left.append(_dependents(store, name))
        if report.done:
            break
    assert name not in _parts(store)
    # read, then decided (its newer firings counted): (24, 24); then 10, 10 and 4
    # firings' attempts and keys, each its own step
    assert [a for a, _ in left] == [24, 24, 14, 4, 0]
    assert [k for _, k in left] == [24, 24, 14, 4, 0]
    orphans = _sql(
        store,
        "SELECT (SELECT count(*) FROM firing_attempts a WHERE NOT EXISTS"
        " (SELECT 1 FROM firings f WHERE f.id = a.firing_id)) AS a, (SELECT count(*) FROM"
        " idempotency_keys k WHERE NOT EXISTS (SELECT 1 FROM firings f WHERE f.id ="
        " k.firing_id)) AS k",
    )
    assert (orphans[0]["a"], orphans[0]["k"]) == (0, 0)


def test_a_firing_redriven_during_the_chunks_keeps_its_attempts_and_its_day(h: Harness) -> None:
    """A firing of the day re-driven after the decision, before the chunks reach it: its
    attempt and key stay, and so does the day (its firings go row by row later)."""
    store: Any = h.store
    name, ids = _day_with_dependents(h)
    redriven = ids[-1]
    _redrive_after_the_decision(store, "id", redriven)
    assert name in _parts(store)
    assert _dependents(store, name) == (1, 1)
    kept = _sql(store, "SELECT firing_id FROM firing_attempts WHERE firing_id = %s", redriven)
    assert len(kept) == 1
    assert store.get_firing(redriven).state is FiringState.QUEUED
