"""Plumbing of PostgresStore: the connection pool, transactions with retries, error
mapping at the edge, and the store's clock expression.

Error mapping (the only place psycopg exceptions are turned into cronwheel's):

- serialization failure / deadlock (SQLSTATE 40001 / 40P01): the transaction was
  rolled back by the server, so it is retried here, a few times with jitter;
- a lost or refused connection, an admin shutdown, a pool timeout, a query or lock
  timeout: :class:`StoreUnavailableError` — after a small bounded retry for reads,
  and for a write whose connection was lost before its COMMIT (or its one
  autocommitted statement) was sent: it wrote nothing. A write lost during COMMIT is
  not retried: its outcome is unknown (every write is a compare-and-swap, so the
  caller's retry is safe);
- any other driver error: :class:`StoreError` (a bug or a schema mismatch).

Domain errors raised by the transaction body (ConflictError, LeaseLostError, ...)
pass through untouched and roll the transaction back. High availability (the URL, the
primary check at checkout, replica reads, the stall watchdog, poolers): ha.py.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, LiteralString, Protocol, TypeVar

import psycopg
from psycopg import errors as pgerrors
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from cronwheel.errors import CronwheelError, StoreError, StoreUnavailableError
from cronwheel.store.postgres import jsonload
from cronwheel.store.postgres.ha import (
    PrimaryCheck,
    StallWatchdog,
    parse_url,
    session_conninfo,
    with_hosts,
)
from cronwheel.store.postgres.planning import ClaimPlans, fixed_limit
from cronwheel.store.sql import load_package_queries, load_queries

T = TypeVar("T")
Conn = psycopg.Connection[DictRow]

_PKG = "cronwheel.store.postgres"
_NOW = re.compile(r"(?<![:\w]):now\b")
# The store's clock in SQL. now() is the transaction's start on the server: one
# instant for every statement of a transaction. The two parameters are test hooks
# (see DbTime) and are NULL / zero in production.
NOW_SQL = "(coalesce(%(_pin)s::timestamptz, now()) + %(_off)s::interval)"

_WHERE = "/*where*/"
_TX_RETRIES = 5  # serialization failures and deadlocks
_READ_RETRIES = 2  # connection errors on reads; on writes that sent no COMMIT
_GETCONN_SLICE_S = 0.5  # see Database._getconn


def load_sql() -> dict[str, str]:
    """The named blocks of this package's query files, with ``:now`` expanded."""
    return {k: _NOW.sub(NOW_SQL, v) for k, v in load_package_queries(_PKG).items()}


def query(text: str) -> LiteralString:
    """SQL text of this package's .sql files (never user text) as psycopg's query type
    (mypy treats LiteralString as str; the annotation documents the promise)."""
    return text


@dataclass(eq=False)
class DbTime:
    """How the store reads the database's clock, with two hooks for tests.

    ``offset`` is added to the server's ``now()`` in every SQL expression of "now";
    ``frozen_at``, when set, replaces ``now()`` (the contract suite freezes the clock
    at the server's own time, then moves it with ``offset`` like a FakeClock). Stores
    opened on one schema by one test share one instance. Both stay unset in production.
    """

    offset: timedelta = timedelta(0)
    frozen_at: datetime | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def advance(self, delta: timedelta) -> None:
        with self._lock:
            self.offset += delta

    def params(self) -> dict[str, Any]:
        return {"_pin": self.frozen_at, "_off": self.offset}


class Result(Protocol):
    """What a unit of work reads of an executed statement (a psycopg cursor is one).
    ``fetchall`` raises psycopg's ProgrammingError for a statement that returns no rows."""

    @property
    def rowcount(self) -> int: ...

    def fetchall(self) -> list[DictRow]: ...


class PgTx:
    """A unit of work on one pooled connection (see Database.write/read); a caller's
    connection overrides ``execute`` (store/postgres/caller.py)."""

    __slots__ = ("conn", "db")

    def __init__(self, conn: Conn, db: Database) -> None:
        self.conn = conn
        self.db = db

    def execute(self, text: str, params: Mapping[str, Any] | None = None) -> Result:
        """One statement of this package's SQL (never user text); the time hooks added
        to ``params`` (see DbTime)."""
        return self.conn.execute(query(text), self.db.params(params))

    def all(self, name: str, params: Mapping[str, Any] | None = None) -> list[DictRow]:
        cur = self.execute(fixed_limit(self.db.q[name], params), params)
        try:
            return cur.fetchall()
        except psycopg.ProgrammingError:  # the statement returned no row set
            return []

    def one(self, name: str, params: Mapping[str, Any] | None = None) -> DictRow | None:
        rows = self.all(name, params)
        return rows[0] if rows else None

    def run(self, name: str, params: Mapping[str, Any] | None = None) -> int:
        return self.execute(fixed_limit(self.db.q[name], params), params).rowcount

    def filtered(
        self, name: str, where: str, params: Mapping[str, Any] | None = None
    ) -> list[DictRow]:
        text = fixed_limit(self.db.q[name].replace(_WHERE, where), params)
        return self.execute(text, params).fetchall()

    def script(self, text: str) -> None:
        self.unbounded()  # a migration may legitimately take long (no parameters)
        self.conn.execute(query(text))

    def unbounded(self) -> None:
        self.db.stalls.unwatch(self.conn)

    def copy_rows(self, text: str, rows: Iterable[Sequence[Any]]) -> None:
        """``COPY ... FROM STDIN`` (this package's SQL) of ``rows``, each in the
        statement's column order."""
        with self.conn.cursor() as cur, cur.copy(query(text)) as copy:
            for row in rows:
                copy.write_row(row)

    def wake_workers(self) -> None:
        self.run("notify_work")  # NOTIFY is delivered at commit, and not on rollback


