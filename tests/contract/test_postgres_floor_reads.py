"""PostgreSQL: the periodic reads of the live work bounded by the claim's floor
(schema.sql migrations 30 and 31): status' counts and oldest queued instant, the
workers' next due instant, the active list, the unserved tasks and the held firings
per namespace. They read the day partitions from ``firings_floor.at`` on, and must
still see every unfinished firing, the floor's rule being what makes that true
(test_postgres_claim_floor.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from cronwheel.domain.firing import FiringState
from tests.contract.conftest import Harness, spec
from tests.contract.pg_harness import PG_URL, postgres_harness
from tests.contract.test_postgres_claim_floor import _complete, _insert_sql, _raised
from tests.contract.test_postgres_partitions import _midnight, _sql

DAY = timedelta(days=1)
H = timedelta(hours=1)
ACTIVE = (FiringState.QUEUED, FiringState.CLAIMED, FiringState.RUNNING)


@pytest.fixture
def h(tmp_path: Any) -> Iterator[Harness]:
    yield from postgres_harness(tmp_path)


def assert_live_reads(store: Any) -> None:
    """Each bounded read gives what the same read of every partition gives."""
    rows = _sql(
        store,
        "SELECT id, state, due_at, namespace, task FROM firings "
        "WHERE state IN ('queued', 'claimed', 'running')",
    )
    counts = {s: sum(1 for r in rows if r["state"] == s) for s in ("queued", "claimed", "running")}
    for namespace in (None, "default"):
        status = store.status(namespace=namespace)
        assert {s: status.counts[s] for s in counts} == counts
        queued_due = [r["due_at"] for r in rows if r["state"] == "queued"]
        assert status.oldest_queued_due_at == (min(queued_due) if queued_due else None)
    now = store.now()
    later = [r["due_at"] for r in rows if r["state"] == "queued" and r["due_at"] > now]
    assert store.next_due_at() == (min(later) if later else None)
    listed = store.list_firings(states=ACTIVE, limit=1000)
    assert {f.id for f in listed} == {r["id"] for r in rows}
    for state in ACTIVE:  # one state, one namespace, and a keyset page between two ids
        ids = sorted((r["id"] for r in rows if r["state"] == state.value), reverse=True)
        of = store.list_firings(states=[state], namespace="default", limit=1000)
        assert [f.id for f in of] == ids
        if len(ids) > 2:
            page = store.list_firings(states=[state], before_id=ids[0], after_id=ids[-1])
            assert [f.id for f in page] == ids[1:-1]
    assert store.list_firings(states=ACTIVE, namespace="elsewhere") == []
    unserved = store.unserved_queued(alive_within=timedelta(minutes=1))
    by_task: dict[str, int] = {}
    for r in rows:
        if r["state"] == "queued":
            by_task[r["task"]] = by_task.get(r["task"], 0) + 1
    assert unserved == by_task
    held = store.db.read(lambda tx: tx.all("quota_held", {"namespace": None}))
    n_held = counts["claimed"] + counts["running"]
    assert {r["namespace"]: r["n"] for r in held} == ({"default": n_held} if n_held else {})


def test_an_old_retry_below_the_raised_floor_is_seen_by_every_live_read(h: Harness) -> None:
    """A firing of five days ago queued again (its retry's backoff due in an hour) lowers
    the floor; status, the next due instant, the active list and the unserved tasks
    count it, and then its claim, as with no floor."""
    store: Any = h.store
    job = store.create_job(spec("hourly"), first_fire_at=h.now() - 6 * DAY)
    start = _midnight(h.now()) - 6 * DAY
    store.load_history(first_job=job.id, jobs=1, start=start, step=H, count=3 * 24)
    assert _raised(store) == _midnight(h.now())
    assert_live_reads(store)
    at = start + DAY + H / 2
    text, args = _insert_sql(at)
    (row,) = store.db.write(lambda tx: tx.conn.execute(text, args).fetchall())
    fid = row["id"]
    due = store.now() + H
    store.db.write(
        lambda tx: tx.conn.execute("UPDATE firings SET due_at = %s WHERE id = %s", (due, fid))
    )
    assert store.claim_floor() == at
    assert store.status().counts["queued"] == 1
    assert store.status().oldest_queued_due_at == due
    assert store.next_due_at() == due
    assert_live_reads(store)
    # due now, claimed (held by a worker), still seen; finished, gone from the live reads
    store.db.write(
        lambda tx: tx.conn.execute(
            "UPDATE firings SET due_at = %s WHERE id = %s", (store.now() - H, fid)
        )
    )
    (claim,) = store.claim("w-floor", tasks=["t"], limit=10)
    assert claim.firing.id == fid
    assert store.status().counts["running"] + store.status().counts["claimed"] == 1
    assert_live_reads(store)
    _complete(h, [claim])
    assert _raised(store) == _midnight(h.now())
    assert_live_reads(store)


def _opened_indexes(conn: psycopg.Connection[Any], sql: str) -> set[str]:
    """The indexes one run of ``sql`` opened, in a session that ran it once before (its
    first run plans it, and planning opens every partition's indexes)."""
    conn.execute(sql).fetchall()
    conn.commit()
    conn.execute(sql).fetchall()
    rows = conn.execute(
        "SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
        "WHERE l.pid = pg_backend_pid() AND c.relkind = 'i'"
    ).fetchall()
    conn.commit()
    return {str(r[0]) for r in rows}


def test_the_bounded_reads_leave_the_partitions_below_the_floor_unopened(h: Harness) -> None:
    """Planned once, a bounded read opens the indexes of the day partitions from the
    floor on (pruned when its plan starts), not those of the finished history below it."""
    store: Any = h.store
    job = store.create_job(spec("hourly"), first_fire_at=h.now() - 6 * DAY)
    start = _midnight(h.now()) - 6 * DAY
    store.load_history(first_job=job.id, jobs=1, start=start, step=H, count=3 * 24)
    floor = _raised(store)
    assert floor == _midnight(h.now())
    parts = store.partitions()
    below = {name for name, lo, _ in parts if lo < floor}
    above = {name for name, lo, _ in parts if lo >= floor}
    assert below and above
    reads = [
        "SELECT * FROM cronwheel_live_counts(NULL)",
        "SELECT * FROM cronwheel_live_counts('default')",
        "SELECT cronwheel_oldest_queued(NULL)",
        "SELECT cronwheel_oldest_queued('default')",
        "SELECT cronwheel_next_due(now())",
        "SELECT * FROM cronwheel_active_page('{queued,claimed,running}', NULL, NULL, NULL, 100)",
        "SELECT * FROM cronwheel_active_page('{queued}', 'default', 0, 1000000, 100)",
        "SELECT * FROM cronwheel_queued_tasks(NULL, 1000)",
        "SELECT * FROM cronwheel_held_counts(NULL)",
        "SELECT * FROM cronwheel_held_counts('default')",
    ]
    with psycopg.connect(PG_URL) as conn:
        conn.execute(f'SET search_path TO "{store.schema}"')
        conn.commit()
        for sql in reads:
            opened = _opened_indexes(conn, sql)
            of = {name for name in below | above if any(i.startswith(name + "_") for i in opened)}
            assert of & above, (sql, opened)
            assert not of & below, (sql, sorted(of & below))
