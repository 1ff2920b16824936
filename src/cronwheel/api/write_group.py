"""WriteGroup: the writes the API's requests ask for in one turn of the event loop,
made in one transaction (group commit), for a store whose calls run on the loop.

On SQLite each request's write was its own transaction: a commit, and the pages it
changed (the jobs table's last leaf, an index's leaf, the jobs version, the namespace's
quota row) written to the WAL, then checkpointed with an fsync. Profiled under
``cronwheel bench api``, the commit and its share of the checkpoint were half of a job
creation's cost. Under load, several requests are read in the same turn of the loop;
their writes share those pages. So a write endpoint hands its call to the group
(:func:`cronwheel.api.calls.store_write`) and awaits it; the first call of a turn
schedules the group's flush for the end of that turn, which runs the calls one after
another, in the order they came, inside the store's ``write_group()`` (one
transaction, each write of a call a savepoint of it) and answers each call after the
commit. Each call is what it was alone:

- it runs as it would have run in that order, one after the other, seeing the
  earlier calls' writes as committed (they are, by the time anyone is answered);
- an exception is that call's answer, and its failed write left nothing; the others
  still commit;
- nothing is answered before the commit, and a commit that fails is every call's
  answer (nothing of theirs was written): a client is never told of a write that
  did not happen.

A flush takes at most :data:`MAX_CALLS` calls, so the writer lock is never held for
long; the rest go to the next turn. An idle API pays one turn of the loop (a few
microseconds) per write.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from cronwheel.errors import StoreUnavailableError

T = TypeVar("T")

MAX_CALLS = 32

_Waiting = tuple[Callable[[], Any], contextvars.Context, "asyncio.Future[Any]"]


class WriteGroup:
    """Calls made together in one transaction of ``open_group()``; one per event loop
    (an API process serves one)."""

    def __init__(self, open_group: Callable[[], AbstractContextManager[Any]]) -> None:
        self._open = open_group
        self._waiting: list[_Waiting] = []
        self.flushes = 0  # transactions made, and calls in them (read by the tests)
        self.calls = 0

    async def run(self, call: Callable[[], T]) -> T:
        """``call()`` in this turn's transaction; its result once that committed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if not self._waiting:
            loop.call_soon(self._flush)
        self._waiting.append((call, contextvars.copy_context(), future))
        return await future

    def _flush(self) -> None:
        batch, self._waiting = self._waiting[:MAX_CALLS], self._waiting[MAX_CALLS:]
        if self._waiting:
            asyncio.get_running_loop().call_soon(self._flush)
        answers: list[tuple[asyncio.Future[Any], bool, Any]] = []
        try:
            with self._open():
                for call, context, future in batch:
                    try:
                        answers.append((future, True, context.run(call)))
                    except Exception as exc:  # this call's answer
                        answers.append((future, False, exc))
        except BaseException as exc:  # the commit (or an interruption): nothing written
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(
                        exc
                        if isinstance(exc, Exception)
                        else StoreUnavailableError("the write was interrupted", field="store")
                    )
            if not isinstance(exc, Exception):
                raise
            return
        self.flushes += 1
        self.calls += len(batch)
        for future, ok, value in answers:
            if future.done():  # its request was cancelled (the client went away)
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)
