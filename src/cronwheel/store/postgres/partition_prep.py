"""The online first step of migration 16 on PostgreSQL (schema.sql): the partitioning
of firings prepared on a database at version 15 without blocking its writers."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from cronwheel.errors import StoreError
from cronwheel.store.postgres.db import Database, query


def prepare_partitioning(db: Database) -> datetime | None:
    """On a database at migration 15, what migration_16 needs done first, each step
    without blocking writers (a session of its own, autocommit): the boundary B (two
    UTC midnights ahead, or the day after the latest instant held), the CHECK
    (scheduled_for < B) added NOT VALID then VALIDATEd (a scan under SHARE UPDATE
    EXCLUSIVE), the unique index on (id, scheduled_for) built CONCURRENTLY (an
    invalid one left by an interrupted build dropped first). Idempotent; B, or None
    when the database is not at version 15."""
    if not db.read(lambda tx: tx.one("has_meta"))["ok"]:  # type: ignore[index]
        return None
    state = db.read(lambda tx: tx.one("prep_state"))
    if state is None or state["version"] != "15":
        return None  # every process of a migrated deployment returns here, lock-free
    if db.pooled:  # a session lock and CONCURRENTLY need a session of their own
        raise StoreError(
            "migration 16 from version 15 needs a direct connection, not one through "
            "a transaction pooler: run `cronwheel migrate` with the primary's own URL",
            field="store",
        )
    q = dict(db.q)
    with psycopg.connect(db.conninfo, autocommit=True) as conn:
        conn.execute(query(q["prep_lock"]))
        try:
            return _prepare(conn, q)
        finally:
            conn.execute(query(q["prep_unlock"]))


def _prepare(conn: psycopg.Connection[Any], q: dict[str, str]) -> datetime | None:
    def one(name: str, text: str | None = None) -> Any:
        cur = conn.execute(query(text or q[name]))
        return cur.fetchone() if cur.description is not None else None

    state = one("prep_state")
    version, boundary, check_valid, index_valid = state
    if version != "15":
        return None
    if boundary is None:
        (boundary,) = one("prep_boundary")
    if check_valid is None:
        text = q["prep_check_add"].replace("/*boundary*/", boundary.isoformat())
        one("prep_check_add", text)
    if not check_valid:
        one("prep_check_validate")
    if index_valid is False:
        one("prep_index_drop")
    if not index_valid:
        one("prep_index_build")
    return boundary if isinstance(boundary, datetime) else None
