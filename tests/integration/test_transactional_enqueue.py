"""Transactional enqueue on PostgreSQL: ``App.enqueue``/``App.schedule`` with the
caller's connection write in the caller's transaction (store/postgres/caller.py).

Each test gets a fresh schema (the store's) and a caller's connection with the
server's default search path: the store's writes reach the store's schema through it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus

from cronwheel import App, at
from cronwheel.errors import QuotaExceededError, StoreUnavailableError, ValidationError
from cronwheel.store.postgres import PostgresStore
from tests.conftest import PG_URL, require_service
from tests.contract.pg_harness import drop_schema, new_schema

SA_URL = PG_URL.replace("postgresql://", "postgresql+psycopg://", 1)


@dataclass
class Pg:
    app: App
    store: PostgresStore
    schema: str

    def connect(self, **kwargs: Any) -> psycopg.Connection[Any]:
        return psycopg.connect(PG_URL, **kwargs)

    def firings(self) -> int:
        return len(self.store.list_firings(namespace="default"))

    def jobs(self) -> list[str]:
        return [j.name for j in self.store.list_jobs(namespace="default")]

    def orders(self) -> int:
        with self.connect() as c:
            row = c.execute(f"SELECT count(*) FROM {self.schema}.orders").fetchone()  # type: ignore[arg-type]
            assert row is not None
            return int(row[0])


@pytest.fixture
def pg() -> Iterator[Pg]:
    try:
        schema = new_schema()
    except psycopg.OperationalError as exc:
        require_service("PostgreSQL", exc)
        return
    store = PostgresStore(PG_URL, schema=schema, pool_size=2)
    try:
        store.migrate()
        with psycopg.connect(PG_URL, autocommit=True) as c:
            c.execute(f"CREATE TABLE {schema}.orders (id serial PRIMARY KEY, item text)")  # type: ignore[arg-type]
        app = App(PG_URL, allow_unknown_task=True)
        app.use_store(store)

        @app.task
        def ship(ctx: Any, order_id: int) -> None:
            pass

        yield Pg(app=app, store=store, schema=schema)
    finally:
        store.close()
        drop_schema(schema)


def _order(pg: Pg, conn: psycopg.Connection[Any], item: str = "book") -> int:
    row = conn.execute(
        f"INSERT INTO {pg.schema}.orders (item) VALUES (%s) RETURNING id",  # type: ignore[arg-type]
        (item,),
    ).fetchone()
    assert row is not None
    return int(row[0])


# -- sync psycopg -----------------------------------------------------------------------
def test_commit_writes_the_order_and_the_firing_together(pg: Pg) -> None:
    with pg.connect() as conn:
        order = _order(pg, conn)
        firing = pg.app.enqueue("ship", order, connection=conn)
        assert firing.state.value == "queued"
        assert pg.firings() == 0 and pg.orders() == 0  # not visible before the commit
        conn.commit()
    assert pg.firings() == 1 and pg.orders() == 1
    stored = pg.store.get_firing(firing.id)
    assert stored.state.value == "queued"
    assert pg.store.get_job_by_id(stored.job_id).spec.args == (order,)


def test_rollback_leaves_no_job_and_no_firing(pg: Pg) -> None:
    with pg.connect() as conn:
        _order(pg, conn)
        pg.app.enqueue("ship", 1, connection=conn)
        pg.app.schedule("ship", at("2030-01-01T00:00:00Z"), name="later", connection=conn)
        conn.rollback()
    assert pg.firings() == 0 and pg.jobs() == [] and pg.orders() == 0
    # no quota charged for the rolled-back firing either
    used = pg.store.quota_usage("default")
    assert [u.used.get("firings_per_minute", 0) for u in used] in ([], [0])


def test_a_savepoint_of_the_caller_rolls_back_only_its_part(pg: Pg) -> None:
    class Undo(Exception):
        pass

    with pg.connect() as conn:
        pg.app.enqueue("ship", 1, connection=conn)

        def enqueue_then_fail() -> None:
            with conn.transaction():
                pg.app.enqueue("ship", 2, connection=conn)
                raise Undo

        with pytest.raises(Undo):
            enqueue_then_fail()
        conn.commit()
    firings = pg.store.list_firings(namespace="default")
    assert [pg.store.get_job_by_id(f.job_id).spec.args for f in firings] == [(1,)]


def test_a_cronwheel_error_rolls_back_its_own_writes_only(pg: Pg) -> None:
    pg.store.set_quota("default", {"firings_per_minute": 1})
    with pg.connect() as conn:
        _order(pg, conn, "first")
        pg.app.enqueue("ship", 1, connection=conn)
        with pytest.raises(QuotaExceededError):
            pg.app.enqueue("ship", 2, connection=conn)
        assert conn.info.transaction_status == TransactionStatus.INTRANS  # still usable
        _order(pg, conn, "second")
        conn.commit()
    assert pg.firings() == 1 and pg.orders() == 2
    assert len(pg.jobs()) == 1  # the refused one-shot job went with its savepoint


def test_the_caller_connection_is_left_as_it_was(pg: Pg) -> None:
    with pg.connect() as conn:
        conn.execute("SET TimeZone = 'Asia/Kolkata'")
        conn.execute("SET search_path = pg_catalog")
        conn.commit()
        before = conn.execute("SELECT current_setting('search_path'), current_setting('TimeZone')")
        settings = before.fetchone()
        for n in range(8):  # past psycopg's prepare threshold (5)
            pg.app.enqueue("ship", n, connection=conn)
        assert conn.autocommit is False
        assert conn.info.transaction_status == TransactionStatus.INTRANS  # not committed
        after = conn.execute("SELECT current_setting('search_path'), current_setting('TimeZone')")
        assert after.fetchone() == settings
        prepared = conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
        assert prepared == (0,)
        assert conn.execute("SELECT 1").fetchone() == (1,)  # tuples: the row factory kept
        conn.commit()
    assert pg.firings() == 8


def test_an_idle_connection_not_in_autocommit_gets_the_transaction_started(pg: Pg) -> None:
    with pg.connect() as conn:
        assert conn.info.transaction_status == TransactionStatus.IDLE
        pg.app.enqueue("ship", 1, connection=conn)
        assert conn.info.transaction_status == TransactionStatus.INTRANS
        assert pg.firings() == 0
        conn.rollback()
    assert pg.firings() == 0


def test_autocommit_makes_the_write_its_own_transaction(pg: Pg) -> None:
    with pg.connect(autocommit=True) as conn:
        pg.app.enqueue("ship", 1, connection=conn)
        assert conn.info.transaction_status == TransactionStatus.IDLE
        assert pg.firings() == 1  # committed before the call returned
        with conn.transaction():  # inside a transaction block: atomic with it
            pg.app.enqueue("ship", 2, connection=conn)
            assert pg.firings() == 1
            raise psycopg.Rollback  # the block rolls back (and swallows this)
    assert pg.firings() == 1


def test_schedule_in_the_transaction(pg: Pg) -> None:
    with pg.connect() as conn:
        job = pg.app.schedule("ship", at("2030-01-01T00:00:00Z"), name="x", connection=conn)
        assert job.spec.name == "x" and pg.jobs() == []
        conn.commit()
    assert pg.jobs() == ["x"]


# -- the wake-up --------------------------------------------------------------------------
def _notified_by(listener: psycopg.Connection[Any], pid: int, timeout: float) -> bool:
    """Whether a cronwheel_work notification sent by backend ``pid`` arrives within
    ``timeout`` (other sessions of the server may notify the channel meanwhile)."""
    return any(n.pid == pid for n in listener.notifies(timeout=timeout, stop_after=None))


def test_notify_reaches_a_listener_at_commit_and_never_after_rollback(pg: Pg) -> None:
    with pg.connect(autocommit=True) as listener, pg.connect() as conn:
        listener.execute("LISTEN cronwheel_work")
        pid = conn.info.backend_pid
        pg.app.enqueue("ship", 1, connection=conn)
        assert not _notified_by(listener, pid, 0.5)  # held until the commit
        conn.commit()
        assert _notified_by(listener, pid, 10.0)
        pg.app.enqueue("ship", 2, connection=conn)
        conn.rollback()
        assert not _notified_by(listener, pid, 0.5)


# -- refusals -------------------------------------------------------------------------------
def test_a_connection_to_another_database_is_refused(pg: Pg) -> None:
    other = PG_URL.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(other) as conn:
        conn.execute("SELECT 1")
        with pytest.raises(ValidationError) as err:
            pg.app.enqueue("ship", 1, connection=conn)
        assert err.value.field == "connection"
        assert conn.info.transaction_status == TransactionStatus.INTRANS  # still usable
        assert conn.execute("SELECT 2").fetchone() == (2,)


def test_an_aborted_transaction_is_refused(pg: Pg) -> None:
    with pg.connect() as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1/0")
        with pytest.raises(ValidationError, match="aborted") as err:
            pg.app.enqueue("ship", 1, connection=conn)
        assert err.value.field == "connection"


@pytest.mark.parametrize("thing", [object(), "postgresql://x", 42])
def test_what_is_not_a_connection_is_refused(pg: Pg, thing: object) -> None:
    with pytest.raises(ValidationError) as err:
        pg.app.enqueue("ship", 1, connection=thing)
    assert err.value.field == "connection"
    assert pg.firings() == 0


@pytest.mark.parametrize("url", ["memory://", "sqlite:///{tmp}/cw.db"])
def test_an_app_not_on_postgresql_refuses_a_connection(pg: Pg, url: str, tmp_path: Any) -> None:
    app = App(url.format(tmp=tmp_path), allow_unknown_task=True)
    try:
        with pg.connect() as conn:
            with pytest.raises(ValidationError, match="PostgreSQL") as err:
                app.enqueue("ship", 1, connection=conn)
            assert err.value.field == "connection"
            with pytest.raises(ValidationError):
                app.schedule("ship", at("2030-01-01T00:00:00Z"), connection=conn)
    finally:
        app.close()


def test_a_driver_error_is_a_store_error_and_rolls_back_only_the_write(pg: Pg) -> None:
    """An open transaction that enqueued holds its namespace's fair-clock row until it
    ends: another enqueue of that namespace waits for it (README). With a lock timeout
    the wait is a driver error inside the write: StoreUnavailableError, and the
    caller's transaction goes on."""
    with pg.connect() as holder, pg.connect() as conn:
        pg.app.enqueue("ship", 1, connection=holder)  # not committed: holds the row
        _order(pg, conn)
        conn.execute("SET LOCAL lock_timeout = '100ms'")
        with pytest.raises(StoreUnavailableError, match="lock timeout"):
            pg.app.enqueue("ship", 2, connection=conn)
        assert conn.info.transaction_status == TransactionStatus.INTRANS
        conn.commit()
        holder.rollback()
    assert pg.orders() == 1 and pg.firings() == 0


