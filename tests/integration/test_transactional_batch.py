"""Transactional batches on PostgreSQL: ``App.schedule_many``/``enqueue_many`` (and their
``*_async`` twins) with the caller's connection write in the caller's transaction,
through the same bulk path (COPY) as the App's own (store/postgres/caller.py).

The fixture and helpers are test_transactional_enqueue.py's: a fresh schema per test
and a caller's connection with the server's default search path.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus

from cronwheel import at, every
from cronwheel.errors import BatchError, QuotaExceededError
from cronwheel.store.postgres import caller
from tests.conftest import PG_URL
from tests.integration import test_transactional_enqueue as base
from tests.integration.test_transactional_enqueue import SA_URL, Pg, _notified_by, _order

pg = base.pg  # the fixture

LATER = "2030-01-01T00:00:00Z"


def _runs(n: int, first: int = 0) -> list[dict[str, Any]]:
    return [{"task": "ship", "args": (first + i,)} for i in range(n)]


def _jobs(n: int, prefix: str = "j") -> list[dict[str, Any]]:
    return [{"task": "ship", "schedule": every("1h"), "name": f"{prefix}{i}"} for i in range(n)]


def _args(pg: Pg) -> list[tuple[Any, ...]]:
    firings = pg.store.list_firings(namespace="default", limit=10_000)
    return sorted(pg.store.get_job_by_id(f.job_id).spec.args for f in firings)


def test_commit_writes_the_order_and_both_batches_together(pg: Pg) -> None:
    with pg.connect() as conn:
        _order(pg, conn)
        made = pg.app.enqueue_many(_runs(3), connection=conn)
        jobs = pg.app.schedule_many(_jobs(2), connection=conn)
        assert made.ok and jobs.ok and len(made.created) == 3
        assert [f.state.value for f in made.created] == ["queued"] * 3
        assert pg.firings() == 0 and pg.jobs() == [] and pg.orders() == 0  # not yet
        conn.commit()
    assert pg.orders() == 1
    assert _args(pg) == [(0,), (1,), (2,)]
    assert {"j0", "j1"} <= set(pg.jobs())
    assert pg.store.get_job("default", "j0").next_fire_at is not None


def test_rollback_leaves_no_job_no_firing_and_no_charge(pg: Pg) -> None:
    with pg.connect() as conn:
        _order(pg, conn)
        pg.app.enqueue_many(_runs(5), connection=conn)
        pg.app.schedule_many(_jobs(3), connection=conn)
        conn.rollback()
    assert pg.firings() == 0 and pg.jobs() == [] and pg.orders() == 0
    used = pg.store.quota_usage("default")
    assert [u.used.get("firings_per_minute", 0) for u in used] in ([], [0])
    assert [u.used.get("jobs", 0) for u in used] in ([], [0])


def test_many_batches_and_single_calls_share_one_transaction(pg: Pg) -> None:
    """The bulk path's temporary table is dropped after each batch: a transaction may
    hold any number of batches before it commits."""
    with pg.connect() as conn:
        for round_ in range(3):
            assert pg.app.enqueue_many(_runs(2, first=10 * round_), connection=conn).ok
            pg.app.enqueue("ship", 100 + round_, connection=conn)
            assert pg.app.schedule_many(_jobs(2, prefix=f"r{round_}-"), connection=conn).ok
        conn.commit()
    assert len(_args(pg)) == 9
    assert len([n for n in pg.jobs() if n.startswith("r")]) == 6


def test_a_refused_batch_rolls_back_to_its_savepoint_only(pg: Pg) -> None:
    """A quota the batch exceeds, or an all-or-nothing batch with a refused item: the
    batch's writes are undone, the caller's own and earlier ones stay, and the
    transaction goes on."""
    pg.store.set_quota("default", {"firings_per_minute": 4})
    with pg.connect() as conn:
        _order(pg, conn, "first")
        assert pg.app.enqueue_many(_runs(2), connection=conn).ok
        with pytest.raises(QuotaExceededError):
            pg.app.enqueue_many(_runs(3, first=10), connection=conn)  # 2 + 3 > 4
        assert conn.info.transaction_status == TransactionStatus.INTRANS
        items = [*_jobs(2, prefix="aon"), {"task": "ship", "schedule": "not a schedule"}]
        with pytest.raises(BatchError) as err:
            pg.app.schedule_many(items, all_or_nothing=True, connection=conn)
        assert [i for i, _ in err.value.errors] == [2]
        taken = [{"task": "ship", "schedule": every("1h"), "name": "dup"}] * 2
        with pytest.raises(BatchError):  # the store's refusal (a name taken), after COPY
            pg.app.schedule_many(taken, all_or_nothing=True, connection=conn)
        assert conn.info.transaction_status == TransactionStatus.INTRANS
        _order(pg, conn, "second")
        assert pg.app.enqueue_many(_runs(2, first=20), connection=conn).ok
        conn.commit()
    assert pg.orders() == 2
    assert _args(pg) == [(0,), (1,), (20,), (21,)]
    assert not any(n.startswith(("aon", "dup")) for n in pg.jobs())


def test_a_savepoint_of_the_caller_rolls_back_only_its_batch(pg: Pg) -> None:
    class Undo(Exception):
        pass

    with pg.connect() as conn:
        pg.app.enqueue_many(_runs(2), connection=conn)

        def batch_then_fail() -> None:
            with conn.transaction():
                pg.app.enqueue_many(_runs(2, first=10), connection=conn)
                pg.app.schedule_many(_jobs(1, prefix="undone"), connection=conn)
                raise Undo

        with pytest.raises(Undo):
            batch_then_fail()
        conn.commit()
    assert _args(pg) == [(0,), (1,)]
    assert "undone0" not in pg.jobs()


def test_per_item_errors_keep_the_valid_items_in_the_transaction(pg: Pg) -> None:
    with pg.connect() as conn:
        pg.app.schedule("ship", at(LATER), name="taken", replace=False, connection=conn)
        items = [*_jobs(1), {"task": "ship", "schedule": every("1h"), "name": "taken"}]
        result = pg.app.schedule_many(items, connection=conn)
        assert [type(r).__name__ for r in result.items] == ["Job", "ConflictError"]
        assert result.errors[0][1].field == "items[1].name"
        conn.commit()
    assert {"j0", "taken"} <= set(pg.jobs())


def test_the_connection_is_left_as_it_was(pg: Pg) -> None:
    with pg.connect() as conn:
        conn.execute("SET TimeZone = 'Asia/Kolkata'")
        conn.execute("SET search_path = pg_catalog")
        conn.commit()
        settings = conn.execute("SELECT current_setting('search_path'), now()::text").fetchone()
        assert settings is not None
        for n in range(3):
            pg.app.enqueue_many(_runs(2, first=10 * n), connection=conn)
        row = conn.execute("SELECT current_setting('search_path'), now()::text").fetchone()
        assert row == settings  # one transaction: now() is its start, in the caller's zone
        assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone() == (0,)
        temp = "SELECT count(*) FROM pg_class WHERE relname = 'bulk_jobs'"
        assert conn.execute(temp).fetchone() == (0,)  # the batch's table is gone
        conn.commit()
    assert len(_args(pg)) == 6


def test_notify_reaches_a_listener_at_commit_and_never_after_rollback(pg: Pg) -> None:
    with pg.connect(autocommit=True) as listener, pg.connect() as conn:
        listener.execute("LISTEN cronwheel_work")
        pid = conn.info.backend_pid
        pg.app.enqueue_many(_runs(3), connection=conn)
        assert not _notified_by(listener, pid, 0.5)  # held until the commit
        conn.commit()
        assert _notified_by(listener, pid, 10.0)
        pg.app.enqueue_many(_runs(3, first=10), connection=conn)
        conn.rollback()
        assert not _notified_by(listener, pid, 0.5)


def test_autocommit_makes_the_batch_its_own_transaction(pg: Pg) -> None:
    with pg.connect(autocommit=True) as conn:
        pg.app.enqueue_many(_runs(2), connection=conn)
        assert conn.info.transaction_status == TransactionStatus.IDLE
        assert pg.firings() == 2


# -- async psycopg ------------------------------------------------------------------------
def test_async_connection_commit_rollback_and_savepoint(
    pg: Pg, monkeypatch: pytest.MonkeyPatch
) -> None:
    """COPY through the AsyncConnection's loop, its rows sent in several chunks."""
    monkeypatch.setattr(caller, "COPY_CHUNK", 7)

    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(PG_URL) as conn:
            made = await pg.app.enqueue_many_async(_runs(20), connection=conn)
            assert made.ok and len(made.created) == 20
            jobs = await pg.app.schedule_many_async(_jobs(16), connection=conn)
            assert jobs.ok
            assert pg.firings() == 0
            await conn.commit()
            assert pg.firings() == 20 and len([n for n in pg.jobs() if "@" not in n]) == 16
            await pg.app.enqueue_many_async(_runs(9, first=100), connection=conn)
            await conn.rollback()

            async def batch_then_fail() -> None:
                async with conn.transaction():
                    await pg.app.enqueue_many_async(_runs(9, first=200), connection=conn)
                    raise KeyError

            with pytest.raises(KeyError):
                await batch_then_fail()
            result = await pg.app.schedule_many_async(
                [{"task": "ship", "schedule": every("1h"), "name": "j0"}], connection=conn
            )
            assert result.errors[0][1].field == "items[0].name"  # the name is taken
            await pg.app.enqueue_many_async(_runs(1, first=300), connection=conn)
            cur = await conn.execute("SELECT count(*) FROM pg_prepared_statements")
            assert await cur.fetchone() == (0,)
            await conn.commit()

    asyncio.run(scenario())
    assert _args(pg) == sorted([(i,) for i in range(20)] + [(300,)])


