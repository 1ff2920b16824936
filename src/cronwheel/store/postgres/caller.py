"""Writes in the caller's own transaction (transactional enqueue).

``App.enqueue(..., connection=conn)`` and ``App.schedule(..., connection=conn)`` run
the store's usual flows (the same queries, states, quotas and ``pg_notify``) with the
caller's open connection as the unit of work instead of a pooled one:
:class:`CallerDatabase` is the store's dialect on that connection, and
``PostgresStore.on_link`` a view of the store that writes through it.

Each unit of work on the caller's connection:

1. reads the two session settings it changes (``caller_settings``). On a connection
   that is not in autocommit mode and has no transaction yet, this statement begins
   the implicit transaction the caller commits, as any statement of theirs would;
2. opens a savepoint (psycopg's ``transaction()``, which nests as a SAVEPOINT inside
   a transaction; on an idle autocommit connection it is a transaction of its own,
   committed before the call returns);
3. sets the store's ``search_path`` and ``TimeZone=UTC`` for the transaction only,
   checks that the connection reaches this store (its ``id_key`` secret), runs the
   flow, and puts the caller's settings back before the savepoint is released.

A cronwheel error (a quota, a bad name, a driver error) rolls back to the savepoint:
the caller's own writes and transaction stay usable. cronwheel never commits, rolls
back or changes the autocommit mode of the caller's connection. Statements are sent
with ``prepare=False`` (no server-side prepared statement is left in the session,
which also keeps them valid behind pgbouncer in transaction mode) through cursors of
cronwheel's own (psycopg's server-side binding, its own JSON loaders), so a
framework's cursor class or adapters (Django's, SQLAlchemy's) do not change them.

An ``AsyncConnection`` is driven from a worker thread: the flows are synchronous, and
each statement is handed to the connection's event loop (:class:`AsyncLink`), whose
coroutine (``App.enqueue_async``) waits for the thread meanwhile.

The bulk path (``schedule_many``/``enqueue_many``) COPYs on the caller's connection too
(``Link.copy``): an ``AsyncConnection``'s rows go to its loop ``COPY_CHUNK`` at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from itertools import islice
from typing import Any, Protocol, TypeVar

import psycopg
from psycopg import errors as pgerrors
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row
from psycopg.types.json import JsonbBinaryLoader, JsonBinaryLoader, JsonbLoader, JsonLoader

from cronwheel.errors import StoreError, ValidationError
from cronwheel.store.postgres.db import (
    Database,
    PgTx,
    Result,
    missing_partition,
    query,
    store_error,
)

T = TypeVar("T")
_FIELD = "connection"
COPY_CHUNK = 1000  # rows of a COPY per trip to an AsyncConnection's event loop


class Done:
    """A statement's outcome, read at once (its cursor is closed)."""

    __slots__ = ("rowcount", "rows")

    def __init__(self, rows: list[DictRow], rowcount: int) -> None:
        self.rows = rows
        self.rowcount = rowcount

    def fetchall(self) -> list[DictRow]:
        return self.rows


def _own_adapters(cur: psycopg.Cursor[DictRow] | psycopg.AsyncCursor[DictRow]) -> None:
    """psycopg's JSON loaders on this cursor only (a framework may load JSON as text)."""
    for name, loader, binary in (
        ("json", JsonLoader, JsonBinaryLoader),
        ("jsonb", JsonbLoader, JsonbBinaryLoader),
    ):
        cur.adapters.register_loader(name, loader)
        cur.adapters.register_loader(name, binary)


def _require_usable(closed: bool, status: TransactionStatus) -> None:
    if closed:
        raise ValidationError("the connection is closed", field=_FIELD)
    if status == TransactionStatus.INERROR:
        raise ValidationError(
            "the connection's transaction is aborted (an earlier statement failed): "
            "roll it back first",
            field=_FIELD,
        )
    if status == TransactionStatus.ACTIVE:
        raise ValidationError("the connection is busy with another statement", field=_FIELD)


class Link(Protocol):
    """The caller's connection, as a unit of work uses it."""

    def require_usable(self) -> None: ...

    def execute(self, text: str, params: Mapping[str, Any]) -> Result: ...

    def savepoint(self) -> AbstractContextManager[Any]: ...

    def copy(self, text: str, rows: Iterable[Sequence[Any]]) -> None: ...


