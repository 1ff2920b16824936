"""The store contract (test_store_contract.py, test_retention.py) on a PostgreSQL
database migrated to partitioned firings from version 15 while holding data (firings
in every state, attempts, idempotency keys; the online step first), then emptied for
the suite (which expects an empty store): what the migration leaves — the old table as
the partition of every instant up to the boundary, days after it partitions of their
own — behaves as a new database does. (Data kept across the migration:
test_postgres_partitions.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from cronwheel.store.postgres import DbTime, PostgresStore
from tests.conftest import require_service
from tests.contract import pg_legacy
from tests.contract.conftest import Harness
from tests.contract.pg_harness import drop_schema, new_schema
from tests.contract.test_retention import *  # noqa: F403
from tests.contract.test_store_contract import *  # noqa: F403


@pytest.fixture
def harness(tmp_path: Any) -> Iterator[Harness]:
    try:
        schema = new_schema()
    except psycopg.OperationalError as exc:
        require_service("PostgreSQL", exc)
        return
    db_time = DbTime()
    stores: list[PostgresStore] = []
    try:
        store = pg_legacy.open_at_version_15(schema, db_time)
        stores.append(store)
        pg_legacy.fill(store)
        store.prepare_partitioning()  # the online step: the legacy partition reaches past today
        store.migrate()

        # the suite expects an empty store: the old data goes (by the cascade trigger),
        # the schema the migration left stays — the old table as the partition of every
        # instant up to two days ahead, the days after it partitions of their own
        def clear(tx: Any) -> None:
            tx.conn.execute("DELETE FROM jobs")
            tx.conn.execute("DELETE FROM leases")
            tx.conn.execute("DELETE FROM quota_usage")
            tx.conn.execute("DELETE FROM quota_jobs")
            tx.conn.execute("DELETE FROM fair_clocks")
            tx.conn.execute("DELETE FROM finished_counts")

        store.db.write(clear)
        assert store.partitions()[0][0] == "firings_legacy"
        db_time.frozen_at = store.now().replace(microsecond=0)

        def another() -> PostgresStore:
            s = PostgresStore(store.url, schema=schema, db_time=db_time, pool_size=4)
            stores.append(s)
            return s

        yield Harness(store=store, advance=db_time.advance, open_another=another)
    finally:
        for s in stores:
            s.close()
        drop_schema(schema)
