"""PostgresStore: the Store for more than one host (psycopg 3, psycopg_pool).

The flows are the store core's (store/core); this package holds what is PostgreSQL's
own: the pool, transactions and retries (db.py), the writes that create work
(dispatch.py), the worker's side (claims.py), LISTEN wake-ups (listen.py), and the SQL
of each (core.sql, dispatch.sql, claims.sql, schema.sql). Time is the database's:
every lease, claim and expiry comparison uses the server's ``now()`` in SQL (``:now``
in the .sql files), never a node's clock; the ``clock`` argument exists only for
signature compatibility with SqliteStore and is ignored.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from cronwheel.domain.clock import Clock
from cronwheel.domain.retention import PruneReport
from cronwheel.errors import StoreError
from cronwheel.store.core.retention import WALK_START
from cronwheel.store.postgres.aio import PgAsyncCalls
from cronwheel.store.postgres.caller import CallerDatabase, Link
from cronwheel.store.postgres.claims import PgClaims
from cronwheel.store.postgres.db import Database, DbTime
from cronwheel.store.postgres.dispatch import PgDispatch
from cronwheel.store.postgres.ha import with_hosts
from cronwheel.store.postgres.jobs_quota import PgJobsQuota
from cronwheel.store.postgres.listen import PgListenWakeup, PollOnly
from cronwheel.store.postgres.partitions import PgPartitions
from cronwheel.wakeup import Wakeup

if TYPE_CHECKING:
    from cronwheel.store.protocol import ApiStore


class PostgresStore(PgJobsQuota, PgDispatch, PgClaims, PgPartitions):
    """The Store on a PostgreSQL database (see the module docstring).

    ``schema`` confines the store to one schema (``search_path``); ``db_time`` lets
    tests share a frozen/offset clock between stores (production leaves it unset).
    """

    def __init__(
        self,
        url: str,
        *,
        clock: Clock | None = None,  # ignored: leases are judged by now() in SQL
        schema: str | None = None,
        pool_size: int = 8,
        timeout_s: float = 5.0,
        db_time: DbTime | None = None,
    ) -> None:
        self.url = url
        self.schema = schema
        self.db_time = db_time or DbTime()
        self.db = Database(
            url, schema=schema, pool_size=pool_size, timeout_s=timeout_s, time=self.db_time
        )
        self._planned_tasks = set()
        self._identity: tuple[str, str] | None = None  # see on_link

    def on_link(self, link: Link) -> PostgresStore:
        """This store writing in the caller's transaction on ``link`` (transactional
        enqueue, store/postgres/caller.py); the pool stays this store's."""
        if self._identity is None:
            # what a caller's connection needs to reach this store: the search path of
            # the store's sessions (its schema) and its id_key secret, read once
            settings, row = self.db.read(lambda tx: (tx.one("caller_settings"), tx.one("id_key")))
            if settings is None or row is None:
                raise StoreError("the store has no id key: run 'cronwheel migrate'", field="store")
            self._identity = (str(settings["search_path"]), str(row["value"]))
        search_path, key = self._identity
        view = copy.copy(self)
        view.db = CallerDatabase(self.db, link, search_path=search_path, key=key)
        return view

    def migrate(self) -> int:
        """The pending migrations; on a database at version 15, the online part of the
        partitioning of firings first (PgPartitions.prepare_partitioning)."""
        self.prepare_partitioning()
        return super().migrate()

    def prune_history(
        self,
        *,
        dry_run: bool = False,
        namespace: str | None = None,
        batch: int | None = None,
        max_batches: int | None = None,
        cursor: tuple[datetime, int] | None = None,
    ) -> PruneReport:
        """The batched pass of the store core, preceded (a pass of every namespace, for
        real) by the partition work: today's and tomorrow's made, then whole days whose
        firings may all go dropped (store/postgres/partitions.py), a step per batch when
        ``max_batches`` is given (the leader's pace); the walk leaves to those drops what
        they will take. A dry run counts what the walk would delete: the same firings."""
        if cursor is None:  # a pass starts: its bounds, for the walk's _leave_to_drop
            self.retention_bounds(self.list_retention())
        whole = namespace is None and not dry_run
        if cursor is None and whole:
            self.maintain_partitions()
            self._prune_counters(self.db.now())
            self.start_drops()
            cursor = WALK_START
        first = PruneReport(dry_run=dry_run)
        while whole and self.drops_pending():
            one = self.drop_step()
            if one is None:
                break
            if max_batches is not None:
                one.cursor = cursor
                return one
            first.add(one)
        report = super().prune_history(
            dry_run=dry_run,
            namespace=namespace,
            batch=batch,
            max_batches=max_batches,
            cursor=cursor,
        )
        first.add(report)
        return first

    @property
    def time_offset(self) -> timedelta:
        """Test-only: added to the server's clock in every "now" (0 in production)."""
        return self.db_time.offset

    @time_offset.setter
    def time_offset(self, value: timedelta) -> None:
        self.db_time.offset = value

    def close(self) -> None:
        self.db.close()

    def async_calls(self) -> PgAsyncCalls:
        """The API's hottest read awaited on its event loop (store/postgres/aio.py)."""
        return PgAsyncCalls(self.db)

    def open_wakeup(self, callback: Callable[[], None]) -> Wakeup:
        """LISTEN on a connection of its own. Through a transaction pooler (where LISTEN
        would hold a server connection's session) only on ``listen_hosts``, the direct
        hosts of the URL; without them the worker polls (its poll interval)."""
        url = self.db.url
        if url.listen_hosts is not None:
            direct = with_hosts(self.db.conninfo, url.listen_hosts, "listen_hosts", "read-write")
            return PgListenWakeup(direct, callback)
        if self.db.pooled:
            return PollOnly()
        return PgListenWakeup(self.db.conninfo, callback)


if TYPE_CHECKING:  # PostgresStore keeps the ApiStore protocol (checked by mypy)

    def _conforms(store: PostgresStore) -> ApiStore:
        return store
