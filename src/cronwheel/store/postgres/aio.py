"""PostgreSQL's AsyncCalls (store/async_port.py): the API's hottest reads awaited on its
event loop, on async connections of a pool of their own.

Under wrk, a ``GET /v1/firings/{id}`` on PostgreSQL cost the API process ~610 µs of
CPU, of which the read itself (psycopg, one round trip) was ~140: the rest was the trip
to a store thread and back (the executor's queue, the loop's wake-up by its self-pipe,
the GIL changing hands with the other store threads). The same statement on an async
connection, awaited on the loop while other requests run, costs ~90 µs and no thread.

The rules are Database.run's for a read, on the same Database (its SQL, its clock
hooks, its PrimaryCheck and stall watchdog), so nothing a read promises changes:

- a checkout of the pool checks the server's role and timeline by a round trip, or
  trusts a connection that answered within ``TRUST_S`` since any connection failure
  (ha.py); a standby is discarded and the next connection tried; a timeline below the
  highest this process has seen (on either pool) is refused: StoreUnavailableError;
- a statement that runs past ``stall_timeout`` has its socket shut by the watchdog;
- a lost connection is retried on a fresh one (a read wrote nothing), at most
  ``_READ_RETRIES`` times, then StoreUnavailableError; a pool with no connection for
  the store's timeout is StoreUnavailableError too; any other driver error is a
  StoreError.

One write is awaited here too: the API's job creation in one statement
(``create_job``: store/postgres/jobs_quota.py, schema.sql migration_23), by
Database.run's rules for a write of one autocommitted statement: a connection that
fails its checkout is replaced; once one is checked out the statement may have been
sent, and a lost connection is StoreUnavailableError (the job may or may not exist,
as on the thread path: the store's own one-statement creation follows the same rule).
When the function leaves the creation to the full transaction (CW001, nothing written)
it answers None, and the API runs that transaction as before.

Concurrent reads of firings, and of jobs by name, go as one statement of each kind
(store/coalesced.py: each is sent after it was asked; at most two such statements in
flight), which is most of a read's cost saved when many are asked at once. Concurrent
creations go as one statement too (``create_jobs_one``, at most four in flight: a
write's statement waits for its commit): one call of the same function per job, one
commit for all. A creation the statement cannot settle (CW001) fails it whole, with
nothing written, and each of its creations is then made alone, as before; a job's
answer (created, its name taken, left to the transaction) is the one it gets alone.

The pool is opened on one loop (the API's lifespan) and serves that loop only: its
connections wait through that loop's selector.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, TypeVar

import orjson
import psycopg
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from cronwheel.domain.attempts import Attempt
from cronwheel.domain.models import Firing, FiringId, Job, JobSpec
from cronwheel.errors import CronwheelError, StoreError
from cronwheel.store import codec
from cronwheel.store.coalesced import Coalesced
from cronwheel.store.core.bulk import job_exists
from cronwheel.store.core.flows import firing_and_attempts, job_from_rows
from cronwheel.store.postgres import jsonload
from cronwheel.store.postgres.db import (
    Database,
    getconn_slice,
    pool_timeout,
    query,
    retry_pause,
)
from cronwheel.store.postgres.dispatch import enqueue_now_params
from cronwheel.store.postgres.jobs_quota import create_params, created_job, decides

AConn = psycopg.AsyncConnection[DictRow]
T = TypeVar("T")


class PgAsyncCalls:
    """See the module docstring; one per event loop (``PostgresStore.async_calls``)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._pool: AsyncConnectionPool[AConn] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._firings: Coalesced[FiringId, list[DictRow]] = Coalesced(self._firings_rows)
        self._jobs: Coalesced[tuple[str, str], DictRow] = Coalesced(self._jobs_rows)
        # at most 64 a statement (a statement that fails as a whole is made again one
        # creation at a time); four in flight, as each waits for its commit
        self._creates: Coalesced[_Creation, _Created] = Coalesced(
            self._create_many, limit=64, flights=4
        )

    async def open(self) -> None:
        if self._pool is not None:
            return
        db = self.db
        pool: AsyncConnectionPool[AConn] = AsyncConnectionPool(
            db.conninfo,
            connection_class=AConn,
            configure=jsonload.configure_async,
            **db.pool_options(db.pool_size, db.timeout_s, "cronwheel-async"),
        )
        await pool.open(wait=False)
        self._pool, self._loop = pool, asyncio.get_running_loop()

    async def close(self) -> None:
        await self._firings.close()
        await self._jobs.close()
        await self._creates.close()
        pool, self._pool, self._loop = self._pool, None, None
        if pool is not None:
            await pool.close()

    def ready(self) -> bool:
        return self._pool is not None and asyncio.get_running_loop() is self._loop

    async def firing_with_attempts(self, firing_id: FiringId) -> tuple[Firing, list[Attempt]]:
        return firing_and_attempts(await self._firings.get(firing_id) or [], firing_id)

    async def _firings_rows(self, ids: Sequence[FiringId]) -> dict[FiringId, list[DictRow]]:
        """``firing_with_attempts``' rows of each of ``ids`` found, in one statement."""
        by_id: dict[FiringId, list[DictRow]] = defaultdict(list)
        for row in await self._read("firings_with_attempts", {"ids": list(ids)}):
            by_id[row["id"]].append(row)
        return by_id

    async def get_job(self, namespace: str, name: str) -> Job:
        row = await self._jobs.get((namespace, name))
        return job_from_rows([] if row is None else [row], name)

    async def _jobs_rows(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], DictRow]:
        """``get_job``'s row of each (namespace, name) of ``keys`` found, in one statement."""
        params = {"namespaces": [ns for ns, _ in keys], "names": [name for _, name in keys]}
        rows = await self._read("get_jobs_by_names", params)
        return {(row["namespace"], row["name"]): row for row in rows}

    async def create_job(
        self, spec: JobSpec, *, first_fire_at: datetime, valid_from: datetime, check_task: bool
    ) -> Job | None:
        """``Store.create_job`` in one statement (module doc) whose first instant holds for
        a store clock in ``[valid_from, first_fire_at)`` (the statement checks it); None
        when the full creation must decide (nothing written): the clock outside that
        range, or a decision of the quotas, or (``check_task``) a task no worker serves
        while some worker has served tasks. Creations asked together share a statement
        (module doc)."""
        params = create_params(spec, first_fire_at, check_task=check_task, valid_from=valid_from)
        outcome = await self._creates.get(_Creation(params))
        if isinstance(outcome, BaseException):
            raise outcome
        return None if outcome is None else created_job(spec, outcome)

    async def _create_many(self, creations: Sequence[_Creation]) -> dict[_Creation, _Created]:
        """Each creation's outcome: its rows (none: the name is taken), None (it must
        decide), or its error. Many go as one statement (``create_jobs_one``); when that
        statement fails as a whole (a creation must decide, or any error that left the
        connection alive: nothing was written), each is made alone, as it would have
        been. A connection lost under it fails each (it may have been written)."""
        if len(creations) == 1:
            return {creations[0]: await self._create_alone(creations[0])}
        items = [{"ord": i, **c.params} for i, c in enumerate(creations, start=1)]
        text = query(self.db.q["create_jobs_one"])
        values = self.db.params({"items": orjson.dumps(items).decode()})

        async def body(conn: AConn) -> list[DictRow] | None:
            try:
                return await (await conn.execute(text, values)).fetchall()
            except psycopg.Error:
                if conn.broken or conn.closed:
                    raise
                return None  # the statement wrote nothing: each goes alone

        rows = await self._unit(body, write=True)
        if rows is not None:
            by_ord: dict[int, list[DictRow]] = defaultdict(list)
            for row in rows:
                by_ord[row["ord"]].append(row)
            return {c: by_ord.get(i, []) for i, c in enumerate(creations, start=1)}
        alone = await asyncio.gather(
            *(self._create_alone(c) for c in creations), return_exceptions=True
        )
        return dict(zip(creations, alone, strict=True))

    async def _create_alone(self, creation: _Creation) -> list[DictRow] | None:
        """``put_job_one`` for one creation: its rows, or None when it must decide."""
        return await self._unless_decided("put_job_one", creation.params)

    async def enqueue_now(self, spec: JobSpec) -> Firing | None:
        """``Store.enqueue_now`` in its one statement (``enqueue_now_one``, as
        ``PgDispatch.enqueue_now``); None when the transaction must decide, with nothing
        written: over the namespace's ``firings_per_minute`` (it refuses with its
        retry-after). A name the namespace has is 409."""
        params = enqueue_now_params(spec, refuse=True)
        rows = await self._unless_decided("enqueue_now_one", params, taken=spec)
        return None if rows is None else codec.firing_from_row(rows[0])

    async def _unless_decided(
        self, name: str, params: Mapping[str, Any], *, taken: JobSpec | None = None
    ) -> list[DictRow] | None:
        """One autocommitted statement of a function that may leave the work to the
        store's transaction (CW001, nothing written: None), by Database.run's rules for
        a write. ``taken``: the job whose name a unique violation says is taken (409)."""
        text, values = query(self.db.q[name]), self.db.params(params)

        async def body(conn: AConn) -> list[DictRow] | None:
            try:
                return await (await conn.execute(text, values)).fetchall()
            except psycopg.errors.UniqueViolation:
                if taken is None:
                    raise
                raise job_exists(taken) from None
            except psycopg.Error as exc:
                if decides(exc):
                    return None
                raise

        return await self._unit(body, write=True)

    async def _read(self, name: str, params: Mapping[str, Any]) -> list[DictRow]:
        """One statement of this package's SQL, by Database.run's rules for a read."""
        text, values = query(self.db.q[name]), self.db.params(params)

        async def body(conn: AConn) -> list[DictRow]:
            return await (await conn.execute(text, values)).fetchall()

        return await self._unit(body, write=False)

    async def _unit(self, body: Callable[[AConn], Awaitable[T]], *, write: bool) -> T:
        """``body``, one statement, on a connection of the pool by Database.run's rules
        for a read, or (``write``) for a write of one autocommitted statement: not run
        again once it may have been sent."""
        attempt = 0
        while True:
            attempt += 1
            used: list[AConn] = []
            try:
                async with self._checkout() as conn:
                    used.append(conn)
                    return await body(conn)
            except CronwheelError:
                raise
            except PoolTimeout as exc:
                raise pool_timeout(exc, self.db.timeout_s) from exc
            except psycopg.Error as exc:
                lost = bool(used) and used[-1].closed
                sent = write and bool(used)  # checked out: the statement may have gone
                await asyncio.sleep(retry_pause(exc, lost=lost, written=sent, attempt=attempt))

    @asynccontextmanager
    async def _checkout(self) -> AsyncIterator[AConn]:
        """Database._checkout's rules on the async pool (the primary's)."""
        pool = self._pool
        if pool is None:
            raise StoreError("the store's async reads are not open", field="store")
        db = self.db
        for _ in range(db.pool_size + 1):
            conn = await _getconn(pool, db.timeout_s)
            db.stalls.watch(conn)
            try:
                tl = await db.primary.acheck(conn)
            except psycopg.Error:
                db.stalls.unwatch(conn)
                await pool.putconn(conn)
                continue
            except StoreError:
                db.stalls.unwatch(conn)
                await conn.close()
                await pool.putconn(conn)
                raise
            try:
                yield conn
                db.primary.answered(conn, tl)
            except psycopg.Error as exc:
                db.primary.failed(conn, exc)
                raise
            finally:
                db.stalls.unwatch(conn)
                await pool.putconn(conn)
            return
        raise psycopg.OperationalError("no connection of the pool answers a primary's role")


async def _getconn(pool: AsyncConnectionPool[AConn], timeout_s: float) -> AConn:
    """Database._getconn on the async pool: asked in short slices, so that a caller
    waiting through a failover gets a fresh connection attempt."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await pool.getconn(timeout=getconn_slice(deadline))
        except PoolTimeout:
            if time.monotonic() >= deadline:
                raise


class _Creation:
    """One creation's ``put_job_one`` parameters; a key of its own (by identity) among
    those asked together."""

    __slots__ = ("params",)

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params


# a creation's rows (none: the name is taken), None (it must decide), or its error
_Created = list[DictRow] | None | BaseException
