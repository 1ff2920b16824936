"""PostgreSQL: a worker's store (``prepare_claims``, called before its first claim) opens
the connections its store threads use and plans the claim's, the start's and the
outcome's statements on each, and on every connection its pool opens later (claims.sql
``warm_up``, store/postgres/planning.py ``warm_up``), so that no firing waits, at its
instant or in a drain's first batches, for its worker's session to plan them for every
day partition (18-33 ms each with a month of partitions). A store that does not claim
plans none of it. The warm-up writes nothing."""

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


_WANT = {
    "cronwheel_start",
    "cronwheel_start_at",
    "cronwheel_claim_fast",
    "cronwheel_claim_scan",
    "cronwheel_complete",
}


def _planned_on_each(store: PostgresStore) -> list[set[str]]:
    """The claim path's functions planned on each connection of the pool, the pool grown
    to its full size first (connections opened after whatever the test did before)."""
    pool = store.db.pool
    pool.resize(min_size=store.db.pool_size, max_size=store.db.pool_size)
    pool.wait(timeout=30)
    held = [pool.getconn() for _ in range(store.db.pool_size)]
    try:
        return [{r["ident"].split("(")[0] for r in c.execute(query(_PLANNED))} for c in held]
    finally:
        for c in held:
            pool.putconn(c)


def test_a_worker_s_store_has_planned_the_claim_the_start_and_the_outcome_on_each_connection(
    h: Harness,
) -> None:
    # another process's store on the migrated database, as a worker's before its first
    # claim: the connections it asked for, and every one its pool opens later
    store = h.open_another()
    assert isinstance(store, PostgresStore)
    store.prepare_claims(2)
    assert store.db.pool.get_stats()["pool_size"] >= 2
    assert _planned_on_each(store) == [_WANT] * store.db.pool_size


def test_a_store_that_does_not_claim_plans_none_of_it(h: Harness) -> None:
    # a scheduler's, an API's or a CLI command's store: its connections do not plan the
    # claim path for every day partition
    store = h.open_another()
    assert isinstance(store, PostgresStore)
    assert _planned_on_each(store) == [set()] * store.db.pool_size


def test_preparing_a_store_whose_server_does_not_answer_raises_nothing() -> None:
    store = PostgresStore("postgresql://postgres@127.0.0.1:1/none", timeout_s=0.5)
    try:
        store.prepare_claims(2)
    finally:
        store.close()


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
