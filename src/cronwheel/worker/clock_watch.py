"""The worker's view of the store's clock (domain/clock.py ``StoreClock``).

Every instant the worker acts on is the store's: a held firing starts when the store's
clock reaches its instant, whatever the host's clock says. The watch measures the
offset from round trips to the store's clock (``store.now()``) on a thread of its own
(so a sample never waits behind a claim: its delay is its uncertainty), three at start
and one every ``clock_sample_interval`` after. Past ``clock_bounds`` the worker is
flagged: ``ok`` is cleared and the claim loop claims nothing until it is set again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from cronwheel.domain.clock import Clock, ClockEstimate, StoreClock, sample_clock
from cronwheel.errors import StoreUnavailableError
from cronwheel.store.protocol import WorkerPort
from cronwheel.worker.config import WorkerConfig
from cronwheel.worker.events import WorkerEvents
from cronwheel.worker.waits import wait_any


class ClockWatch:
    def __init__(
        self, local: Clock, store: WorkerPort, config: WorkerConfig, events: WorkerEvents
    ) -> None:
        self.clock = StoreClock(local, config.clock_bounds)
        self._store = store
        self._every = config.clock_sample_interval.total_seconds()
        self._events = events
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="cronwheel-store-clock")
        self.ok: asyncio.Event | None = None  # set by start(): cleared while flagged
        self._flagged = False  # reported flagged (clock_flagged, not yet recovered)

    async def sample(self) -> ClockEstimate:
        """One round trip to the store's clock, taken into the estimate."""
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(
            self._thread, sample_clock, self.clock.local, self._store.now
        )
        return self.clock.add(found)

    async def start(self, node_id: str) -> None:
        """A first estimate, before anything is claimed (the tightest of three wins)."""
        self.ok = asyncio.Event()
        for _ in range(3):
            with contextlib.suppress(StoreUnavailableError):
                await self.sample()
        self.judge(node_id, self.clock.estimate())

    async def held_back(self, stop: asyncio.Event) -> bool:
        """While flagged: wait (up to a second) for a recovery or ``stop``; True if it
        waited. False at once when the clock is within its bounds."""
        assert self.ok is not None
        if self.ok.is_set():
            return False
        await wait_any([stop.wait(), self.ok.wait()], 1.0)
        return True

    def reported(self) -> ClockEstimate | None:
        """The estimate the node registry shows (None before the first round trip)."""
        return self.clock.estimate() if self.clock.measured else None

    def judge(self, node_id: str, estimate: ClockEstimate) -> bool:
        """Flag the worker (no new claims) or lift its flag; True when that changed."""
        assert self.ok is not None
        if estimate.flag is None and not self.ok.is_set():
            self.ok.set()
            if self._flagged:
                self._flagged = False
                self._events.clock_recovered(node_id, estimate)
            return True
        if estimate.flag is not None and not self._flagged and self.clock.measured:
            self.ok.clear()
            self._flagged = True
            self._events.clock_flagged(node_id, estimate)
            return True
        return False

    async def run(
        self,
        node_id: str,
        stop: asyncio.Event,
        report: Callable[[ClockEstimate], Awaitable[None]],
    ) -> None:
        """Sample until ``stop``; a change of flag is ``report``-ed at once (the node
        registry), not at the next node heartbeat."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._every)
            if stop.is_set():
                break
            try:
                estimate = await self.sample()
            except StoreUnavailableError:
                estimate = self.clock.estimate()  # older, so less sure
            if self.judge(node_id, estimate):
                with contextlib.suppress(StoreUnavailableError):
                    await report(estimate)

    def close(self) -> None:
        self._thread.shutdown(wait=False)
