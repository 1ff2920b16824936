"""What PostgreSQL plans, and when: statements written so that the server plans them
once per connection, and a new connection's plans made before a firing needs them."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import suppress
from typing import Any

import psycopg

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
