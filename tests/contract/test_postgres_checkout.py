"""PostgresStore's checkout check (store/postgres/ha.py ``PrimaryCheck``): a connection
that answered within ``TRUST_S`` is not pinged again; its timeline is still fenced in
process; a unit that loses its connection before COMMIT runs again, a write too, and
one that loses it during COMMIT is not run twice; after a lost connection, and
through a transaction pooler, every checkout is checked."""

from __future__ import annotations

import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from cronwheel.errors import StoreUnavailableError
from cronwheel.store.postgres import PostgresStore, ha
from tests.conftest import PG_URL
from tests.contract.conftest import Harness
from tests.contract.pg_harness import postgres_harness


@pytest.fixture
def h(tmp_path: Any) -> Iterator[Harness]:
    yield from postgres_harness(tmp_path)


@pytest.fixture
def store(h: Harness) -> Iterator[PostgresStore]:
    """A store of one connection on the harness' schema."""
    assert isinstance(h.store, PostgresStore)
    one = PostgresStore(PG_URL, schema=h.store.schema, pool_size=1)
    try:
        yield one
    finally:
        one.close()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The timelines read from the server by a round trip, one per check."""
    seen: list[int] = []
    original = ha.PrimaryCheck._read

    def counted(self: ha.PrimaryCheck, conn: Any) -> int:
        tl = original(self, conn)
        seen.append(tl)
        return tl

    monkeypatch.setattr(ha.PrimaryCheck, "_read", counted)
    return seen


def _pid(store: PostgresStore) -> int:
    row = store.db.read(lambda tx: tx.conn.execute("SELECT pg_backend_pid() AS p").fetchone())
    assert row is not None
    return int(row["p"])


def _terminate(pid: int) -> None:
    with psycopg.connect(PG_URL, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
        for _ in range(200):  # the backend is gone once pg_stat_activity forgets it
            found = other.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid])
            if found.fetchone() is None:
                return
            time.sleep(0.01)
    raise AssertionError(f"backend {pid} still alive")


def test_a_connection_that_answered_is_trusted_within_the_window(
    store: PostgresStore, reads: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(5):
        store.ping()
        store.status()
    assert len(reads) == 1  # the first checkout only
    monkeypatch.setattr(ha, "TRUST_S", 0.0)  # every answer is older than the window
    store.ping()
    store.ping()
    assert len(reads) == 3


def test_a_trusted_connection_of_an_older_timeline_is_still_refused(
    store: PostgresStore, reads: list[int]
) -> None:
    store.ping()
    tl = store.db.timeline
    assert reads == [tl]
    store.db.timeline = tl + 1  # this process saw a later timeline (a failover)
    with pytest.raises(StoreUnavailableError, match=f"timeline {tl} after timeline {tl + 1}"):
        store.db.write(lambda tx: tx.run("migration_lock"))
    assert reads == [tl]  # refused on the trusted answer, without a round trip
    store.db.timeline = tl
    store.ping()


def test_a_write_whose_connection_was_lost_before_commit_runs_again(
    store: PostgresStore, reads: list[int]
) -> None:
    pid = _pid(store)
    assert len(reads) == 1
    _terminate(pid)  # the trusted connection is dead; nothing tells the pool yet
    row = store.db.write(lambda tx: tx.one("schema_version"))  # its BEGIN fails: again
    assert row is not None
    assert len(reads) == 2  # on a connection checked afresh
    calls: list[int] = []

    def body(tx: Any) -> int:
        calls.append(1)
        pid = int(tx.conn.execute("SELECT pg_backend_pid() AS p").fetchone()["p"])
        if len(calls) == 1:
            _terminate(pid)  # lost in the middle of the unit
        tx.run("migration_lock")
        return pid

    first = _pid(store)
    assert store.db.write(body) != first
    assert len(calls) == 2  # the body ran again, whole, on a new connection
    assert len(reads) == 3


def test_a_read_whose_connection_was_lost_is_retried_on_a_checked_one(
    store: PostgresStore, reads: list[int]
) -> None:
    pid = _pid(store)
    _terminate(pid)
    assert _pid(store) != pid
    assert len(reads) == 2


def test_a_write_lost_during_its_commit_is_not_run_again(
    store: PostgresStore, reads: list[int]
) -> None:
    """The server ends the session while the unit is idle before COMMIT: the COMMIT
    finds the connection lost, and the outcome of a lost COMMIT is unknown."""
    store.ping()
    calls: list[int] = []

    def body(tx: Any) -> None:
        calls.append(1)
        tx.conn.execute("SET LOCAL idle_in_transaction_session_timeout = '50ms'")
        time.sleep(0.5)  # idle in transaction: the server ends the session

    losses: list[int] = []
    lost = store.db.primary.lost

    def counted() -> None:
        losses.append(1)
        lost()

    store.db.primary.lost = counted  # type: ignore[method-assign]
    with pytest.raises(StoreUnavailableError):
        store.db.write(body)
    assert calls == [1]
    assert losses == [1]  # a closed connection, whatever the error's class
    store.ping()
    assert len(reads) == 2


def test_after_a_lost_connection_every_connection_is_checked_again(
    h: Harness, reads: list[int]
) -> None:
    """Two connections answered; one is lost: the other, alive and within the window,
    is checked before its next use all the same."""
    check = ha.PrimaryCheck(pooled=False)
    connect = partial(psycopg.connect, PG_URL, autocommit=True, row_factory=dict_row)
    with connect() as a, connect() as b:
        for conn in (a, b):
            tl = check.check(conn, primary=True)
            check.answered(conn, tl)
        assert check.check(b, primary=True) == tl
        assert len(reads) == 2
        check.lost()
        assert check.check(b, primary=True) == tl
        assert len(reads) == 3


def test_a_write_that_fails_for_another_reason_is_not_run_again(store: PostgresStore) -> None:
    """A lock or statement timeout leaves the connection alive: not a lost connection,
    so the write is not retried here (the caller decides)."""
    calls: list[int] = []

    def body(tx: Any) -> None:
        calls.append(1)
        tx.conn.execute("SET LOCAL statement_timeout = '10ms'")
        tx.conn.execute("SELECT pg_sleep(1)")

    with pytest.raises(StoreUnavailableError, match="statement timeout"):
        store.db.write(body)
    assert calls == [1]


def test_through_a_transaction_pooler_every_checkout_is_checked(
    h: Harness, reads: list[int]
) -> None:
    pooled = PostgresStore(f"{PG_URL}?pooler=transaction", pool_size=1)
    try:
        for _ in range(3):
            pooled.ping()
        assert len(reads) == 3
    finally:
        pooled.close()
