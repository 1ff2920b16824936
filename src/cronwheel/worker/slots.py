"""At most ``n`` holders at once, the others waiting in FIFO order.

``asyncio.Semaphore`` would do, but in Python 3.11 its ``acquire`` first asks
``locked()``, which scans every waiter: with thousands of claims waiting for a slot (a
crowd claimed ahead of its instant) each start cost a walk of the queue. Here acquire
and release are O(1): a released slot is handed to the first live waiter directly.
"""

from __future__ import annotations

import asyncio
from collections import deque
from types import TracebackType


class Slots:
    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError("n must be at least 1")
        self._free = n
        self._waiters: deque[asyncio.Future[None]] = deque()

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

    async def __aenter__(self) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # resolved by a release that hands its slot over
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release()  # handed a slot, then cancelled before using it
            raise  # (a cancelled waiter stays queued; releases pass over it)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._release()

    def _release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1