class SyncLink:
    """A psycopg ``Connection`` (from SQLAlchemy or Django too), used in its thread."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def require_usable(self) -> None:
        _require_usable(self.conn.closed, self.conn.info.transaction_status)

    def execute(self, text: str, params: Mapping[str, Any]) -> Result:
        with psycopg.Cursor(self.conn, row_factory=dict_row) as cur:
            _own_adapters(cur)
            cur.execute(query(text), params, prepare=False)
            rows = cur.fetchall() if cur.description is not None else []
            return Done(rows, cur.rowcount)

    def savepoint(self) -> AbstractContextManager[Any]:
        return self.conn.transaction()

    def copy(self, text: str, rows: Iterable[Sequence[Any]]) -> None:
        with psycopg.Cursor(self.conn) as cur, cur.copy(query(text)) as copy:
            for row in rows:
                copy.write_row(row)


class AsyncLink:
    """A psycopg ``AsyncConnection`` of the event loop ``loop``, driven from a worker
    thread: each statement runs on the loop while the thread waits for it."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], loop: asyncio.AbstractEventLoop):
        self.conn = conn
        self.loop = loop

    def _wait(self, work: Coroutine[Any, Any, T]) -> T:
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            work.close()
            raise RuntimeError("an AsyncLink is driven from a worker thread, not its own loop")
        return asyncio.run_coroutine_threadsafe(work, self.loop).result()

    def require_usable(self) -> None:
        _require_usable(self.conn.closed, self.conn.info.transaction_status)

    def execute(self, text: str, params: Mapping[str, Any]) -> Result:
        return self._wait(self._execute(text, params))

    async def _execute(self, text: str, params: Mapping[str, Any]) -> Done:
        async with psycopg.AsyncCursor(self.conn, row_factory=dict_row) as cur:
            _own_adapters(cur)
            await cur.execute(query(text), params, prepare=False)
            rows = await cur.fetchall() if cur.description is not None else []
            return Done(rows, cur.rowcount)

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        block = self.conn.transaction()

        async def enter() -> None:
            await block.__aenter__()

        async def leave(exc: BaseException | None) -> None:
            if exc is None:
                await block.__aexit__(None, None, None)
            else:
                await block.__aexit__(type(exc), exc, exc.__traceback__)

        self._wait(enter())
        try:
            yield
        except BaseException as exc:
            self._wait(leave(exc))  # rolls back to the savepoint
            raise
        self._wait(leave(None))

    def copy(self, text: str, rows: Iterable[Sequence[Any]]) -> None:
        """COPY on the loop, the rows sent in chunks of COPY_CHUNK (one trip each): the
        loop serves its other tasks between two chunks."""
        cur = psycopg.AsyncCursor(self.conn)
        block = cur.copy(query(text))

        async def enter() -> psycopg.AsyncCopy:
            return await block.__aenter__()

        async def send(chunk: list[Sequence[Any]]) -> None:
            for row in chunk:
                await copy.write_row(row)

        async def leave(exc: BaseException | None) -> None:
            try:
                if exc is None:
                    await block.__aexit__(None, None, None)
                else:
                    await block.__aexit__(type(exc), exc, exc.__traceback__)
            finally:
                await cur.close()

        copy = self._wait(enter())
        rest = iter(rows)
        try:
            while chunk := list(islice(rest, COPY_CHUNK)):
                self._wait(send(chunk))
        except BaseException as exc:
            self._wait(leave(exc))
            raise
        self._wait(leave(None))


class CallerTx(PgTx):
    """A unit of work's statements on the caller's connection."""

    __slots__ = ("link",)

    def __init__(self, link: Link, db: Database) -> None:
        # PgTx.__init__ is not called: there is no pooled connection (``conn``)
        self.link = link
        self.db = db

    def execute(self, text: str, params: Mapping[str, Any] | None = None) -> Result:
        return self.link.execute(text, self.db.params(params))

    def script(self, text: str) -> None:
        raise StoreError("migrations never run on a caller's connection", field=_FIELD)

    def unbounded(self) -> None:
        pass  # the caller's connection: no watchdog of ours

    def copy_rows(self, text: str, rows: Iterable[Sequence[Any]]) -> None:
        self.link.copy(text, rows)


