"""The worker: claims queued firings, runs their tasks, heartbeats, records outcomes.

- Claims are leases: ``lease_until = now + visibility_timeout``, renewed by a
  heartbeat while the handler runs. A worker that dies stops heartbeating and
  the leader's reaper re-queues its firings (at-least-once).
- Each claim carries a fresh token; every completion is a compare-and-swap on
  it, so a stale (zombie) worker's late result is rejected.
- A claim starts the due firings it has free slots for (RUNNING) and holds the
  others (CLAIMED: up to ``prefetch`` ahead of their instant, or of a free slot); a
  held one is started at its instant, in a free slot, by the store's compare-and-swap
  (worker/starts.py, batched), which a cancel that came first makes fail. Finished
  handlers' outcomes ride with the next claim or start (worker/outcomes.py). While every
  claim held is an early one (a crowd is about to fall due), the worker claims up to
  ``early_claims`` beyond its concurrency, to start them as slots free up; at most
  ``concurrency`` handlers run at once all the same.
- It acts on the store's clock (worker/clock_watch.py); flagged (offset or its
  uncertainty past ``clock_bounds``) it claims nothing and starts what it holds.
- Sync handlers run in a thread pool, async ones on the event loop, process-isolated
  ones in children the worker can kill (worker/processes.py); a job's handler waits
  for its revoked handlers here to end (worker/executing.py). Store calls run on
  dedicated threads: the loop never blocks on I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any, TypeVar

from cronwheel import failpoints
from cronwheel.domain.clock import Clock, ClockEstimate
from cronwheel.domain.models import ClaimedFiring, FiringId
from cronwheel.errors import StoreUnavailableError
from cronwheel.store.protocol import Completion, WorkerPort
from cronwheel.worker.attempt import Attempts
from cronwheel.worker.clock_watch import ClockWatch
from cronwheel.worker.config import (
    WorkerConfig,
    WorkerStats,
    finished_within,
    make_worker_id,
    renewal_at,
    renewals,
    worker_node,
)
from cronwheel.worker.context import Context, ids_of, make_context
from cronwheel.worker.events import QuietWorkerEvents, WorkerEvents
from cronwheel.worker.executing import Executing
from cronwheel.worker.hooks import AttemptHooks
from cronwheel.worker.outcomes import Outcomes
from cronwheel.worker.registry import TaskRegistry
from cronwheel.worker.slots import Slots
from cronwheel.worker.starts import (
    PRIME_S,
    SERVER_WAIT_S,
    START_LEAD_S,
    Starter,
    wait_until,
)
from cronwheel.worker.threads import HandlerThreads
from cronwheel.worker.waits import until_available, wait_any

__all__ = ["Worker", "WorkerConfig", "WorkerStats", "make_worker_id"]

T = TypeVar("T")

# the worker's store threads (claims and heartbeats; outcomes; held firings' starts): the
# store calls it makes side by side
STORE_THREADS = 3


class Worker:
    def __init__(
        self,
        store: WorkerPort,
        registry: TaskRegistry,
        clock: Clock,
        *,
        config: WorkerConfig | None = None,
        worker_id: str | None = None,
        rng: random.Random | None = None,
        events: WorkerEvents | None = None,
        hooks: AttemptHooks | None = None,
    ) -> None:
        """``events``: what happens (metrics, logs); ``hooks``: tracing (worker/hooks.py)."""
        self.store = store
        self.events: WorkerEvents = events or QuietWorkerEvents()
        self.registry = registry
        self.config = config or WorkerConfig()
        # every instant it acts on is the store's (its host's clock + the offset measured)
        self._watch = ClockWatch(clock, store, self.config, self.events)
        self.clock = self._watch.clock
        self.worker_id = worker_id or make_worker_id()
        self.stats = WorkerStats()
        # store threads (STORE_THREADS): claims; completions and heartbeats (their round
        # trips overlap)
        self._db = ThreadPoolExecutor(1, thread_name_prefix="cronwheel-store")
        self._db_out = ThreadPoolExecutor(1, thread_name_prefix="cronwheel-store-out")
        # held firings' starts: own thread (a claim or a flush must not delay a handler)
        self._db_start = ThreadPoolExecutor(1, thread_name_prefix="cronwheel-store-start")
        self._starter = Starter(self._store_start)
        # finished attempts' outcomes until a claim, a start or the flush writes them
        self._outcomes = Outcomes(self.events, self.stats, self.config.flush_batch)
        self._threads = HandlerThreads(self.config.concurrency)
        self._attempts = Attempts(
            registry, self.clock, self.events, self.stats, self._threads, rng or random.Random()
        )
        self._attempts.isolate(self.config, Executing(self._still_held))
        self.hooks = self._attempts.hooks = hooks
        self._executing = self._attempts.executing
        self._active: dict[FiringId, tuple[ClaimedFiring, Context]] = {}
        self._slot_freed: asyncio.Event | None = None
        # monotonic instants of the latest handler finishes (the worker's pace)
        self._finished: deque[float] = deque(maxlen=self.config.concurrency)
        # monotonic instant each held claim was last renewed (or taken): the heartbeat
        # loop renews every claim by a third of its visibility timeout after that
        self._renewed: dict[FiringId, float] = {}
        self._claim_added: asyncio.Event | None = None
        self._run_slots: Slots | None = None  # set by run(): `concurrency`
        # held claims (firing, token) not started yet: a cancel takes such a claim back,
        # which is the user's cancel, not a lost claim
        self._held: set[tuple[FiringId, str]] = set()

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._db, partial(fn, *args, **kwargs))

    async def _call_out(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._db_out, partial(fn, *args, **kwargs))

    async def _still_held(self, claims: Sequence[tuple[FiringId, str]]) -> set[FiringId]:
        """Which of these claims this worker no longer holds (a heartbeat: it renews the
        others); none when the store cannot say now (the heartbeat loop will)."""
        try:
            return await self._call_out(self.store.heartbeat, self.worker_id, claims)
        except StoreUnavailableError:
            return set()

    async def _report_clock(self, estimate: ClockEstimate | None) -> None:
        await self._call_out(self.store.heartbeat_node, self.worker_id, estimate)

    async def _store_start(
        self, claims: Sequence[tuple[FiringId, str]], not_before: datetime
    ) -> set[FiringId]:
        """Start held firings, not before ``not_before`` (the store's thread waits out
        the last ``START_LEAD_S``: worker/starts.py); on a store with one writer,
        carrying the outcomes of the handlers that finished (whose slots they take): one
        commit for both (worker/outcomes.py)."""
        loop = asyncio.get_running_loop()
        joined = self.store.one_writer
        done = self._outcomes.take() if joined else []
        wait_s = min(START_LEAD_S, (not_before - self.clock.now()).total_seconds())
        at = time.monotonic() + wait_s
        # the store's server waits for the instant itself: ready returns before it
        ready_at = at - SERVER_WAIT_S if self.store.waits_for_instant else at
        store_start = partial(self.store.complete_and_start, done, self.worker_id, claims)

        def at_instant() -> tuple[list[bool], set[FiringId]]:
            if at <= time.monotonic():
                return store_start(not_before=not_before)  # late: nothing to warm up for
            wait_until(at - PRIME_S)  # the store warms the start's path, then waits
            return store_start(ready=partial(wait_until, ready_at), not_before=not_before)

        with self._outcomes.carrying() if joined else contextlib.nullcontext():
            try:
                accepted, started = await loop.run_in_executor(self._db_start, at_instant)
            except BaseException:
                self._outcomes.give_back(done)
                raise
        self._outcomes.recorded(done, accepted)
        return started

    # -- running one firing ------------------------------------------------------------
    async def execute(self, claim: ClaimedFiring, *, slot_taken: bool = False) -> Completion | None:
        """Run one claimed firing to an outcome. None when it must not run: a held
        firing cancelled, or its claim lost, before the store started it.

        A firing the claim started (RUNNING) runs at once in the slot taken for it
        before the claim (``slot_taken``). A held one (CLAIMED) waits for its instant
        and a free slot, then asks the store to start it; only if that compare-and-swap
        succeeds is its handler called."""
        firing = claim.firing
        ctx = make_context(firing, claim.claim_token, self.worker_id, ids_of(self.store))
        self._active[firing.id] = (claim, ctx)
        self._renewed[firing.id] = self.clock.monotonic()
        if self._claim_added is not None:
            self._claim_added.set()
        try:
            if claim.started:
                try:
                    return await self._run_started(claim, ctx)
                finally:
                    if slot_taken and self._run_slots is not None:
                        self._run_slots.give()
            self._held.add((firing.id, claim.claim_token))
            # the last START_LEAD_S are waited out by the start's thread (starts.py)
            delay = (firing.due_at - self.clock.now()).total_seconds() - START_LEAD_S
            # its instant, then one of `concurrency` slots, on one timer for a whole
            # crowd (worker/slots.py); no limit when driven by drain_once
            if self._run_slots is None and delay > 0:
                await asyncio.sleep(delay)
            slots = self._run_slots
            gate = contextlib.nullcontext() if slots is None else slots.after(delay)
            async with gate:
                started = not ctx.cancel_requested and await self._starter.start(claim)
                self._held.discard((firing.id, claim.claim_token))
                if not started:
                    return None  # cancelled (or lost) while held: it never starts
                return await self._run_started(claim, ctx)
        finally:
            self._held.discard((firing.id, claim.claim_token))
            # only this attempt's entry: a stale attempt of the same firing that is still
            # winding down must not evict the newer attempt (which would stop its heartbeat)
            entry = self._active.get(firing.id)
            if entry is not None and entry[0].claim_token == claim.claim_token:
                del self._active[firing.id]
                self._renewed.pop(firing.id, None)

    async def _run_started(self, claim: ClaimedFiring, ctx: Context) -> Completion:
        """A RUNNING firing's attempt; one whose cancel was asked for before its handler
        was called ends CANCELLED without calling it. It waits first for this worker's
        revoked handlers of its job to stop executing (worker/executing.py)."""
        await self._executing.wait_turn(claim, ctx)
        if ctx.cancel_requested:
            return self._attempts.cancelled_before_call(claim)
        return await self._attempts.run(claim, ctx)

    async def _execute_and_report(self, claim: ClaimedFiring, *, slot_taken: bool = False) -> None:
        try:
            completion = await self.execute(claim, slot_taken=slot_taken)
            if completion is not None:
                self._outcomes.add(completion)
        finally:
            self._finished.append(self.clock.monotonic())
            if self._slot_freed is not None:
                self._slot_freed.set()

    async def flush(self) -> None:
        """Write pending completions, a batch a transaction."""
        await self._outcomes.flush(partial(self._call_out, self.store.complete))

    # -- test/driver helper ---------------------------------------------------------------
    async def drain_once(self) -> int:
        """Claim everything claimable now, run it concurrently, record the outcomes."""
        began = time.time_ns()
        claims = await self._call(
            self.store.claim,
            self.worker_id,
            tasks=self.registry.names(),
            limit=self.config.concurrency,
            prefetch=timedelta(0),
        )
        self.stats.claimed += len(claims)
        self.events.claimed(claims)
        if claims and self.hooks is not None:
            self.hooks.claimed(self.worker_id, claims, began)
        await asyncio.gather(*(self._execute_and_report(c) for c in claims))
        await self.flush()
        return len(claims)

    # -- the loops -------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        self._slot_freed = asyncio.Event()
        self._outcomes.bind()
        self._run_slots = Slots(self.config.concurrency)
        loop = asyncio.get_running_loop()
        rung = asyncio.Event()

        def wake() -> None:
            loop.call_soon_threadsafe(rung.set)

        await self._watch.start(self.worker_id)
        wakeup = self.store.open_wakeup(wake)
        names = self.registry.names()
        node = worker_node(self.worker_id, names, self.config, self.clock.now())
        node = replace(node, wake_addr=wakeup.address, clock=self._watch.reported())
        register = partial(self._call, self.store.register_node, node)
        if await until_available(register, stop, self.events.store_unavailable):
            self.events.worker_started(self.worker_id, names, self.config.concurrency)
            # the store ready for the calls the store threads make side by side, before
            # the first claim (WorkerPort.prepare_claims); not when stopped before it
            # answered: a store that is down would be waited for (the pool's timeout)
            await self._call(self.store.prepare_claims, STORE_THREADS)
        loops = [
            asyncio.create_task(self._heartbeat_loop(stop)),
            asyncio.create_task(
                self._outcomes.flush_loop(
                    stop,
                    self.config.flush_interval.total_seconds(),
                    partial(self._call_out, self.store.complete),
                )
            ),
            asyncio.create_task(self._watch.run(self.worker_id, stop, self._report_clock)),
        ]
        running: set[asyncio.Task[None]] = set()
        try:
            await self._claim_loop(stop, rung, running)
        finally:
            # Graceful stop: let running handlers finish (bounded by the caller), record them.
            if running:
                await asyncio.wait(running, timeout=30)
            for t in loops:
                t.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            try:
                await self.flush()
                await self._call(self.store.remove_node, self.worker_id)
            except StoreUnavailableError:
                pass
            wakeup.close()
            self._db.shutdown(wait=False)
            self._db_out.shutdown(wait=False)
            self._db_start.shutdown(wait=False)
            self._watch.close()
            self._threads.shutdown()
            self._attempts.processes.shutdown()
            self.events.worker_stopped(self.worker_id)

    async def _claim_loop(
        self, stop: asyncio.Event, rung: asyncio.Event, running: set[asyncio.Task[None]]
    ) -> None:
        assert self._slot_freed is not None
        names = self.registry.names()
        backoff = 0.1
        while not stop.is_set():
            if await self._watch.held_back(stop):
                continue  # flagged: no new claim (what is held still starts)
            rung.clear()
            self._slot_freed.clear()
            free = self._room()
            claimed = 0
            if free > 0:
                # what finished since the last claim is recorded in the claim's own
                # transaction (one commit instead of two: a store's commit is the costly
                # part of a busy worker's round trip); the flush loop takes the rest
                done = self._outcomes.take()
                # the slots no held claim waits for go to the claim's firings that are
                # due: the claim starts those in its own transaction (RUNNING); the rest
                # it holds (CLAIMED), to be started when their instant and a slot come.
                # (Slots a held claim will need are not taken: while a crowd is held
                # ahead of its instant, they are its at the instant.)
                assert self._run_slots is not None
                spare = self.config.concurrency - len(self._active)
                taken = self._run_slots.take(min(free, spare))
                began = time.time_ns()
                try:
                    with self._outcomes.carrying():
                        accepted, claims = await self._call(
                            self.store.complete_and_claim,
                            done,
                            self.worker_id,
                            tasks=names,
                            limit=free,
                            prefetch=self.config.prefetch,
                            start=taken,
                        )
                    backoff = 0.1
                except BaseException as exc:
                    self._run_slots.give(taken)
                    self._outcomes.give_back(done)
                    if not isinstance(exc, StoreUnavailableError):
                        raise
                    self.events.store_unavailable(str(exc), backoff)
                    await wait_any([stop.wait()], backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                self._outcomes.recorded(done, accepted)
                claimed = len(claims)
                if claimed:
                    failpoints.hit("worker.after_claim")
                self.stats.claimed += claimed
                self.events.claimed(claims)
                if claimed and self.hooks is not None:
                    self.hooks.claimed(self.worker_id, claims, began)
                self._run_slots.give(taken - sum(1 for c in claims if c.started))
                for claim in claims:
                    # register before the task starts so `free` is right on the next pass
                    task = asyncio.create_task(
                        self._execute_and_report(claim, slot_taken=claim.started)
                    )
                    running.add(task)
                    task.add_done_callback(running.discard)
                await asyncio.sleep(0)  # let the new tasks register themselves
            if claimed and claimed == free:
                continue  # there may be more: claim again as soon as slots free up
            waits = (
                [stop.wait(), rung.wait(), self._slot_freed.wait()]
                if free > 0
                else [stop.wait(), self._slot_freed.wait()]
            )
            await wait_any(waits, await self._idle_timeout(free))

    def _room(self) -> int:
        """How many firings the next claim may take: the free slots; or, while every
        claim held is waiting for its instant, up to ``early_claims`` more."""
        free = self.config.concurrency + self._pace_ahead() - len(self._active)
        if free > 0 or self.config.early_claims <= 0:
            return free
        now = self.clock.now()
        if all(c.firing.due_at > now for c, _ in self._active.values()):
            return self.config.concurrency + self.config.early_claims - len(self._active)
        return free

    def _pace_ahead(self) -> int:
        """Due firings claimed beyond the free slots: as many as this worker's handlers
        finished within the last ``claim_ahead_window`` (at most ``concurrency``), so
        the next batch is claimed while this one runs, and a worker whose handlers
        are slow holds none that another worker could start now."""
        window = self.config.claim_ahead_window.total_seconds()
        if window <= 0:
            return 0
        return finished_within(self._finished, self.clock.monotonic() - window)

    async def _idle_timeout(self, free: int) -> float:
        """Sleep until the poll interval, or until the next queued firing falls due
        (firings of capped jobs are not prefetched: they are claimed at their instant,
        so the worker must be awake then)."""
        timeout = self.config.poll_interval.total_seconds()
        if free <= 0:
            return timeout
        try:
            hint = await self._call(self.store.next_due_at)
        except StoreUnavailableError:
            return timeout
        if hint is not None:
            timeout = min(timeout, max(0.0, (hint - self.clock.now()).total_seconds()))
        return timeout

    async def _heartbeat_loop(self, stop: asyncio.Event) -> None:
        self._claim_added = asyncio.Event()
        next_node_beat = 0.0
        beat_every = self.config.heartbeat_interval.total_seconds()
        deadline = self.clock.monotonic() + beat_every  # persists across wake-ups
        while not stop.is_set():
            # renew each claim a third of its visibility timeout after it was taken or last
            # renewed, a new claim waking the loop (the regular deadline is kept)
            mono = self.clock.monotonic()
            due = (
                renewal_at(c, self._renewed.get(fid, mono)) for fid, (c, _) in self._active.items()
            )
            target = min([deadline, *due])
            if target > mono:
                self._claim_added.clear()
                await wait_any([stop.wait(), self._claim_added.wait()], target - mono)
                if stop.is_set():
                    break
                if self._claim_added.is_set() and self.clock.monotonic() < target:
                    continue
            deadline = self.clock.monotonic() + beat_every
            try:
                claims = [(fid, c.claim_token) for fid, (c, _) in self._active.items()]
                if claims:
                    beat_at = self.clock.monotonic()
                    renew = renewals(self._active, self._held, self._renewed, deadline)
                    lost = await self._call_out(self.store.heartbeat, self.worker_id, renew)
                    for fid, _ in renew:
                        if fid not in lost and fid in self._renewed:
                            self._renewed[fid] = beat_at
                    self.events.claims_renewed(len(renew) - len(lost))
                    cancelled = await self._call(self.store.cancel_requested, claims)
                    for fid in lost | cancelled:
                        entry = self._active.get(fid)
                        if entry is not None and not entry[1].cancel_requested:
                            entry[1].request_cancel()
                            held = (fid, entry[0].claim_token) in self._held
                            if fid in lost and not (held and fid in cancelled):
                                self.stats.lost_claims += 1
                                self.events.claim_lost(fid)
                    for fid in lost:  # revoked: a process-isolated handler is stopped now
                        self._executing.revoke(fid, None, "its claim was revoked or lost")
                mono = self.clock.monotonic()
                if mono >= next_node_beat:
                    next_node_beat = mono + self.config.node_heartbeat.total_seconds()
                    await self._report_clock(self._watch.reported())
            except StoreUnavailableError as exc:
                self.events.store_unavailable(str(exc))
