"""PostgreSQL: an immediate enqueue in one statement (schema.sql migration_25,
store/postgres/dispatch.py ``enqueue_now``). The one-shot job, its firing due now with
its fair virtual deadline, the namespace's fair clock moved on and its firings_per_minute
charged, in one autocommitted call; over the rate the statement writes nothing and the
transaction refuses with its retry-after. Either path writes what the other would."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from cronwheel.domain.policies import fair_deadline
from cronwheel.domain.schedules import now as now_schedule
from cronwheel.errors import ConflictError, QuotaExceededError
from cronwheel.store import codec
from cronwheel.store.postgres import PostgresStore
from tests.contract.conftest import Harness, spec
from tests.contract.pg_harness import postgres_harness
from tests.contract.test_postgres_create_one import Units

NS = "now"


@pytest.fixture
def h(tmp_path: Any) -> Iterator[Harness]:
    yield from postgres_harness(tmp_path)


def _pg(h: Harness) -> PostgresStore:
    assert isinstance(h.store, PostgresStore)
    return h.store


def _count(store: PostgresStore, sql: str) -> int:
    row = store.db.read(lambda tx: tx.conn.execute(sql, (NS,)).fetchone())
    return 0 if row is None or row["n"] is None else int(row["n"])


def _written(store: PostgresStore) -> tuple[int, int, int, int]:
    """The namespace's jobs, firings, charged firings and fair clock."""
    return (
        _count(store, "SELECT count(*) AS n FROM jobs WHERE namespace = %s"),
        _count(store, "SELECT count(*) AS n FROM firings WHERE namespace = %s"),
        _count(
            store,
            "SELECT sum(used) AS n FROM quota_usage "
            "WHERE namespace = %s AND quota = 'firings_per_minute'",
        ),
        _count(store, "SELECT vclock AS n FROM fair_clocks WHERE namespace = %s"),
    )


def _vdeadline_us(store: PostgresStore, firing_id: int) -> int:
    row = store.db.read(
        lambda tx: tx.conn.execute(
            "SELECT vdeadline FROM firings WHERE id = %s", (firing_id,)
        ).fetchone()
    )
    assert row is not None
    return codec.to_us(row["vdeadline"])


def _now(name: str, priority: float = 1.0) -> Any:
    return spec(name, namespace=NS, schedule=now_schedule(), priority=priority)


def test_an_enqueue_is_one_autocommitted_statement(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    units = Units(_pg(h), monkeypatch)
    f = h.store.enqueue_now(_now("a"))
    assert units.seen == [(True, False)]
    assert (f.state.value, f.scheduled_for, f.due_at) == ("queued", h.now(), h.now())
    assert _written(_pg(h))[:3] == (1, 1, 1)
    assert h.store.get_firing(f.id) == f


def test_the_statement_and_the_transaction_keep_one_fair_clock(h: Harness) -> None:
    """Firings of several priorities, all due at one instant, enqueued alternately by
    the statement (enqueue_now) and by the transaction (enqueue_now_once): each virtual
    deadline, and the namespace's clock after them, as domain.policies.fair_deadline
    makes them one after another."""
    priorities = [1.0, 4.0, 0.25, 2.5, 1.0, 0.01, 7.0, 1000.0, 0.3]
    clock = 0
    due = codec.to_us(h.now())
    for i, priority in enumerate(priorities):
        if i % 2:
            f, made = h.store.enqueue_now_once(
                _now(f"tx{i}", priority), key_hash=f"{i:064d}", request_hash="r" * 64
            )
            assert made
        else:
            f = h.store.enqueue_now(_now(f"one{i}", priority))
        expected, clock = fair_deadline(clock, due, priority)
        assert _vdeadline_us(_pg(h), f.id) == expected, (i, priority)
    assert _written(_pg(h)) == (len(priorities), len(priorities), len(priorities), clock)


def test_over_the_rate_the_statement_writes_nothing_and_the_transaction_refuses(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.store.set_quota(NS, {"firings_per_minute": 2})
    h.store.enqueue_now(_now("a"))
    h.store.enqueue_now(_now("b"))
    before = _written(_pg(h))
    units = Units(_pg(h), monkeypatch)
    with pytest.raises(QuotaExceededError) as refused:
        h.store.enqueue_now(_now("c"))
    assert refused.value.quota == "firings_per_minute"
    assert 1 <= refused.value.retry_after <= 60
    assert units.seen[:2] == [(True, False), (True, True)]  # the statement, then the transaction
    assert _written(_pg(h)) == before == (2, 2, 2, before[3])


def test_a_name_the_namespace_has_is_a_conflict_and_writes_nothing(h: Harness) -> None:
    h.store.enqueue_now(_now("same"))
    before = _written(_pg(h))
    with pytest.raises(ConflictError) as taken:
        h.store.enqueue_now(_now("same"))
    assert taken.value.field == "name"
    assert _written(_pg(h)) == before


def test_a_new_minute_forgets_the_old_counters(h: Harness) -> None:
    h.store.enqueue_now(_now("a"))
    h.advance(timedelta(minutes=2))
    h.store.enqueue_now(_now("b"))
    windows = _count(
        _pg(h),
        "SELECT count(*) AS n FROM quota_usage "
        "WHERE namespace = %s AND quota = 'firings_per_minute'",
    )
    assert windows == 1
