"""PostgreSQL: a statement's ``LIMIT %(limit)s`` goes to the server as the integer it is
(store/postgres/planning.py ``fixed_limit``), so that a statement over the day partitions
of firings is planned once per connection, not at every call: with the limit a
parameter, the server costs its generic plan as if the limit were a tenth of the rows
and plans every call afresh (3 ms a call with a month of partitions, for 0.5 ms of
execution)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cronwheel.domain.schedules import now as now_schedule
from cronwheel.store.core import filters
from cronwheel.store.postgres import PostgresStore
from cronwheel.store.postgres.planning import fixed_limit
from tests.contract.conftest import Harness, spec
from tests.contract.pg_harness import postgres_harness


@pytest.fixture
def h(tmp_path: Any) -> Iterator[Harness]:
    yield from postgres_harness(tmp_path)


def test_a_page_of_firings_is_planned_once_per_connection(h: Harness) -> None:
    store = h.store
    assert isinstance(store, PostgresStore)
    for i in range(3):
        store.enqueue_now(spec(f"listed-{i}", schedule=now_schedule()))
    clause, params = filters.firings(store.db, namespace="default")

    def body(tx: Any) -> tuple[list[int], Any]:
        pages = [len(tx.filtered("list_firings", clause, params | {"limit": 2})) for _ in range(15)]
        plans = tx.conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE '%%ORDER BY id DESC LIMIT 2'"
        ).fetchone()
        return pages, plans

    pages, plans = store.db.read(body)
    assert pages == [2] * 15
    assert plans is not None  # prepared, with the limit in its text
    assert plans["generic_plans"] > 0, plans
    assert plans["custom_plans"] <= 5, plans


def test_only_an_integer_limit_is_written_into_the_statement() -> None:
    text = "SELECT * FROM firings ORDER BY id DESC LIMIT %(limit)s"
    assert fixed_limit(text, {"limit": 50}).endswith("LIMIT 50")
    for odd in ("50; DROP TABLE firings", 50.0, True, None):
        assert fixed_limit(text, {"limit": odd}) == text
    assert fixed_limit(text, None) == text
    assert fixed_limit("SELECT 1", {"limit": 5}) == "SELECT 1"
