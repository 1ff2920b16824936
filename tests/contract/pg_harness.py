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
