"""Plumbing of PostgresStore: the connection pool, transactions with retries, error
mapping at the edge, and the store's clock expression.

Error mapping (the only place psycopg exceptions are turned into cronwheel's):

- serialization failure / deadlock (SQLSTATE 40001 / 40P01): the transaction was
  rolled back by the server, so it is retried here, a few times with jitter;
- a lost or refused connection, an admin shutdown, a pool timeout, a query or lock
  timeout: :class:`StoreUnavailableError` — after a small bounded retry for reads;
  a write is not retried because a connection lost during COMMIT leaves its outcome
  unknown (every write is a compare-and-swap, so the caller's retry is safe);
- any other driver error: :class:`StoreError` (a bug or a schema mismatch).

Domain errors raised by the transaction body (ConflictError, LeaseLostError, ...)
pass through untouched and roll the transaction back.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, LiteralString, Protocol, TypeVar

import psycopg
from psycopg import errors as pgerrors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from cronwheel.errors import CronwheelError, StoreError, StoreUnavailableError
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
_READ_RETRIES = 2  # connection errors on reads


def load_sql() -> dict[str, str]:
    """The named blocks of this package's query files, with ``:now`` expanded."""
    return {k: _NOW.sub(NOW_SQL, v) for k, v in load_package_queries(_PKG).items()}


def query(text: str) -> LiteralString:
    """SQL text of this package's .sql files (never user text) as psycopg's query type.

    (mypy treats LiteralString as str; the annotation documents the promise.)
    """
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
    """What a unit of work reads of an executed statement (a psycopg cursor is one)."""

    @property
    def description(self) -> Any: ...

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
        cur = self.execute(self.db.q[name], params)
        return cur.fetchall() if cur.description is not None else []

    def one(self, name: str, params: Mapping[str, Any] | None = None) -> DictRow | None:
        rows = self.all(name, params)
        return rows[0] if rows else None

    def run(self, name: str, params: Mapping[str, Any] | None = None) -> int:
        return self.execute(self.db.q[name], params).rowcount

    def filtered(
        self, name: str, where: str, params: Mapping[str, Any] | None = None
    ) -> list[DictRow]:
        return self.execute(self.db.q[name].replace(_WHERE, where), params).fetchall()

    def script(self, text: str) -> None:
        self.conn.execute(query(text))  # no parameters: many statements

    def wake_workers(self) -> None:
        self.run("notify_work")  # NOTIFY is delivered at commit, and not on rollback


class Database:
    """The PostgreSQL dialect of the store core: a pool of autocommit connections;
    ``run`` executes one unit of work with the retry rules below."""

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
        self.conninfo = _conninfo(url, schema)
        # transactions rolled back by the server and retried here, by SQLSTATE class
        # (observability; tests assert that lock ordering keeps deadlocks at zero)
        self.retried: dict[str, int] = {"deadlock": 0, "serialization": 0}
        self._retried_lock = threading.Lock()
        self._timeout_s = timeout_s
        self._max_size = pool_size
        self.pool: ConnectionPool[Conn] = ConnectionPool(
            self.conninfo,
            connection_class=Conn,
            kwargs={"autocommit": True, "row_factory": dict_row},
            min_size=1,
            max_size=pool_size,
            # no `check=`: psycopg_pool sleeps 1 s, 2 s, 4 s ... between failed checks,
            # which after a server restart stalls a leader past its lease. _checkout
            # checks each connection itself and retries at once instead.
            timeout=timeout_s,
            # give a failed connection attempt up at once: the next caller starts a
            # fresh one, so the pool is back the moment the server is (the default
            # backs off for up to 5 minutes); callers see StoreUnavailableError meanwhile
            reconnect_timeout=0,
            name="cronwheel",
            open=False,
        )
        self.pool.open(wait=False)

    def close(self) -> None:
        self.pool.close()

    @contextmanager
    def _checkout(self) -> Iterator[Conn]:
        """A pooled connection known to answer: one cheap round trip per checkout. A
        broken one (server restarted, session terminated) goes back to the pool, which
        discards it, and the next is tried at once — within the pool's size."""
        for _ in range(self._max_size + 1):
            conn = self.pool.getconn(timeout=self._timeout_s)
            try:
                conn.execute("")
            except psycopg.Error:
                self.pool.putconn(conn)
                continue
            try:
                yield conn
            finally:
                self.pool.putconn(conn)
            return
        raise psycopg.OperationalError("no connection of the pool answers")

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
    ) -> T:
        """Run ``body`` on a pooled connection.

        ``write``: in one transaction (BEGIN ... COMMIT), unless ``atomic`` is False —
        for a body of a single statement, which autocommit makes atomic by itself.
        Reads (not ``write``) are retried on connection errors; writes are not.

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
            try:
                with self._checkout() as conn:
                    if write and not durable:
                        with conn.transaction():
                            conn.execute("SET LOCAL synchronous_commit TO off")
                            return body(conn)
                    if not (write and atomic):
                        return body(conn)
                    with conn.transaction():
                        return body(conn)
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
                raise StoreUnavailableError(
                    f"postgresql: no connection within {self._timeout_s:g}s ({_first_line(exc)})",
                    field="store",
                ) from exc
            except psycopg.OperationalError as exc:
                # connection lost, admin shutdown, statement/lock timeout, ...
                if write or attempt > _READ_RETRIES:
                    raise StoreUnavailableError(
                        f"postgresql: {_first_line(exc)}", field="store"
                    ) from exc
                time.sleep(0.05 * attempt)
            except psycopg.Error as exc:  # InterfaceError: e.g. a connection closed under us
                raise store_error(exc) from exc

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


def _conninfo(url: str, schema: str | None) -> str:
    """The URL's parameters, plus UTC session time zone and the schema's search_path."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise StoreError(f"bad PostgreSQL URL: {exc}", field="store") from exc
    options = [str(params.pop("options", "") or "").strip(), "-c TimeZone=UTC"]
    if schema is not None:
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", schema):
            raise StoreError(f"bad schema name {schema!r}", field="schema")
        options.append(f"-c search_path={schema}")
    params["options"] = " ".join(o for o in options if o)
    # one name per process, so an operator can tell sessions apart in pg_stat_activity
    params.setdefault("application_name", f"cronwheel:{os.getpid()}")
    params.setdefault("connect_timeout", 5)
    return make_conninfo("", **params)