# -- async psycopg --------------------------------------------------------------------------
def test_async_connection_commit_rollback_and_savepoint(pg: Pg) -> None:
    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(PG_URL) as conn:
            await pg_async_order(pg, conn)
            await pg.app.enqueue_async("ship", 1, connection=conn)
            assert pg.firings() == 0
            await conn.commit()
            assert pg.firings() == 1
            await pg.app.enqueue_async("ship", 2, connection=conn)
            await conn.rollback()
            assert pg.firings() == 1

            async def enqueue_then_fail() -> None:
                async with conn.transaction():
                    await pg.app.enqueue_async("ship", 3, connection=conn)
                    raise KeyError

            with pytest.raises(KeyError):
                await enqueue_then_fail()
            await pg.app.schedule_async(
                "ship", at("2030-01-01T00:00:00Z"), name="later", connection=conn
            )
            cur = await conn.execute("SELECT count(*) FROM pg_prepared_statements")
            assert await cur.fetchone() == (0,)
            await conn.commit()

    asyncio.run(scenario())
    assert pg.firings() == 1 and pg.orders() == 1 and "later" in pg.jobs()


async def pg_async_order(pg: Pg, conn: psycopg.AsyncConnection[Any]) -> None:
    await conn.execute(f"INSERT INTO {pg.schema}.orders (item) VALUES ('a')")  # type: ignore[arg-type]


