"""At most ``n`` holders at once, the others waiting in FIFO order.

``asyncio.Semaphore`` would do, but in Python 3.11 its ``acquire`` first asks
``locked()``, which scans every waiter: with thousands of claims waiting for a slot (a
crowd claimed ahead of its instant) each start cost a walk of the queue. Here acquire
and release are O(1): a released slot is handed to the first live waiter directly.

**A wait for an instant, then a slot** (:meth:`Slots.after`): a held firing waits for
its instant and then for a slot. Each one sleeping on its own timer woke a whole crowd
at its instant: 5,000 held firings of one worker were 5,000 task wake-ups in one turn
of the event loop, about 40 ms, before the first of them could ask the store to start
(the peers' W1 herd: its first start 41-75 ms after the instant). Here the waits share
one timer: at their instant they join the FIFO queue in the order of their instants
(the order they would have joined it in when they woke), and only those handed a slot
wake; the others wake when a slot is handed to them. The waits of one instant are one
list, moved to the queue in one step: one by one, 5,000 of them took 5 ms, which
ended past the instant that the first start's call should have been made before.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import math
from collections import deque
from collections.abc import AsyncIterator
from types import TracebackType

GRID_S = 0.0001  # waits for instants within this of each other are one group


class Slots:
    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError("n must be at least 1")
        self._free = n
        self._waiters: deque[asyncio.Future[None]] = deque()
        # waits for an instant, not yet queued, by instant (loop time, on a grid of
        # GRID_S: a crowd's waits, computed a few microseconds apart, share one list)
        self._timed: dict[float, list[asyncio.Future[None]]] = {}
        self._instants: list[float] = []  # a heap of _timed's keys
        self._timer: asyncio.TimerHandle | None = None

    @property
    def free(self) -> int:
        return self._free

    def take(self, n: int) -> int:
        """Take up to ``n`` slots at once, without waiting and never ahead of a waiter;
        how many were taken (each is given back with :meth:`give`)."""
        if self._waiters:
            return 0
        taken = max(0, min(n, self._free))
        self._free -= taken
        return taken

    def give(self, n: int = 1) -> None:
        """Give back ``n`` slots taken with :meth:`take` (each to the first live waiter)."""
        for _ in range(n):
            self._release()

    @contextlib.asynccontextmanager
    async def after(self, delay: float) -> AsyncIterator[None]:
        """``async with slots.after(delay)``: hold a slot, taken once ``delay`` seconds
        have passed (on the event loop's clock) and a slot is free; not before."""
        await self._acquire(delay)
        try:
            yield
        finally:
            self._release()

    async def __aenter__(self) -> None:
        await self._acquire(0.0)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._release()

    async def _acquire(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        if delay <= 0 and self._free > 0 and not self._waiters:
            self._free -= 1
            return
        waiter: asyncio.Future[None] = loop.create_future()
        if delay <= 0:
            self._waiters.append(waiter)
        else:
            # rounded up: a wait ends on its instant or up to GRID_S after it
            when = math.ceil((loop.time() + delay) / GRID_S) * GRID_S
            group = self._timed.get(when)
            if group is not None:
                group.append(waiter)
            else:
                self._timed[when] = [waiter]
                heapq.heappush(self._instants, when)
                self._arm(loop)
        try:
            await waiter  # resolved by a release that hands its slot over
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release()  # handed a slot, then cancelled before using it
            raise  # (a cancelled waiter stays queued; releases pass over it)

    def _due(self, when: float) -> None:
        """The timer set for ``when``: the waits whose instant came join the queue, in
        the order of their instants; the free slots go to the queue's first live
        waiters. (The loop runs a timer up to its clock's resolution early: ``when``
        itself counts as come.)"""
        self._timer = None
        loop = asyncio.get_running_loop()
        now = max(loop.time(), when)
        while self._instants and self._instants[0] <= now:
            # a list at once: 5,000 pops of a heap of waits took 5 ms
            group = self._timed.pop(heapq.heappop(self._instants))
            self._waiters.extend(w for w in group if not w.done())
        while self._free > 0 and self._waiters:
            self._free -= 1
            self._release()  # to the first live waiter, or back to the free ones
        if self._instants:
            self._arm(loop)

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        """The one timer set for the earliest instant waited for."""
        first = self._instants[0]
        if self._timer is not None:
            if self._timer.when() <= first:
                return
            self._timer.cancel()
        self._timer = loop.call_at(first, self._due, first)

    def _release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1
