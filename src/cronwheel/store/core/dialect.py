"""The seam between the store's flows and an engine: units of work and named queries.

A flow in :mod:`cronwheel.store.core.flows` never builds SQL for an engine: it names
a query (one block of the engine's ``.sql`` files; both engines define every name the
flows use, checked by ``tests/contract/test_store_layout.py``) and hands it parameters
encoded by the dialect (instants, durations, lists). The few filters assembled at run
time (:mod:`cronwheel.store.core.filters`) are made of the dialect's fragments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from cronwheel.store.codec import Row

T = TypeVar("T")
Params = Mapping[str, Any]


class Tx(Protocol):
    """One unit of work's connection. Query names are blocks of the engine's .sql files;
    the store's clock (``:now`` in the SQL) is one instant for the whole unit."""

    def all(self, name: str, params: Params | None = None) -> Sequence[Row]:
        """The rows of a named query."""
        ...

    def one(self, name: str, params: Params | None = None) -> Row | None:
        """The first row of a named query, or None."""
        ...

    def run(self, name: str, params: Params | None = None) -> int:
        """Execute a named statement; the number of rows it changed."""
        ...

    def filtered(self, name: str, where: str, params: Params | None = None) -> Sequence[Row]:
        """The rows of a named query whose ``/*where*/`` is replaced by ``where``, a
        clause core/filters assembled from this dialect's fragments (never user text)."""
        ...

    def script(self, text: str) -> None:
        """Execute a migration script (many statements, no parameters)."""
        ...

    def unbounded(self) -> None:
        """What follows in this unit may legitimately take long (a migration, or the wait
        for another process's): no stall bound applies to it."""
        ...

    def wake_workers(self) -> None:
        """Tell the workers new work is queued, when (and only if) this unit commits."""
        ...


class Dialect(Protocol):
    """What CoreStore needs of an engine."""

    def write(self, body: Callable[[Tx], T], *, atomic: bool = True) -> T:
        """Run ``body`` as one write transaction, with the engine's retry rules.
        ``atomic=False`` is allowed for a body of one statement (autocommit)."""
        ...

    def read(self, body: Callable[[Tx], T]) -> T:
        """Run a read-only ``body``; transient errors are retried, then raise
        StoreUnavailableError."""
        ...

    def read_replica(self, body: Callable[[Tx], T]) -> T:
        """A read that may be served by a replica, so may be slightly stale: what the
        dashboard, status and listings show. Never a read a lease, claim or enqueue
        decision depends on (those use ``read`` or run inside ``write``)."""
        ...

    def now(self) -> datetime:
        """The store's clock."""
        ...

    def queries(self) -> Mapping[str, str]:
        """Every named query of the engine (for tests and EXPLAIN)."""
        ...

    def migrations(self) -> Mapping[str, str]:
        """``migration_<n>`` scripts of the engine's schema.sql."""
        ...

    # -- values, as the engine stores them ------------------------------------------
    def instant(self, value: datetime) -> Any: ...

    def duration(self, value: timedelta) -> Any: ...

    def id_list(self, ids: Sequence[int]) -> Any: ...

    def text_list(self, items: Sequence[str]) -> Any: ...

    # -- SQL fragments for filters assembled at run time -------------------------------
    def param(self, name: str) -> str:
        """The placeholder of a named parameter."""
        ...

    def in_list(self, column: str, param: str) -> str:
        """``column`` is one of the list parameter ``param`` (made by id_list/text_list)."""
        ...

    def starts_with(self, column: str, param: str) -> str:
        """``column`` starts with the text parameter ``param``, literally (no patterns)."""
        ...
