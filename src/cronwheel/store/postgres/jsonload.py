"""JSON read from PostgreSQL on the store's own connections: orjson where it gives what
the standard library gives, the standard library elsewhere.

psycopg loads ``json`` and ``jsonb`` with ``json.loads``. A job's row has four such
columns (schedule, payload, policies, bounds): reading them was a tenth of the API's CPU
for a job's creation on PostgreSQL (py-spy, ``cronwheel bench api``), and a page of 100
jobs reads 400. orjson parses the same documents 5.5 times faster (two of a job's, 0.90
against 4.99 us), and to the same values except for two kinds of number:

- an integer beyond 64 bits becomes a float (10**29 becomes 1.2345678901234568e+29):
  a job's arguments may hold one and must come back as given. A document with a run of
  19 or more digits (every integer past 2**63 has at least 19) is left to the standard
  library;
- a number past the float range is an error for orjson, infinity for the standard
  library (PostgreSQL's json keeps "1e400" as written): that error is left to it too.

Only the pools' connections load this way (``configure``); a caller's own connection,
passed to a transactional enqueue, keeps its loaders (caller.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import orjson
import psycopg
from psycopg.abc import Buffer
from psycopg.adapt import Loader

_LONG_DIGITS = re.compile(rb"\d{19}")


def loads(data: Buffer) -> Any:
    """The document's value, as ``json.loads`` gives it (module doc)."""
    raw = bytes(data)
    if _LONG_DIGITS.search(raw) is None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw)


class _JsonTextLoader(Loader):
    def load(self, data: Buffer) -> Any:
        return loads(data)


def use_fast_json(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """``conn`` loads json and jsonb (text format) with :func:`loads`."""
    for name in ("json", "jsonb"):
        conn.adapters.register_loader(name, _JsonTextLoader)


def configure(
    then: Callable[[psycopg.Connection[Any]], None] | None = None,
) -> Callable[[psycopg.Connection[Any]], None]:
    """A sync pool's ``configure``: :func:`use_fast_json`, then ``then`` if given."""

    def configured(conn: psycopg.Connection[Any]) -> None:
        use_fast_json(conn)
        if then is not None:
            then(conn)

    return configured


async def configure_async(conn: psycopg.AsyncConnection[Any]) -> None:
    """An async pool's ``configure``."""
    use_fast_json(conn)
