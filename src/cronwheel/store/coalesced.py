"""Concurrent calls of one kind sent as one statement, on an event loop.

Under ``wrk`` (``cronwheel bench api``), a ``GET /v1/firings/{id}`` on PostgreSQL spent
most of the API's CPU on the driver's round of one small statement: the pool's checkout
and return, the prepared statement's send, the wait, the rows. Eight clients asking at
once paid that eight times for eight rows of one index. Here the calls asked while
statements are in flight wait, and go together as one statement for all their keys
(``fetch``): one round for many answers. The API's reads of firings and of jobs by
name, and its creations of jobs, go this way (store/postgres/aio.py).

What a call promises does not change:

- **It is sent after it was asked.** A call never takes the answer of a statement
  already in flight (which may have started before the caller's own write committed):
  it joins the next statement, so a caller reads its own writes as with one statement
  each, and a write is made no earlier than asked.
- **Nothing waits for company.** A call asked while fewer than ``flights`` statements
  are in flight goes at the next turn of the loop, with whatever else was asked in that
  turn; only calls asked while ``flights`` are in flight wait, for the first of them to
  end.
- **A failure is each call's failure.** The statement's exception is raised in every
  call it carried (``fetch`` may instead answer each key with its own outcome); a key
  the answer lacks is None (the caller's "not found").
- A call whose caller went away (cancelled) is dropped from its answer, not from the
  statement.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

Fetch = Callable[[Sequence[K]], Awaitable[Mapping[K, V]]]


class Coalesced(Generic[K, V]):
    """Calls by key through ``fetch`` (distinct keys, at most ``limit`` a statement),
    with at most ``flights`` statements in flight. One per event loop."""

    def __init__(self, fetch: Fetch[K, V], *, flights: int = 2, limit: int = 500) -> None:
        if flights < 1 or limit < 1:
            raise ValueError("flights and limit must be at least 1")
        self._fetch = fetch
        self._flights = flights
        self._limit = limit
        self._pending: list[tuple[K, asyncio.Future[V | None]]] = []
        # statements in flight, counted by _fly itself: a task's done callbacks run a
        # turn later, when a read asked meanwhile would find no flight to carry it
        self._flying = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def get(self, key: K) -> V | None:
        """The answer for ``key``; None when the statement found nothing for it."""
        fut: asyncio.Future[V | None] = asyncio.get_running_loop().create_future()
        self._pending.append((key, fut))
        if self._flying < self._flights:
            self._flying += 1
            task = asyncio.create_task(self._fly())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await fut

    async def close(self) -> None:
        """Stop the statements in flight; their reads and those waiting are cancelled."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        pending, self._pending = self._pending, []
        for _, fut in pending:
            fut.cancel()

    async def _fly(self) -> None:
        try:
            await asyncio.sleep(0)  # the calls asked in this turn of the loop go together
            await self._send()
        finally:
            self._flying -= 1  # no await after the last look at _pending (see __init__)

    async def _send(self) -> None:
        while self._pending:
            batch = self._pending[: self._limit]
            del self._pending[: self._limit]
            keys = list(dict.fromkeys(key for key, fut in batch if not fut.done()))
            if not keys:
                continue
            try:
                found = await self._fetch(keys)
            except asyncio.CancelledError:
                for _, fut in batch:
                    fut.cancel()
                raise
            except Exception as exc:
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for key, fut in batch:
                if not fut.done():
                    fut.set_result(found.get(key))