class CallerDatabase(Database):
    """The store's dialect (its queries, value encoders and time hooks) on the caller's
    connection: every unit of work, read or write, is a savepoint on it (module doc)."""

    own_units = False  # the caller's transaction: an error aborts its savepoint

    def __init__(self, db: Database, link: Link, *, search_path: str, key: str) -> None:
        # no pool of its own (Database.__init__ is not called): the connection is the caller's
        self.time = db.time
        self.q = db.q
        self.conninfo = db.conninfo
        self.url = db.url
        self.pooled = db.pooled
        self.retried = db.retried
        self._link = link
        self._search_path = search_path  # the store's sessions' (its schema)
        self._key = key  # the store's id_key: the same value means the same store

    def close(self) -> None:
        """Nothing to close: the connection is the caller's."""

    def write(self, body: Callable[[PgTx], T], *, atomic: bool = True, durable: bool = True) -> T:
        return self._unit(body)

    def read(self, body: Callable[[PgTx], T]) -> T:
        return self._unit(body)

    def read_replica(self, body: Callable[[PgTx], T]) -> T:
        return self._unit(body)  # the caller's transaction sees its own writes

    def _unit(self, body: Callable[[PgTx], T]) -> T:
        self._link.require_usable()
        tx = CallerTx(self._link, self)
        made: set[str] = set()
        while True:
            try:
                saved = tx.one("caller_settings")  # begins a non-autocommit caller's transaction
                assert saved is not None
                with self._link.savepoint():
                    tx.one("caller_enter", {"search_path": self._search_path})
                    self._require_same_store(tx)
                    result = body(tx)
                    tx.one("caller_restore", dict(saved))
                return result
            except psycopg.Error as exc:
                # a firing's day without a partition: the savepoint is rolled back, the
                # partition created on a connection of its own (not to hold the parent's
                # lock until the caller commits), the unit run again
                at = missing_partition(exc)
                if at is None or at in made:
                    raise store_error(exc) from exc
                made.add(at)
                self.add_partition(at)

    def add_partition(self, at: str) -> None:
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            conn.execute("SELECT cronwheel_firings_partition(%(at)s::timestamptz)", {"at": at})

    def _require_same_store(self, tx: CallerTx) -> None:
        try:
            row = tx.one("id_key")
        except pgerrors.UndefinedTable:
            row = None
        if row is None or row["value"] != self._key:
            info = self._link_info()
            raise ValidationError(
                f"the connection (database {info}) does not reach this App's store: "
                "connect to the store's database",
                field=_FIELD,
            )

    def _link_info(self) -> str:
        conn = getattr(self._link, "conn", None)
        info = getattr(conn, "info", None)
        return repr(getattr(info, "dbname", "?"))


def sync_connection(obj: Any) -> psycopg.Connection[Any]:
    """The psycopg connection behind ``obj``: a psycopg ``Connection``, a SQLAlchemy
    ``Session`` or ``Connection`` (dialect ``postgresql+psycopg``; the session's
    connection for its current transaction) or Django's ``django.db.connection``
    (the psycopg 3 backend). ValidationError naming ``connection`` otherwise."""
    raw = obj
    module = type(obj).__module__
    if module.startswith("sqlalchemy.ext.asyncio"):
        raise ValidationError(
            f"a SQLAlchemy {type(obj).__name__} is asynchronous: use enqueue_async / "
            "schedule_async",
            field=_FIELD,
        )
    if module.startswith("sqlalchemy.orm"):  # Session: its connection for this transaction
        raw = obj.connection().connection.driver_connection
    elif module.startswith("sqlalchemy.engine"):  # Connection
        raw = obj.connection.driver_connection
    elif module.startswith("django."):  # django.db.connection(s[alias]): a DatabaseWrapper
        obj.ensure_connection()
        raw = obj.connection
    if isinstance(raw, psycopg.AsyncConnection):
        raise ValidationError(
            "an AsyncConnection needs enqueue_async / schedule_async", field=_FIELD
        )
    if not isinstance(raw, psycopg.Connection):
        raise ValidationError(
            f"expected a psycopg 3 connection, a SQLAlchemy Session on postgresql+psycopg "
            f"or Django's connection on psycopg 3, got {type(raw).__name__}",
            field=_FIELD,
        )
    return raw


async def async_link(obj: Any) -> Link:
    """The link for ``obj`` inside a coroutine: a psycopg ``AsyncConnection`` or a
    SQLAlchemy ``AsyncSession``/``AsyncConnection`` (``postgresql+psycopg``), driven
    from a worker thread; anything :func:`sync_connection` accepts, used as is."""
    module = type(obj).__module__
    if module.startswith("sqlalchemy.ext.asyncio"):
        sa_conn = await obj.connection() if hasattr(obj, "sync_session") else obj
        obj = (await sa_conn.get_raw_connection()).driver_connection
    if isinstance(obj, psycopg.AsyncConnection):
        return AsyncLink(obj, asyncio.get_running_loop())
    return SyncLink(sync_connection(obj))
