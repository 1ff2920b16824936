"""The PostgreSQL side of the store contract harness.

Each test gets a fresh schema (``cw_test_<random>``, dropped with CASCADE afterwards):
cheaper than a database per test and just as isolated, since the store confines
itself to its schema through ``search_path``.

The store's clock is the server's ``now()``. The suite needs a clock that moves only
when told to (it compares instants for equality), so the harness freezes the clock at
the server's own time when the test starts and moves it with ``advance`` — through a
:class:`DbTime` that the store and every store from ``open_another`` share.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from tests.conftest import PG_URL, require_service
from tests.contract.conftest import Harness


def new_schema(url: str = PG_URL) -> str:
    """Create an empty schema for one test; raises psycopg.OperationalError if no server."""
    schema = f"cw_test_{secrets.token_hex(6)}"
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")  # type: ignore[arg-type]
    return schema


def drop_schema(schema: str, url: str = PG_URL) -> None:
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")  # type: ignore[arg-type]


@contextmanager
def fresh_schema() -> Iterator[str]:
    """A new empty schema, dropped afterwards; without a server, skips locally and fails
    in CI."""
    try:
        name = new_schema()
    except psycopg.OperationalError as exc:
        require_service("PostgreSQL", exc)
        raise
    try:
        yield name
    finally:
        drop_schema(name)


def postgres_harness(tmp_path: Any) -> Iterator[Harness]:
    from cronwheel.store.postgres import DbTime, PostgresStore
    from cronwheel.store.protocol import Store

    try:
        schema = new_schema()
    except psycopg.OperationalError as exc:
        require_service("PostgreSQL", exc)
        return
    db_time = DbTime()
    stores: list[PostgresStore] = []

    def open_store() -> PostgresStore:
        s = PostgresStore(PG_URL, schema=schema, db_time=db_time, pool_size=4)
        stores.append(s)
        return s

    try:
        store = open_store()
        store.migrate()
        # the server's time (whole seconds, as the suite's FakeClock starts), from now
        # on moved only by advance()
        db_time.frozen_at = store.now().replace(microsecond=0)

        def another() -> Store:
            return open_store()

        yield Harness(store=store, advance=db_time.advance, open_another=another)
    finally:
        for s in stores:
            s.close()
        drop_schema(schema)


def pg_store(h: Harness) -> Any:
    """The harness's store, a PostgresStore (asserted)."""
    from cronwheel.store.postgres import PostgresStore

    store = h.store
    assert isinstance(store, PostgresStore)
    return store


LOCK_WAIT_S = 20.0  # a bound for what must happen, never a pause


def await_a_lock_wait(url: str = PG_URL) -> None:
    """Until a session of the database waits on a lock (AssertionError after
    ``LOCK_WAIT_S``). The watcher autocommits: inside one transaction
    pg_stat_activity is read once and kept, so a watcher that looked before the wait
    began would never see it."""
    with psycopg.connect(url, autocommit=True) as watcher:
        deadline = time.monotonic() + LOCK_WAIT_S
        while time.monotonic() < deadline:
            if watcher.execute(
                "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone():
                return
            time.sleep(0.02)
    raise AssertionError(f"no session of the database waited on a lock within {LOCK_WAIT_S} s")
