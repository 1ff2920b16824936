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
    # left to the drop of their day until it has had its chance
    waiting = {
        r["id"]
        for r in rows
        if _midnight(r["scheduled_for"]) + DAY + DEFAULT_RETENTION.keep_for > now
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
    params = {"hi": start + DAY, "keep_cap": 1}
    groups = store._read_part("partition_groups", name, params)
    job = store.get_job_by_id(job.id)
    (late,) = _fire(h, job, start + timedelta(minutes=30)).inserted  # a catch-up, after it
    with pytest.raises(_Abandoned):
        store._drop_partition(name, groups, {}, h.now(), DEFAULT_RETENTION.keep_for)
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
        table = _relfile(store, "firings")
        boundary = store.prepare_partitioning()  # online: CHECK NOT VALID, VALIDATE, index
        assert boundary is not None and boundary == pg_legacy.midnight(boundary)
        index = _relfile(store, "firings_id_at")
        latest = max(int(k.split("_")[1]) for k in store.db.migrations())
        assert store.migrate() == latest >= 16
        assert store.migrate() == latest
        assert pg_legacy.snapshot(store) == before
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
