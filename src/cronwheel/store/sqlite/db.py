"""SqliteDb: the SQLite dialect of the store core (connection, transactions, retries).

Every write runs in ``BEGIN IMMEDIATE`` — SQLite's single writer lock — so a unit of
work is atomic across the processes sharing the file. The processes first take turns at
that lock (turn.py: a waiting writer is woken when the lock is let go, not after a busy
sleep). A turn not granted within ``turn_timeout_s``, or ``database is locked`` held by
another program past the busy timeout and bounded retries with backoff, surfaces as
StoreUnavailableError, never as lost work. SQLite has no server clock: the store's
clock is the Clock it is given, read once per unit of work (``:now`` in the SQL).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar

from cronwheel.domain.clock import Clock
from cronwheel.errors import StoreError, StoreUnavailableError
from cronwheel.store.codec import duration_us, to_us
from cronwheel.store.sql import load_package_queries, load_queries
from cronwheel.store.sqlite.turn import TurnTimeoutError, WriterTurn
from cronwheel.wakeup import Doorbell

T = TypeVar("T")

_PKG = "cronwheel.store.sqlite"
_LOCK_RETRY_S = 30.0
_WHERE = "/*where*/"


def _locked(exc: sqlite3.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


class SqliteTx:
    """A unit of work on the store's connection; ``:now`` is its clock reading."""

    __slots__ = ("conn", "now_us", "queries", "ring")

    def __init__(self, conn: sqlite3.Connection, queries: Mapping[str, str], now_us: int):
        self.conn = conn
        self.queries = queries
        self.now_us = now_us
        self.ring = False

    def _params(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        return {"now": self.now_us} if params is None else {"now": self.now_us, **params}

    def all(self, name: str, params: Mapping[str, Any] | None = None) -> list[sqlite3.Row]:
        return self.conn.execute(self.queries[name], self._params(params)).fetchall()

    def one(self, name: str, params: Mapping[str, Any] | None = None) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.conn.execute(
            self.queries[name], self._params(params)
        ).fetchone()
        return row

    def run(self, name: str, params: Mapping[str, Any] | None = None) -> int:
        return self.conn.execute(self.queries[name], self._params(params)).rowcount

    def many(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self.conn.executemany(self.queries[name], [self._params(r) for r in rows])

    def filtered(
        self, name: str, where: str, params: Mapping[str, Any] | None = None
    ) -> list[sqlite3.Row]:
        text = self.queries[name].replace(_WHERE, where)
        return self.conn.execute(text, self._params(params)).fetchall()

    def script(self, text: str) -> None:
        for statement in _statements(text):
            self.conn.execute(statement)

    def unbounded(self) -> None:
        pass  # no stall watchdog: a busy database is waited for within busy_timeout

    def wake_workers(self) -> None:
        self.ring = True  # rung after the commit (see SqliteDb.write)


class SqliteDb:
    """One connection per store object, shared by its threads under a lock."""

    def __init__(
        self,
        path: str,
        *,
        clock: Clock,
        busy_timeout_ms: int,
        wake_addresses: Callable[[], list[str]],
        turn_timeout_s: float = _LOCK_RETRY_S,
    ) -> None:
        self.path = path
        self.clock = clock
        self._q = load_package_queries(_PKG)
        self._lock = threading.RLock()
        if path != ":memory:":
            parent = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(parent):
                raise StoreError(f"directory {parent!r} does not exist", field="store")
        try:
            self.conn = sqlite3.connect(
                path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000
            )
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"cannot open {path!r}: {exc}", field="store") from exc
        self.conn.row_factory = sqlite3.Row
        with self._retrying():
            # before anything is written: a new file frees pages incrementally (pruning
            # returns them to the file system); on an existing file this changes nothing
            self.conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
            self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("PRAGMA foreign_keys=ON")
        self.conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        self._checkpoints: sqlite3.Connection | None = None  # checkpoint()'s, when first used
        self._checkpoint_lock = threading.Lock()
        self.doorbell = Doorbell(wake_addresses)
        # the processes' turn at the writer lock, waited for in the kernel (turn.py)
        self.turn = WriterTurn(path) if path != ":memory:" else None
        self.turn_timeout_s = turn_timeout_s
        self._group: tuple[int, SqliteTx] | None = None  # grouped(): its thread, its tx

    def close(self) -> None:
        self.doorbell.close()
        with self._checkpoint_lock:
            if self._checkpoints is not None:
                self._checkpoints.close()
        with self._lock:
            self.conn.close()
            if self.turn is not None:
                self.turn.close()

    def checkpoint(self) -> None:
        """Copy the write-ahead log's committed pages into the database file: a PASSIVE
        checkpoint, which no writer or reader waits for, on a connection of its own (not
        the writers'). The leader runs it about once a second (DispatchPort.upkeep), so
        that at a light load the commits of claims and starts do not: the commit that
        takes the log past SQLite's 1,000 pages runs one before it returns, 5-9 ms (every
        3 s or so at the peers' W3: docs/benchmarks.md). That threshold stays: with
        10,000, a process with no leader (the API's) ran checkpoints ten times as long,
        and its create p99 went from 9 to 30 ms."""
        if self.path == ":memory:":
            return
        with self._checkpoint_lock:
            if self._checkpoints is None:
                self._checkpoints = sqlite3.connect(
                    self.path, isolation_level=None, check_same_thread=False
                )
            try:
                self._checkpoints.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            except sqlite3.OperationalError:
                return  # busy (a checkpoint in progress): its pages wait for the next
            except sqlite3.Error as exc:
                raise StoreUnavailableError(f"sqlite checkpoint: {exc}") from exc

    # -- units of work --------------------------------------------------------------
    @contextmanager
    def _retrying(self) -> Iterator[None]:
        deadline = time.monotonic() + _LOCK_RETRY_S
        delay = 0.005
        while True:
            try:
                yield
                return
            except sqlite3.OperationalError as exc:
                if not _locked(exc) or time.monotonic() > deadline:
                    raise StoreUnavailableError(f"sqlite: {exc}") from exc
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    @contextmanager
    def transaction(self) -> Iterator[SqliteTx]:
        """One write transaction under SQLite's writer lock (BEGIN IMMEDIATE); the
        workers are woken after it commits if it asked to. Inside :meth:`grouped` on
        the group's thread, a savepoint of the group's transaction instead."""
        outer = self._group_tx()
        if outer is not None:
            with self._savepoint(outer) as tx:
                yield tx
            return
        conn = self.conn
        with self._lock, self._writer_turn():
            deadline = time.monotonic() + _LOCK_RETRY_S
            delay = 0.005
            while True:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    break
                except sqlite3.OperationalError as exc:
                    if not _locked(exc) or time.monotonic() > deadline:
                        raise StoreUnavailableError(f"sqlite: {exc}") from exc
                except sqlite3.Error as exc:  # e.g. a closed connection
                    raise StoreError(f"sqlite: {exc}", field="store") from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.25)
            tx = SqliteTx(conn, self._q, to_us(self.clock.now()))
            try:
                yield tx
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            if not conn.in_transaction:  # SQLite undid it (a savepoint's failure in a group)
                raise StoreUnavailableError("sqlite: the transaction was rolled back")
            try:
                conn.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                conn.execute("ROLLBACK")
                raise StoreUnavailableError(f"sqlite commit: {exc}") from exc
        if tx.ring:
            self.doorbell.ring()

    @contextmanager
    def grouped(self) -> Iterator[None]:
        """Group commit: the writes this thread makes inside it share one transaction,
        each one a savepoint of it (atomic on its own: one that raises leaves nothing,
        the others stay), committed when it ends; the workers are woken after that
        commit if any write asked to. A commit that fails undoes them all and raises.

        Writes made together cost one commit, and the pages they share (an index's
        leaf, the jobs version, a quota's row) are written to the WAL once, and so
        checkpointed once: the commit and its checkpoint's fsync were most of what a
        small write cost. Reads made inside see the group's earlier writes, as they
        would once committed. Other threads wait for the group as for any write."""
        if self._group_tx() is not None:
            yield  # already inside one: its writes join it
            return
        with self.transaction() as tx:
            self._group = (threading.get_ident(), tx)
            try:
                yield
            finally:
                self._group = None

    def _group_tx(self) -> SqliteTx | None:
        """The transaction of the group this thread is inside (:meth:`grouped`), if any."""
        group = self._group
        return group[1] if group is not None and group[0] == threading.get_ident() else None

    @contextmanager
    def _savepoint(self, outer: SqliteTx) -> Iterator[SqliteTx]:
        conn = self.conn
        if not conn.in_transaction:  # SQLite undid the group's transaction (disk full...)
            raise StoreUnavailableError("sqlite: the group's transaction was rolled back")
        conn.execute("SAVEPOINT cw_write")
        tx = SqliteTx(conn, self._q, to_us(self.clock.now()))
        try:
            yield tx
        except BaseException:
            if conn.in_transaction:  # else SQLite undid the whole transaction itself
                conn.execute("ROLLBACK TO cw_write")
                conn.execute("RELEASE cw_write")
            raise
        conn.execute("RELEASE cw_write")
        outer.ring = outer.ring or tx.ring

    @contextmanager
    def _writer_turn(self) -> Iterator[None]:
        if self.turn is None:
            yield
            return
        try:
            with self.turn.taken(self.turn_timeout_s):
                yield
        except TurnTimeoutError as exc:  # raised only before the turn is held
            raise StoreUnavailableError(f"sqlite: {exc}", field="store") from exc

    def write(self, body: Callable[[SqliteTx], T], *, atomic: bool = True) -> T:
        with self.transaction() as tx:
            return body(tx)

    def read_replica(self, body: Callable[[SqliteTx], T]) -> T:
        """One file, no replicas: a plain read."""
        return self.read(body)

    def read(self, body: Callable[[SqliteTx], T]) -> T:
        """Reads in autocommit mode (each statement its own snapshot), under the
        connection's lock; a locked database raises StoreUnavailableError."""
        with self._lock:
            try:
                return body(SqliteTx(self.conn, self._q, to_us(self.clock.now())))
            except sqlite3.OperationalError as exc:
                if _locked(exc):
                    raise StoreUnavailableError(f"sqlite: {exc}") from exc
                raise StoreError(f"sqlite: {exc}", field="store") from exc
            except sqlite3.ProgrammingError as exc:  # e.g. a closed connection
                raise StoreError(f"sqlite: {exc}", field="store") from exc

    def now(self) -> datetime:
        return self.clock.now()

    def queries(self) -> Mapping[str, str]:
        return self._q

    def migrations(self) -> Mapping[str, str]:
        return load_queries(_PKG, "schema.sql")

    # -- values and fragments ---------------------------------------------------------
    def instant(self, value: datetime) -> int:
        return to_us(value)

    def duration(self, value: timedelta) -> int:
        return duration_us(value)

    def id_list(self, ids: Sequence[int]) -> str:
        return json.dumps(list(ids))

    def text_list(self, items: Sequence[str]) -> str:
        return json.dumps(list(items))

    def param(self, name: str) -> str:
        return f":{name}"

    def in_list(self, column: str, param: str) -> str:
        return f"{column} IN (SELECT value FROM json_each(:{param}))"

    def starts_with(self, column: str, param: str) -> str:
        # substr comparison: '%' and '_' in a prefix are literal, never LIKE patterns
        return f"substr({column}, 1, length(:{param})) = :{param}"


def _statements(script: str) -> list[str]:
    """Split a script into statements (sqlite3.complete_statement knows about quotes)."""
    out: list[str] = []
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                out.append(buf.strip())
            buf = ""
    if buf.strip() and not all(
        ln.strip().startswith("--") or not ln.strip() for ln in buf.splitlines()
    ):
        raise StoreError(f"incomplete statement in schema: {buf[:80]!r}")
    return out
