"""The outcomes a worker has not written yet, and which store call carries them.

A finished attempt's completion waits here until a write takes it: the claim loop's
next claim (``complete_and_claim``), the next start of held firings
(``complete_and_start``), or, when neither is in flight, the flush loop's own
``complete``, ``flush_interval`` after the first one came. So while a crowd is started
at its instant, the starts that the slots of finished handlers ask for carry those
handlers' outcomes: one commit, and no separate flush waiting with them for the store
(SQLite's writer lock is one per database).

A batch taken is either recorded (``recorded``: the store's answer for each) or, when
its write failed, given back first in line (``give_back``): never sent twice at once,
never dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator

from cronwheel import failpoints
from cronwheel.errors import StoreUnavailableError
from cronwheel.store.protocol import Completion
from cronwheel.worker.config import WorkerStats
from cronwheel.worker.events import WorkerEvents

Write = Callable[[list[Completion]], Awaitable[list[bool]]]


class Outcomes:
    def __init__(self, events: WorkerEvents, stats: WorkerStats, batch: int) -> None:
        self._events = events
        self._stats = stats
        self._batch = batch
        self._done: list[Completion] = []
        self._ready: asyncio.Event | None = None  # set by bind(): the flush loop's
        self._idle: asyncio.Event | None = None  # no claim or start in flight
        self._carriers = 0

    def bind(self) -> None:
        """The running loop's events (``Worker.run``); without them (a worker driven by
        ``drain_once``) outcomes wait for an explicit ``flush``."""
        self._ready = asyncio.Event()
        self._idle = asyncio.Event()
        self._carriers = 0
        self._idle.set()

    def add(self, completion: Completion) -> None:
        self._done.append(completion)
        if self._ready is not None:
            self._ready.set()

    def take(self) -> list[Completion]:
        """Pending outcomes, taken (up to the flush batch), in the order they came; the
        failpoint ``worker.before_complete`` fires when there are any."""
        batch = self._done[: self._batch]
        del self._done[: len(batch)]
        if batch:
            failpoints.hit("worker.before_complete")
        return batch

    def give_back(self, batch: list[Completion]) -> None:
        """Outcomes whose write failed go back, first in line."""
        if not batch:
            return
        self._done[:0] = batch
        if self._ready is not None:
            self._ready.set()

    def recorded(self, batch: list[Completion], accepted: list[bool]) -> None:
        for completion, ok in zip(batch, accepted, strict=True):
            if not ok:
                self._stats.rejected += 1
                self._events.completion_rejected(completion.firing_id)

    @contextlib.contextmanager
    def carrying(self) -> Iterator[None]:
        """Around a claim or a start that carries outcomes: meanwhile the flush loop
        leaves the new ones to the next such call, or to itself once none is in flight."""
        if self._idle is None:
            yield
            return
        self._carriers += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._carriers -= 1
            if self._carriers == 0:
                self._idle.set()

    async def flush(self, write: Write) -> None:
        """Write every pending outcome, a batch a transaction."""
        while self._done:
            batch = self.take()
            try:
                accepted = await write(batch)
            except BaseException:
                self.give_back(batch)
                raise
            self.recorded(batch, accepted)

    async def flush_loop(self, stop: asyncio.Event, interval_s: float, write: Write) -> None:
        """``interval_s`` after outcomes came, write those no claim or start took."""
        assert self._ready is not None and self._idle is not None
        while not stop.is_set():
            await self._ready.wait()
            self._ready.clear()
            await asyncio.sleep(interval_s)
            # While a claim or a start is in flight, the next one carries what finished
            # (a separate write now would only add a commit and, on SQLite, a second
            # writer waiting for the lock); once none is, the rest is written here.
            while not self._idle.is_set() and not stop.is_set():
                await self._idle.wait()
                await asyncio.sleep(0)  # a claim or start about to go takes them first
            try:
                await self.flush(write)
            except StoreUnavailableError as exc:
                self._events.store_unavailable(str(exc))
                await asyncio.sleep(0.5)
                self._ready.set()
