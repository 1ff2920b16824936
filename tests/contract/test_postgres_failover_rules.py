"""PostgresStore's failover rules on one server (the HA cluster itself is tests/ha):
the store URL's own parameters, the epoch carrying the PostgreSQL timeline, the fence
refusing an epoch of an older timeline, the refusal of a server whose timeline went
backwards, replica reads and transaction-pooler mode."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from cronwheel.errors import LeaseLostError, StoreError, StoreUnavailableError
from cronwheel.store.postgres import PostgresStore
from cronwheel.store.postgres.ha import parse_url
from cronwheel.store.postgres.listen import PgListenWakeup, PollOnly
from cronwheel.store.protocol import DISPATCHER_LEASE
from tests.conftest import PG_URL
from tests.contract.conftest import Harness
from tests.contract.pg_harness import pg_store, postgres_harness

S = timedelta(seconds=1)


@pytest.fixture
def h(tmp_path: Any) -> Iterator[Harness]:
    yield from postgres_harness(tmp_path)


def _timeline(store: PostgresStore) -> int:
    row = store.db.read(
        lambda tx: tx.conn.execute(
            "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))"
            "::bit(32)::bigint AS tl"
        ).fetchone()
    )
    assert row is not None
    return int(row["tl"])


# -- the URL -----------------------------------------------------------------------------


def test_own_url_parameters_are_split_off_and_validated() -> None:
    u = parse_url(
        "postgresql://u@a:5441,b:5442/db?target_session_attrs=read-write&pooler=transaction"
        "&replica_hosts=a:5441,b:5442&listen_hosts=a:5441"
    )
    assert u.libpq == "postgresql://u@a:5441,b:5442/db?target_session_attrs=read-write"
    assert (u.pooler, u.replica_hosts, u.listen_hosts) == ("transaction", "a:5441,b:5442", "a:5441")
    with pytest.raises(StoreError, match="pooler='session'"):
        parse_url("postgresql://u@a/db?pooler=session")
    assert parse_url("postgresql://u@h/db?stall_timeout=2.5").stall_timeout == 2.5
    for stall in ("x", "-1", "1e9"):
        with pytest.raises(StoreError, match="stall_timeout"):
            parse_url(f"postgresql://u@h/db?stall_timeout={stall}")
    for bad in ("a", "a:", ":5", "a:x", "a:70000", "a:1,,b:2"):
        with pytest.raises(StoreError, match="replica_hosts") as err:
            parse_url(f"postgresql://u@h/db?replica_hosts={bad}")
        assert err.value.field == "store"
    # libpq's own parameters pass as libpq reads them: percent-decoded, '+' a plus
    passed = parse_url("postgresql://u@h/db?options=-c%20a%3Db&application_name=x+y")
    assert passed.libpq == "postgresql://u@h/db?options=-c%20a%3Db&application_name=x%2By"


def test_pooler_mode_sends_no_session_settings_and_prepares_nothing() -> None:
    store = PostgresStore(f"{PG_URL}?pooler=transaction", pool_size=2)
    try:
        assert "options" not in store.db.conninfo
        assert store.ping() is None
        with store.db.pool.connection() as conn:
            assert conn.prepare_threshold is None
        with pytest.raises(StoreError, match="schema"):
            PostgresStore(f"{PG_URL}?pooler=transaction", schema="x")
        wake = store.open_wakeup(lambda: None)
        assert isinstance(wake, PollOnly)
        wake.close()
    finally:
        store.close()
    direct = PostgresStore(f"{PG_URL}?pooler=transaction&listen_hosts=127.0.0.1:5432")
    try:
        wake = direct.open_wakeup(lambda: None)
        assert isinstance(wake, PgListenWakeup)
        wake.close()
    finally:
        direct.close()


# -- the epoch and the timeline ------------------------------------------------------------


def test_epoch_carries_the_timeline_and_takeovers_count_within_it(h: Harness) -> None:
    tl = _timeline(pg_store(h))
    a = h.store.acquire_lease(DISPATCHER_LEASE, "a", 2 * S)
    assert a is not None and a.epoch == (tl << 32) + 1
    h.advance(3 * S)
    b = h.store.acquire_lease(DISPATCHER_LEASE, "b", 2 * S)
    assert b is not None and b.epoch == a.epoch + 1


def test_an_epoch_of_an_older_timeline_is_fenced_then_renewed_into_a_higher_term(
    h: Harness,
) -> None:
    """What a failover does to a leader: its lease row (from before the promotion)
    carries the old timeline; its next enqueue is refused, its renewal starts a new
    term numbered above anything of the old timeline."""
    store = pg_store(h)
    tl = _timeline(store)
    a = h.store.acquire_lease(DISPATCHER_LEASE, "a", 60 * S)
    assert a is not None
    # the row as a primary of timeline tl-1 left it, with a high term
    old_epoch = ((tl - 1) << 32) + 4_000_000
    store.db.write(
        lambda tx: tx.conn.execute(
            "UPDATE leases SET epoch = %s WHERE name = %s", (old_epoch, DISPATCHER_LEASE)
        )
    )
    stale = dataclasses.replace(a, epoch=old_epoch)
    with pytest.raises(LeaseLostError):
        h.store.enqueue(stale, [])
    renewed = h.store.acquire_lease(DISPATCHER_LEASE, "a", 60 * S)
    assert renewed is not None and renewed.epoch == (tl << 32) + 1 > old_epoch
    h.store.enqueue(renewed, [])  # the new term writes


def test_a_server_whose_timeline_went_backwards_is_never_written(h: Harness) -> None:
    store = pg_store(h)
    tl = _timeline(store)
    assert store.db.timeline == tl
    store.db.timeline = tl + 1  # this process saw a later timeline (a failover)
    with pytest.raises(StoreUnavailableError, match=f"timeline {tl} after timeline {tl + 1}"):
        h.store.acquire_lease(DISPATCHER_LEASE, "a", 60 * S)
    with pytest.raises(StoreUnavailableError, match="former primary"):
        h.store.status()
    store.db.timeline = tl
    assert h.store.acquire_lease(DISPATCHER_LEASE, "a", 60 * S) is not None


def test_replica_reads_use_their_own_pool(h: Harness) -> None:
    """``replica_hosts`` on a server without replicas: prefer-standby falls back to the
    primary, through the second pool; decisions stay on the first."""
    url = f"{PG_URL}?replica_hosts=127.0.0.1:5432"
    store = PostgresStore(url, schema=pg_store(h).schema, pool_size=2)
    try:
        assert store.db.replica_pool is not None
        before = store.db.replica_pool.get_stats().get("requests_num", 0)
        store.status()
        store.list_jobs(limit=1)
        after = store.db.replica_pool.get_stats().get("requests_num", 0)
        assert after - before == 2
        store.get_lease(DISPATCHER_LEASE)
        assert store.db.replica_pool.get_stats().get("requests_num", 0) == after
    finally:
        store.close()


def test_a_stalled_unit_of_work_fails_within_stall_timeout(h: Harness) -> None:
    """A server that stops answering (here: a statement that sleeps) costs a call
    ``stall_timeout``, not a TCP timeout; the pool goes on with fresh connections."""
    url = f"{PG_URL}?stall_timeout=0.5"
    store = PostgresStore(url, schema=pg_store(h).schema, pool_size=2)
    try:
        t = time.monotonic()
        with pytest.raises(StoreUnavailableError):
            store.db.write(lambda tx: tx.conn.execute("SELECT pg_sleep(10)"))
        assert time.monotonic() - t < 5
        store.ping()
    finally:
        store.close()