class Database:
    """The PostgreSQL dialect of the store core: a pool of autocommit connections;
    ``run`` executes one unit of work with the retry rules below."""

    #: each unit of work runs on a connection of its own (not in a caller's transaction):
    #: an error of one autocommitted statement ends that statement alone
    own_units = True

    def __init__(
        self,
        url: str,
        *,
        schema: str | None,
        pool_size: int,
        timeout_s: float,
        time: DbTime,
    ) -> None:
        self.time = time
        self.q = load_sql()
        self.url = parse_url(url)
        self.pooled = self.url.pooler == "transaction"
        if self.pooled and schema is not None:
            raise StoreError(
                "pooler=transaction cannot confine a store to a schema (search_path is "
                "session state); use the database's default search_path",
                field="schema",
            )
        self.conninfo = session_conninfo(self.url.libpq, schema, pooled=self.pooled)
        # each checkout's role and timeline (ha.py)
        self.primary = PrimaryCheck(pooled=self.pooled)
        # transactions rolled back by the server and retried here, by SQLSTATE class
        # (observability; tests assert that lock ordering keeps deadlocks at zero)
        self.retried: dict[str, int] = {"deadlock": 0, "serialization": 0}
        self._retried_lock = threading.Lock()
        self._timeout_s = timeout_s
        self._max_size = pool_size
        self.stalls = StallWatchdog(self.url.stall_timeout)
        self.claim_plans = ClaimPlans(self.q["warm_up"])  # a worker's (claims.py)
        self.pool = self._pool(self.conninfo, pool_size, timeout_s, "cronwheel", warm=True)
        self.replica_pool: ConnectionPool[Conn] | None = None
        if self.url.replica_hosts is not None:
            replicas = with_hosts(
                self.conninfo, self.url.replica_hosts, "replica_hosts", "prefer-standby"
            )
            self.replica_pool = self._pool(replicas, pool_size, timeout_s, "cronwheel-replica")

    @property
    def timeline(self) -> int:
        """The highest PostgreSQL timeline this process has seen on a primary."""
        return self.primary.timeline

    @timeline.setter
    def timeline(self, value: int) -> None:  # tests: as after a failover
        self.primary.timeline = value

    @property
    def pool_size(self) -> int:
        return self._max_size

    @property
    def timeout_s(self) -> float:
        return self._timeout_s

    def pool_options(self, size: int, timeout_s: float, name: str) -> dict[str, Any]:
        """The pools' options (this one's, and the async reads' of aio.py)."""
        kwargs: dict[str, Any] = {"autocommit": True, "row_factory": dict_row}
        if self.pooled:
            kwargs["prepare_threshold"] = None  # a pooled server connection is not ours
        return {
            "kwargs": kwargs,
            "min_size": 1,
            "max_size": size,
            # no `check=`: psycopg_pool sleeps 1 s, 2 s, 4 s ... between failed checks,
            # which after a server restart stalls a leader past its lease. _checkout
            # checks each connection itself and retries at once instead.
            "timeout": timeout_s,
            # a failed connection attempt given up at once: the next caller starts a fresh one
            # (the pool is back with the server; the default backs off up to 5 minutes)
            "reconnect_timeout": 0,
            "name": name,
            "open": False,
        }

    def _pool(
        self, conninfo: str, size: int, timeout_s: float, name: str, *, warm: bool = False
    ) -> ConnectionPool[Conn]:
        options = self.pool_options(size, timeout_s, name)
        plans = self.claim_plans.configure if warm and not self.pooled else None  # pooler: not ours
        options["configure"] = jsonload.configure(plans)  # orjson's JSON (jsonload.py)
        pool: ConnectionPool[Conn] = ConnectionPool(conninfo, connection_class=Conn, **options)
        pool.open(wait=False)
        return pool

    def close(self) -> None:
        self.stalls.close()
        self.pool.close()
        if self.replica_pool is not None:
            self.replica_pool.close()

    @contextmanager
    def _checkout(self, *, replica: bool = False) -> Iterator[Conn]:
        """A pooled connection known to answer: one cheap round trip per checkout,
        unless it answered within ``TRUST_S`` (ha.py). A broken one (server
        restarted, session terminated) goes back to the pool, which discards it, and the
        next is tried at once — within the pool's size.

        On the primary pool that round trip also reads the server's role and timeline:
        a standby (a host demoted under a router or a plain URL) is closed and the next
        connection tried; a timeline below the highest seen is refused (ha.py)."""
        pool = self.replica_pool if replica and self.replica_pool is not None else self.pool
        for _ in range(self._max_size + 1):
            conn = self._getconn(pool)
            self.stalls.watch(conn)  # from the ping on: a frozen server stalls that too
            try:
                tl = self.primary.check(conn, primary=pool is self.pool)
            except psycopg.Error:
                self.stalls.unwatch(conn)
                pool.putconn(conn)
                continue
            except StoreError:
                self.stalls.unwatch(conn)
                conn.close()
                pool.putconn(conn)
                raise
            try:
                yield conn
                self.primary.answered(conn, tl)
            except psycopg.Error as exc:
                self.primary.failed(conn, exc)
                raise
            finally:
                self.stalls.unwatch(conn)
                pool.putconn(conn)
            return
        raise psycopg.OperationalError("no connection of the pool answers a primary's role")

    def _getconn(self, pool: ConnectionPool[Conn]) -> Conn:
        """A connection within the pool's timeout, asking in short slices: a client
        waiting on the pool gets no new connection attempt after one failed (during a
        failover no host is the primary for a few seconds), a new request makes one.
        So the pool reconnects within half a second of the new primary, not at the end
        of the timeout."""
        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                return pool.getconn(timeout=getconn_slice(deadline))
            except PoolTimeout:
                if time.monotonic() >= deadline:
                    raise

    def params(self, values: Mapping[str, Any] | None = None) -> dict[str, Any]:
        out = self.time.params()
        if values:
            out.update(values)
        return out

    def run(
        self,
        body: Callable[[Conn], T],
        *,
        write: bool,
        atomic: bool = True,
        durable: bool = True,
        replica: bool = False,
    ) -> T:
        """Run ``body`` on a pooled connection.

        ``write``: in one transaction (BEGIN ... COMMIT), unless ``atomic`` is False —
        for a body of a single statement, which autocommit makes atomic by itself.
        Reads (not ``write``) are retried on connection errors; writes only when their
        connection was lost before the COMMIT was sent (nothing was written).

        ``durable=False`` commits without waiting for the WAL flush
        (``synchronous_commit = off``: still atomic and ordered, but a crash of the
        *database server* may forget the last few hundred milliseconds of such commits).
        Used for heartbeats only: a forgotten renewal leaves the lease where the previous
        one put it, still valid for two thirds of its visibility timeout. Claims and
        completions stay durable — forgetting one would re-run a firing whose worker
        never failed (measured: a PostgreSQL `immediate` restart then produced duplicate
        executions), and the fsync was not what bounded their throughput anyway.
        """
        attempt = 0
        made: set[str] = set()  # days whose partition was missing, made here
        while True:
            attempt += 1
            # False until the unit's COMMIT (or its one autocommitted statement) is sent:
            # a write whose connection was lost before that wrote nothing and runs again
            sent = [not write]
            used: list[Conn] = []
            try:
                with self._checkout(replica=replica) as conn:
                    used.append(conn)
                    if write and not durable:
                        with conn.transaction():
                            conn.execute("SET LOCAL synchronous_commit TO off")
                            result = body(conn)
                            sent[0] = True
                        return result
                    if not (write and atomic):
                        sent[0] = True
                        return body(conn)
                    with conn.transaction():
                        result = body(conn)
                        sent[0] = True
                    return result
            except CronwheelError:
                raise
            except pgerrors.CheckViolation as exc:
                # a firing whose day has no partition yet (the leader creates them a few
                # days ahead): a catch-up of an old instant, a far one-shot, a moved
                # clock. The transaction was rolled back by the error: the day's
                # partition is created and the body run again.
                # (a bulk insert over many days finds them one at a time)
                at = missing_partition(exc)
                if at is None or at in made:
                    raise store_error(exc) from exc
                made.add(at)
                attempt -= 1
                self.add_partition(at)
            except (pgerrors.SerializationFailure, pgerrors.DeadlockDetected) as exc:
                kind = "deadlock" if isinstance(exc, pgerrors.DeadlockDetected) else "serialization"
                with self._retried_lock:
                    self.retried[kind] += 1
                if attempt > _TX_RETRIES:
                    raise StoreUnavailableError(
                        f"postgresql: {_first_line(exc)}", field="store"
                    ) from exc
                time.sleep(random.uniform(0.001, 0.005 * 2**attempt))  # jitter, not security
            except PoolTimeout as exc:
                raise pool_timeout(exc, self._timeout_s) from exc
            except psycopg.Error as exc:
                lost = bool(used) and used[-1].closed
                written = write and (sent[0] or not lost)
                time.sleep(retry_pause(exc, lost=lost, written=written, attempt=attempt))

    def add_partition(self, at: str) -> None:
        """The partition of firings holding the instant ``at`` (text as the server
        printed it), created if missing (store/postgres/partitions.py)."""
        with self._checkout() as conn:
            conn.execute("SELECT cronwheel_firings_partition(%(at)s::timestamptz)", {"at": at})

    # -- the Dialect of the store core ---------------------------------------------
    def write(self, body: Callable[[PgTx], T], *, atomic: bool = True, durable: bool = True) -> T:
        return self.run(
            lambda conn: body(PgTx(conn, self)), write=True, atomic=atomic, durable=durable
        )

    def read(self, body: Callable[[PgTx], T]) -> T:
        return self.run(lambda conn: body(PgTx(conn, self)), write=False)

    def read_replica(self, body: Callable[[PgTx], T]) -> T:
        """A read that may be served by a replica (``replica_hosts``), a little stale."""
        return self.run(lambda conn: body(PgTx(conn, self)), write=False, replica=True)

    def now(self) -> datetime:
        row = self.read(lambda tx: tx.one("now"))
        assert row is not None
        value: datetime = row["now"]
        return value.astimezone(UTC)

    def queries(self) -> Mapping[str, str]:
        return self.q

    def migrations(self) -> Mapping[str, str]:
        return load_queries(_PKG, "schema.sql")

    def instant(self, value: datetime) -> datetime:
        return value

    def duration(self, value: timedelta) -> timedelta:
        return value

    def id_list(self, ids: Sequence[int]) -> list[int]:
        return list(ids)

    def text_list(self, items: Sequence[str]) -> list[str]:
        return list(items)

    def param(self, name: str) -> str:
        return f"%({name})s"

    def in_list(self, column: str, param: str) -> str:
        return f"{column} = ANY (%({param})s)"

    def starts_with(self, column: str, param: str) -> str:
        # starts_with: '%' and '_' in a prefix are literal, never LIKE patterns
        return f"starts_with({column}, %({param})s)"


