"""PostgreSQL: the store's pools (sync and async) read json and jsonb with jsonload.py's
loader; a caller's own connection keeps psycopg's; values come back as given either way
(big integers, huge numbers: test_postgres_specific.py and tests/unit)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.pq import Format

from cronwheel.store.postgres import PostgresStore
from cronwheel.store.postgres.aio import PgAsyncCalls
from tests.contract.conftest import Harness
from tests.contract.pg_harness import postgres_harness


@pytest.fixture
def h(tmp_path: Any) -> Iterator[Harness]:
    yield from postgres_harness(tmp_path)


def _loaders(conn: Any) -> set[str]:
    names = set()
    for name in ("json", "jsonb"):
        oid = conn.adapters.types[name].oid
        loader = conn.adapters.get_loader(oid, Format.TEXT)(oid, conn)
        names.add(f"{name}:{getattr(type(loader), '__module__', '')}")
    return names


OURS = {"json:cronwheel.store.postgres.jsonload", "jsonb:cronwheel.store.postgres.jsonload"}


def test_the_store_pools_read_json_with_the_store_loader(h: Harness) -> None:
    store = h.open_another()
    assert isinstance(store, PostgresStore)
    with store.db.pool.connection() as conn:
        assert _loaders(conn) == OURS
        row = conn.execute("SELECT '[123456789012345678901234567890, 1.5]'::json AS j").fetchone()
        assert row is not None and row["j"] == [123456789012345678901234567890, 1.5]

    async def through_async_pool() -> set[str]:
        calls = PgAsyncCalls(store.db)
        await calls.open()
        try:
            assert calls._pool is not None
            async with calls._pool.connection() as conn:
                return _loaders(conn)
        finally:
            await calls.close()

    assert asyncio.run(through_async_pool()) == OURS


def test_a_caller_s_own_connection_keeps_its_loaders(h: Harness) -> None:
    store = h.open_another()
    assert isinstance(store, PostgresStore)
    with psycopg.connect(store.db.conninfo) as conn:
        assert not (_loaders(conn) & OURS)
