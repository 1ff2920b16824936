"""SQLite-only behaviour of SqliteStore: the plans of its hot queries."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from cronwheel.store.sql import load_queries
from cronwheel.store.sqlite import SqliteStore


def test_next_due_hint_is_a_range_scan_of_an_index(tmp_path: Path) -> None:
    """An idle worker asks when the next queued firing falls due: with a deep queue of
    due firings that must be an index range scan, not a scan of every queued firing."""
    path = tmp_path / "plan.db"
    store = SqliteStore(str(path))
    store.migrate()
    store.close()
    sql = load_queries("cronwheel.store.sqlite", "queries.sql")["next_due_at"]
    with sqlite3.connect(path) as conn:
        plan = [str(r[-1]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql, {"now": 0})]
    assert any("USING" in d and "INDEX firings_queued_due" in d for d in plan), plan
    assert not any(d.startswith("SCAN firings") and "INDEX" not in d for d in plan), plan