def getconn_slice(deadline: float) -> float:
    """The next wait for a pooled connection before ``deadline`` (monotonic): a short
    slice of it (Database._getconn)."""
    return max(0.01, min(_GETCONN_SLICE_S, deadline - time.monotonic()))


def pool_timeout(exc: PoolTimeout, timeout_s: float) -> StoreUnavailableError:
    return StoreUnavailableError(
        f"postgresql: no connection within {timeout_s:g}s ({_first_line(exc)})", field="store"
    )


def retry_pause(exc: psycopg.Error, *, lost: bool, written: bool, attempt: int) -> float:
    """After a driver error in a unit of work (connection lost, whatever the error says:
    an idle-in-transaction timeout is class 25; admin shutdown, statement or lock
    timeout, ...): the pause before it runs again, or cronwheel's error raised. ``lost``:
    its connection is closed; ``written``: a write that may have reached the server (its
    COMMIT, or its one autocommitted statement, was sent, or the connection still lives)."""
    if not (lost or isinstance(exc, psycopg.OperationalError)):
        raise store_error(exc) from exc  # e.g. InterfaceError: a bug
    if written or attempt > _READ_RETRIES:
        raise StoreUnavailableError(f"postgresql: {_first_line(exc)}", field="store") from exc
    return 0.05 * attempt


def store_error(exc: psycopg.Error) -> StoreError:
    """A driver error that is not retried, as cronwheel's: a transient one (connection
    lost, timeout, serialization failure, deadlock) is StoreUnavailableError."""
    # OperationalError covers SerializationFailure and DeadlockDetected (class 40)
    transient = isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
    kind = StoreUnavailableError if transient else StoreError
    return kind(f"postgresql: {_first_line(exc)}", field="store")


_NO_PARTITION = re.compile(r'no partition of relation "firings" found for row')
_PARTITION_KEY = re.compile(r"\(scheduled_for\) = \(([^)]*)\)")


def missing_partition(exc: psycopg.Error) -> str | None:
    """The instant of a firing that found no partition of firings, else None."""
    if not _NO_PARTITION.search(exc.diag.message_primary or ""):
        return None
    found = _PARTITION_KEY.search(exc.diag.message_detail or "")
    return found.group(1) if found else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