def test_async_batches_without_a_connection(pg: Pg) -> None:
    made = asyncio.run(pg.app.enqueue_many_async(_runs(2), all_or_nothing=True))
    assert made.ok and pg.firings() == 2


# -- SQLAlchemy ------------------------------------------------------------------------------
def test_sqlalchemy_session_commit_rollback_and_nested(pg: Pg) -> None:
    import sqlalchemy as sa
    from sqlalchemy.orm import Session

    engine = sa.create_engine(SA_URL)
    try:
        with Session(engine) as session:
            session.execute(sa.text(f"INSERT INTO {pg.schema}.orders (item) VALUES ('a')"))
            pg.app.enqueue_many(_runs(2), connection=session)

            def batch_then_fail() -> None:
                with session.begin_nested():
                    pg.app.enqueue_many(_runs(2, first=10), connection=session)
                    raise KeyError

            with pytest.raises(KeyError):
                batch_then_fail()
            pg.app.schedule_many(_jobs(2), connection=session)
            assert pg.firings() == 0
            session.commit()
        assert _args(pg) == [(0,), (1,)] and pg.orders() == 1 and "j1" in pg.jobs()
        with Session(engine) as session:
            pg.app.enqueue_many(_runs(2, first=20), connection=session)
            pg.app.schedule_many(_jobs(2, prefix="x"), connection=session)
            session.rollback()
        assert pg.firings() == 2 and "x0" not in pg.jobs()
    finally:
        engine.dispose()


def test_sqlalchemy_async_session(pg: Pg) -> None:
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    async def scenario() -> None:
        engine = create_async_engine(SA_URL)
        try:
            async with AsyncSession(engine) as session:
                await pg.app.enqueue_many_async(_runs(2), connection=session)
                await pg.app.schedule_many_async(_jobs(1), connection=session)
                await session.commit()
            async with AsyncSession(engine) as session:
                await pg.app.enqueue_many_async(_runs(2, first=10), connection=session)
                await session.rollback()
        finally:
            await engine.dispose()

    asyncio.run(scenario())
    assert _args(pg) == [(0,), (1,)] and "j0" in pg.jobs()


def test_an_app_not_on_postgresql_refuses_a_connection(pg: Pg) -> None:
    from cronwheel import App
    from cronwheel.errors import ValidationError

    app = App("memory://", allow_unknown_task=True)
    try:
        with pg.connect() as conn:
            for call in (
                lambda: app.enqueue_many(_runs(1), connection=conn),
                lambda: app.schedule_many(_jobs(1), connection=conn),
            ):
                with pytest.raises(ValidationError, match="PostgreSQL") as err:
                    call()
                assert err.value.field == "connection"
    finally:
        app.close()
