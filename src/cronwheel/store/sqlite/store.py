"""SqliteStore: the embedded store (stdlib sqlite3, WAL).

Several processes on one host may share the file. The flows are the store core's
(store/core); this package holds what is SQLite's own: the connection and its writer
lock (db.py), the writes that create work (dispatch.py), the worker's side
(claims.py), and the SQL of each (core.sql, dispatch.sql, claims.sql, schema.sql).
Wake-ups are UDP datagrams to the workers' registered addresses (wakeup.Doorbell).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import TYPE_CHECKING

from cronwheel.domain.clock import Clock, SystemClock
from cronwheel.store.sqlite.claims import SqliteClaims
from cronwheel.store.sqlite.db import SqliteDb
from cronwheel.store.sqlite.dispatch import SqliteDispatch
from cronwheel.wakeup import UdpWakeup, Wakeup

if TYPE_CHECKING:
    from cronwheel.store.protocol import ApiStore


class SqliteStore(SqliteDispatch, SqliteClaims):
    """The Store on one SQLite file (see the module docstring)."""

    def __init__(self, path: str, *, clock: Clock | None = None, busy_timeout_ms: int = 5000):
        self.path = path
        self.db = SqliteDb(
            path,
            clock=clock or SystemClock(),
            busy_timeout_ms=busy_timeout_ms,
            wake_addresses=self._worker_wake_addresses,
        )

    def close(self) -> None:
        self.db.close()

    def write_group(self) -> AbstractContextManager[None]:
        """The writes this thread makes inside it in one transaction (SqliteDb.grouped:
        group commit, each write a savepoint of it); the API's WriteGroup uses it."""
        return self.db.grouped()

    def open_wakeup(self, callback: Callable[[], None]) -> Wakeup:
        return UdpWakeup(callback)

    def _worker_wake_addresses(self) -> list[str]:
        return [
            n.wake_addr
            for n in self.list_nodes(alive_within=timedelta(seconds=30))
            if n.kind == "worker" and n.wake_addr
        ]


if TYPE_CHECKING:  # SqliteStore keeps the ApiStore protocol (checked by mypy)

    def _conforms(store: SqliteStore) -> ApiStore:
        return store
