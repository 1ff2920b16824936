"""Held firings started in batches: the CLAIMED -> RUNNING compare-and-swap.

A firing a worker holds (claimed ahead of its instant, or of a free slot) may run only
once the store has moved it to RUNNING: a cancel that came first makes that move fail,
and then its handler is never called. The requests of the firings reaching their turn
together (a crowd at its instant, slots freed by one batch of completions) go to the
store as one call; a request made while a call is in flight rides with the next.

**At the instant, not a millisecond after.** The event loop's timers are coarse: a
sleep ends up to a millisecond late (epoll and libuv count in milliseconds), and the
hop to the store's thread adds a few tenths more. So a held firing's wait on the loop
ends ``START_LEAD_S`` before its instant, and the call carries the batch's latest
instant (``not_before``): the store's thread waits out the rest (a sleep the kernel
ends within tens of microseconds) and only then writes the start. RUNNING is still
written at the instant, never before it; the lead only moves the waiting off the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

from cronwheel.domain.models import ClaimedFiring, FiringId
from cronwheel.errors import StoreUnavailableError

# the claims, and the latest instant among their firings: none starts before it
StartCall = Callable[[Sequence[tuple[FiringId, str]], datetime], Awaitable[set[FiringId]]]

# How long before a held firing's instant its wait on the loop ends (module doc).
# Measured with `cronwheel bench precision` (SQLite, 2 cores): from the instant to the
# store's thread took 1.3 ms at the median and 2.7 ms at p99 without a lead.
START_LEAD_S = 0.003

_RETRY_S = (0.05, 0.1, 0.25, 0.5, 1.0)


class Starter:
    """Batches start requests for one worker; ``call`` runs the store's ``start``."""

    def __init__(self, call: StartCall, *, batch: int = 1000) -> None:
        self._call = call
        self._batch = batch
        self._pending: list[tuple[ClaimedFiring, asyncio.Future[bool]]] = []
        self._sending: asyncio.Task[None] | None = None

    async def start(self, claim: ClaimedFiring) -> bool:
        """True once the store started this held firing; False when it no longer may
        (cancelled, or the claim was lost): its handler must not be called."""
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((claim, fut))
        if self._sending is None or self._sending.done():
            self._sending = asyncio.create_task(self._send())
        return await fut

    async def _send(self) -> None:
        await asyncio.sleep(0)  # the requests made in this turn of the loop go together
        while self._pending:
            batch, self._pending = self._pending[: self._batch], self._pending[self._batch :]
            claims = [(c.firing.id, c.claim_token) for c, _ in batch]
            started = await self._started(claims, max(c.firing.due_at for c, _ in batch))
            for claim, fut in batch:
                if not fut.done():
                    fut.set_result(claim.firing.id in started)

    async def _started(
        self, claims: list[tuple[FiringId, str]], not_before: datetime
    ) -> set[FiringId]:
        """The store's answer, retried while it is unavailable (a held firing's lease
        keeps it ours meanwhile; past it the reaper re-queues it and our start fails)."""
        for delay in (*_RETRY_S, None):
            try:
                return await self._call(claims, not_before)
            except StoreUnavailableError:
                if delay is None:
                    return set()  # not started: the firing goes back to the queue
                await asyncio.sleep(delay)
        return set()
