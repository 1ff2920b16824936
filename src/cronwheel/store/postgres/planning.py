"""What PostgreSQL plans, and when: statements written so that the server plans them
once per connection, and a new connection's plans made before a firing needs them."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import suppress
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

_LIMIT = "LIMIT %(limit)s"


def fixed_limit(text: str, params: Mapping[str, Any] | None) -> str:
    """``text`` with its ``LIMIT %(limit)s`` written as the integer ``params`` give.

    A statement whose LIMIT is a parameter is planned again at every call: PostgreSQL
    costs its generic plan as if the limit were a tenth of the rows (for the firings:
    millions), so the custom plans, planned with the value, always look cheaper. Over
    a month of day partitions of firings that planning was most of a call (a page of
    the newest 50 firings: 3 ms of planning, 0.5 ms of execution). With the limit in
    the text, the generic plan is costed for the limit it has, and chosen after the
    fifth call as for any prepared statement. A limit is one of a few values (a page's
    size, a batch's), so a statement per value stays within psycopg's prepared ones."""
    if params is None or _LIMIT not in text:
        return text
    limit = params.get("limit")
    if type(limit) is not int:  # never text: only an int is written into the statement
        return text
    return text.replace(_LIMIT, f"LIMIT {limit}")


def warm_up(conn: psycopg.Connection[Any], *, text: str) -> None:
    """A new pooled connection's first statement (claims.sql ``warm_up``, ``text``): the
    claim's and the start's plans made now, in the pool's thread, not at a firing's
    instant (their first call in a session plans them for every day partition: 29-33
    ms with a month of them). Nothing is written. Before ``migrate`` (no functions yet),
    or on a standby, it fails, and the first call plans them as before."""
    with suppress(psycopg.Error):
        conn.execute(text)


class ClaimPlans:
    """The claim's, the start's and the outcome's statements planned on a pool's
    connections (claims.sql ``warm_up``, ``text``), in a process that claims.

    Only a process that claims asks (``prepare``): the first call of those statements in
    a session plans them for every day partition of firings (84 ms at the median, up to
    300 ms with four sessions planning at once, on a month of partitions), so a
    scheduler's, an API's or a CLI command's connections skip it. A worker asks, before
    its first claim, for the connections its store threads use side by side: a pool
    that grew on demand planned its second and third connection during a drain's first
    batches, on the cores the drain ran on."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.prepared = False  # from then on, every connection the pool opens is planned

    def configure(self, conn: psycopg.Connection[Any]) -> None:
        """The pool's ``configure``: a new connection, before it is handed out."""
        if self.prepared:
            warm_up(conn, text=self.text)

    def prepare(self, pool: ConnectionPool[Any], connections: int, timeout_s: float) -> None:
        """``connections`` of ``pool`` (at most its size) held at once, so that it opens
        them, and each planned: those it had opened before are planned here."""
        self.prepared = True
        held: list[psycopg.Connection[Any]] = []
        try:
            for _ in range(min(connections, pool.max_size)):
                held.append(pool.getconn(timeout=timeout_s))
            for conn in held:
                warm_up(conn, text=self.text)
        finally:
            for conn in held:
                pool.putconn(conn)
