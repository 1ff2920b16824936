"""PostgreSQL: each new connection of the store's pool plans the claim's, the start's and
the outcome's statements when it is opened (claims.sql ``warm_up``,
store/postgres/planning.py ``warm_up``), so that no firing waits, at its instant or in
a drain's first batches, for its worker's session to plan them for every day partition
(18-33 ms each with a month of partitions). The warm-up writes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cronwheel.domain.models import FiringState
from cronwheel.domain.schedules import now as now_schedule
from cronwheel.store.postgres import PostgresStore
from cronwheel.store.postgres.db import query
from tests.contract.conftest import Harness, spec
from tests.contract.pg_harness import postgres_harness

_PLANNED = """
SELECT ident FROM pg_backend_memory_contexts
WHERE name = 'PL/pgSQL function'
  AND (ident LIKE 'cronwheel_start(%%' OR ident LIKE 'cronwheel_start_at(%%'
       OR ident LIKE 'cronwheel_claim_fast(%%'
       OR ident LIKE 'cronwheel_claim_scan(%%' OR ident LIKE 'cronwheel_complete(%%')
"""


@pytest.fixture
def h(tmp_path: Any) -> Iterator[Harness]:
    yield from postgres_harness(tmp_path)


def test_a_new_connection_of_the_pool_has_planned_the_claim_the_start_and_the_outcome(
    h: Harness,
) -> None:
    # another process's store on the migrated database: every connection its pool opens
    store = h.open_another()
    assert isinstance(store, PostgresStore)
    pool = store.db.pool
    pool.resize(min_size=store.db.pool_size, max_size=store.db.pool_size)
    pool.wait(timeout=30)
    held = [pool.getconn() for _ in range(store.db.pool_size)]
    try:
        seen = [{r["ident"].split("(")[0] for r in c.execute(query(_PLANNED))} for c in held]
    finally:
        for c in held:
            pool.putconn(c)
    want = {
        "cronwheel_start",
        "cronwheel_start_at",
        "cronwheel_claim_fast",
        "cronwheel_claim_scan",
        "cronwheel_complete",
    }
    assert seen == [want] * store.db.pool_size


def test_the_warm_up_writes_nothing(h: Harness) -> None:
    store = h.store
    assert isinstance(store, PostgresStore)
    queued = store.enqueue_now(spec("waiting", schedule=now_schedule(), task="t"))
    held = store.enqueue_now(spec("held", schedule=now_schedule(), task="t2"))
    (claimed,) = store.claim("w1", tasks=["t2"], limit=1)
    assert claimed.firing.id == held.id
    before = {f.id: (f.state, f.attempt) for f in store.list_firings(limit=10)}
    assert before[queued.id][0] is FiringState.QUEUED
    row = store.db.write(lambda tx: tx.one("warm_up"))
    assert row is not None and (row["started"], row["claimed"], row["completed"]) == (0, 0, 0)
    after = {f.id: (f.state, f.attempt) for f in store.list_firings(limit=10)}
    assert after == before