def test_enqueue_async_without_a_connection(pg: Pg) -> None:
    firing = asyncio.run(pg.app.enqueue_async("ship", 1))
    assert pg.store.get_firing(firing.id).state.value == "queued"


# -- SQLAlchemy -------------------------------------------------------------------------------
def test_sqlalchemy_session_commit_rollback_and_nested(pg: Pg) -> None:
    import sqlalchemy as sa  # the test extra installs it (so CI never skips this)
    from sqlalchemy.orm import Session

    engine = sa.create_engine(SA_URL)
    try:
        with Session(engine) as session:
            session.execute(sa.text(f"INSERT INTO {pg.schema}.orders (item) VALUES ('a')"))
            pg.app.enqueue("ship", 1, connection=session)

            def enqueue_then_fail() -> None:
                with session.begin_nested():
                    pg.app.enqueue("ship", 2, connection=session)
                    raise KeyError

            with pytest.raises(KeyError):
                enqueue_then_fail()
            assert pg.firings() == 0
            session.commit()
        assert pg.firings() == 1 and pg.orders() == 1
        with Session(engine) as session:
            pg.app.enqueue("ship", 3, connection=session)
            pg.app.schedule("ship", at("2030-01-01T00:00:00Z"), name="x", connection=session)
            session.rollback()
        assert pg.firings() == 1 and "x" not in pg.jobs()
    finally:
        engine.dispose()


def test_sqlalchemy_async_session(pg: Pg) -> None:
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    async def scenario() -> None:
        engine = create_async_engine(SA_URL)
        try:
            async with AsyncSession(engine) as session:
                await pg.app.enqueue_async("ship", 1, connection=session)
                await session.commit()
            async with AsyncSession(engine) as session:
                await pg.app.enqueue_async("ship", 2, connection=session)
                await session.rollback()
        finally:
            await engine.dispose()

    asyncio.run(scenario())
    assert pg.firings() == 1


def test_a_sync_call_refuses_an_async_connection(pg: Pg) -> None:
    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(PG_URL) as conn:
            with pytest.raises(ValidationError, match="enqueue_async") as err:
                pg.app.enqueue("ship", 1, connection=conn)
            assert err.value.field == "connection"

    asyncio.run(scenario())
