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
ends within tens of microseconds, then a spin of ``SPIN_S``) and only then writes the
start. RUNNING is still written at the instant, never before it; the lead only moves
the waiting off the loop.

**On warm caches.** After 100 ms idle, the code a start runs is cold: the pool's
checkout took 85 us instead of 4, PostgreSQL's start 1.3-1.4 ms instead of 0.35
(docs/benchmarks.md, "A held firing's start on warm caches"). So the store's thread
calls the store ``PRIME_S`` before the instant, and the store runs the start's path
on no firing before calling ``ready``, the wait for the instant (WorkerPort
``complete_and_start``). A store that ``waits_for_instant`` (PostgreSQL) has its
server wait on its own clock: ``ready`` returns ``SERVER_WAIT_S`` early, and the
statement's round trip overlaps the rest of the wait.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

from cronwheel.domain.models import ClaimedFiring, FiringId
from cronwheel.errors import StoreUnavailableError

# the claims, and the latest instant among their firings: none starts before it
StartCall = Callable[[Sequence[tuple[FiringId, str]], datetime], Awaitable[set[FiringId]]]

# How long before a held firing's instant its wait on the loop ends (module doc).
# Measured with `cronwheel bench precision` (SQLite, 2 cores): from the instant to the
# store's thread took 1.3 ms at the median and 2.7 ms at p99 without a lead.
START_LEAD_S = 0.005
# How long before the instant the store's thread calls the store, which warms the
# start's path before its ``ready`` waits for the instant (module doc): a primed start
# measured 0.77 ms from the call to the write, 1.26 ms unprimed, 0.48 ms hot. The
# warm-up itself (PostgreSQL, after 100 ms idle) took 1.0 ms at the median, 1.7 ms at
# p99: with 1.5 ms here its p99 ended 0.24 ms past the instant, with 2.5 ms 0.81 ms
# before it (docs/benchmarks.md).
PRIME_S = 0.0025
# How long before the instant ``ready`` returns on a store that waits for the instant
# on its server: under one round trip of the start (0.35 ms hot, module doc).
SERVER_WAIT_S = 0.0004
# The last part of a wait for an instant is spun, not slept: a timed wait ends up to a
# few tenths of a millisecond late on a loaded host.
SPIN_S = 0.0003

_NEVER_SET = threading.Event()  # waited on for a time: never set


def wait_until(deadline: float) -> None:
    """Block this thread until ``time.monotonic()`` reaches ``deadline``: a timed wait
    on the monotonic clock (time.sleep fails under libfaketime:
    tests/faults/test_node_clocks.py), then a spin of at most ``SPIN_S``."""
    left = deadline - time.monotonic()
    if left > SPIN_S:
        _NEVER_SET.wait(left - SPIN_S)
    while time.monotonic() < deadline:
        pass


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
