"""SQLite-only behaviour of SqliteStore: the plans of its hot queries."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from cronwheel.store.sqlite import SqliteStore


def _plan(tmp_path: Path, name: str, where: str = "") -> list[str]:
    """EXPLAIN QUERY PLAN of the store's query ``name`` on a fresh, migrated store (its
    ``/*where*/``, for a filtered one, replaced by ``where``)."""
    path = tmp_path / "plan.db"
    store = SqliteStore(str(path))
    store.migrate()
    sql = store.db.queries()[name].replace("/*where*/", where)
    store.close()
    params = dict.fromkeys(re.findall(r":(\w+)", sql), 0)
    with sqlite3.connect(path) as conn:
        return [str(r[-1]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]


def test_next_due_hint_is_a_range_scan_of_an_index(tmp_path: Path) -> None:
    """An idle worker asks when the next queued firing falls due: with a deep queue of
    due firings that must be an index range scan, not a scan of every queued firing."""
    plan = _plan(tmp_path, "next_due_at")
    assert any("USING" in d and "INDEX firings_queued_due" in d for d in plan), plan
    assert not any(d.startswith("SCAN firings") and "INDEX" not in d for d in plan), plan


def test_reaper_start_deadline_pass_starts_from_the_jobs_that_have_one(tmp_path: Path) -> None:
    """Once a second: the jobs with a start deadline (an index), then each one's queued
    firings by job, never a scan of every queued firing."""
    plan = _plan(tmp_path, "start_deadline_passed")
    assert any("SCAN j USING INDEX jobs_start_deadline" in d for d in plan), plan
    assert any(d.startswith("SEARCH f USING INDEX") and "job_id=?" in d for d in plan), plan
    assert not any(d.startswith("SCAN f") for d in plan), plan


def test_retention_bounds_read_only_the_jobs_that_override(tmp_path: Path) -> None:
    """At the start of each retention pass: the jobs that override a retention policy
    (a partial index), not every job, of which one-shot jobs kept as long as their
    firings are most."""
    plan = _plan(tmp_path, "retention_job_bounds")
    assert plan == ["SCAN jobs USING INDEX jobs_retention_override"], plan


def test_the_leaders_upkeep_checkpoints_the_log_below_sqlites_threshold(tmp_path: Path) -> None:
    """Below SQLite's 1,000 pages no commit checkpoints the write-ahead log: the store's
    upkeep (the leader's, about once a second) copies its pages into the file, so that at
    a light load no claim's or start's commit runs the checkpoint (5-9 ms)."""
    from cronwheel.domain.models import JobSpec
    from cronwheel.domain.schedules import every

    path = tmp_path / "ckpt.db"
    store = SqliteStore(str(path))
    store.migrate()
    store.upkeep()  # the schema, in the file
    assert store.db.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
    before = path.stat().st_size
    page = store.db.conn.execute("PRAGMA page_size").fetchone()[0]
    payload = {"pad": "x" * 2000}  # a job row over 2 kB: 600 of them, over 300 pages
    specs = [
        (JobSpec(name=f"j{i}", task="t", schedule=every(60), kwargs=payload), None)
        for i in range(600)
    ]
    for i in range(0, len(specs), 100):
        store.create_jobs(specs[i : i + 100])
    assert Path(str(path) + "-wal").stat().st_size > 300 * page  # in the log only
    assert path.stat().st_size == before
    store.upkeep()
    assert path.stat().st_size > before + 300 * page  # copied into the file
    assert len(store.list_jobs(limit=1000)) == 600
    store.upkeep()  # nothing left to copy: a no-op
    store.close()


def test_a_held_start_reads_its_rows_before_ready_and_writes_after(tmp_path: Path) -> None:
    """The held start's warm-up (claims.py ``start_peek``): before ``ready`` (the wait
    for the instant) the start's rows are read by primary key, outside any transaction
    (a cancel made during the wait still wins, test_claimed_state.py); the start is
    written after ``ready``."""
    from cronwheel.domain.models import JobSpec
    from cronwheel.domain.schedules import now

    assert any("USING INTEGER PRIMARY KEY" in d for d in _plan(tmp_path, "start_peek"))
    store = SqliteStore(str(tmp_path / "peek.db"))
    store.migrate()
    store.enqueue_now(JobSpec(name="p", task="t", schedule=now()))
    (held,) = store.claim("w", tasks=["t"], limit=1, start=0)
    statements: list[str] = []
    store.db.conn.set_trace_callback(statements.append)

    def ready() -> None:
        assert not store.db.conn.in_transaction
        statements.append("-- ready")

    claims = [(held.firing.id, held.claim_token)]
    assert store.complete_and_start([], "w", claims, ready=ready) == ([], {held.firing.id})
    store.db.conn.set_trace_callback(None)
    # each statement by its first line that is not a comment
    heads = [next((ln for ln in s.splitlines() if not ln.startswith("--")), s) for s in statements]
    at = statements.index("-- ready")
    assert any(h.startswith("SELECT firings.id") for h in heads[:at]), heads
    assert not any(h.startswith(("UPDATE", "BEGIN", "INSERT")) for h in heads[:at]), heads
    assert any(h.startswith("UPDATE firings") for h in heads[at:]), heads
    store.close()


def test_a_namespaces_jobs_page_walks_its_ids_in_order(tmp_path: Path) -> None:
    """search_jobs (the dashboard's jobs page, the API's job list): a namespace's jobs
    after an id, in id order, read from an index in that order up to the page's size;
    never every job of the namespace sorted (a week of `app.enqueue` at the design's
    rate keeps 700,000 one-shot jobs in it: the page took 148 ms)."""
    from cronwheel.store.core import filters

    store = SqliteStore(str(tmp_path / "dialect.db"))  # the filters' SQL dialect
    for task, prefix in ((None, None), ("t", None), (None, "soak-")):
        where, _ = filters.jobs(
            store.db, namespace="default", task=task, name_prefix=prefix, after_id=0
        )
        plan = _plan(tmp_path, "list_jobs", where)
        assert plan == ["SEARCH jobs USING INDEX jobs_namespace_id (namespace=? AND id>?)"], plan
    store.close()


def test_a_migrated_store_is_migrated_again_without_a_write(tmp_path: Path) -> None:
    """Every process on the file migrates as it starts: on a store already at the code's
    last migration that is a read, which another program's write lock does not delay
    (a write would wait for it, here past the store's busy timeout, and fail)."""
    path = tmp_path / "migrated.db"
    store = SqliteStore(str(path), busy_timeout_ms=200)
    try:
        latest = store.migrate()
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")  # the file's write lock, held
            assert store.migrate() == latest
        finally:
            holder.close()
    finally:
        store.close()
