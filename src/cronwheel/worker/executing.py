"""The handlers a worker is actually executing, per job: the local half of a job's cap.

The store caps the firings of a job that are RUNNING; a handler can outlive its
firing's RUNNING state: its claim revoked (``terminate_other``, the reaper after
``cancel_grace``, a lost lease) or given up (a thread past its ``timeout``). Such a
*zombie* still executes. Before a handler of a job is called, :meth:`Executing.wait_turn`

1. asks the store (one heartbeat of their claims) whether this worker's other
   handlers of that job still hold their claims, when they are as many as the job's
   cap: the newer firing may have been claimed by revoking them, and the heartbeat
   loop would learn it only later. Those that lost it become zombies and are stopped
   (``stop``: a child process is killed; a thread or a coroutine only has its cancel
   requested);
2. waits until no zombie of that job executes on this worker any more.

A job with overlap ``allow`` has no cap: nothing is checked. So on one worker the
handlers of a job executing at once never exceed what the store allows, in every
isolation mode: a process-isolated zombie is killed first, an in-process one (a thread
cannot be killed) is waited for. Across workers the store does not know whether
another worker's revoked handler still executes: see the README (process isolation
stops it within that worker's heartbeat interval).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field

from cronwheel.domain.models import ClaimedFiring, FiringId
from cronwheel.domain.overlap import OverlapPolicy
from cronwheel.worker.context import Context

# the store's heartbeat on these claims: the firings whose claim is no longer held
LostCheck = Callable[[Sequence[tuple[FiringId, str]]], Awaitable[set[FiringId]]]


@dataclass(eq=False, slots=True)
class Handler:
    """One executing handler. ``ended`` is set when it has really stopped executing (the
    thread returned, the coroutine finished, the child process was reaped)."""

    job_id: int
    firing_id: FiringId
    claim_token: str
    stop: Callable[[str], None]
    zombie: bool = False
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    returned: bool = False  # set by its thread as its code returns (from any loop)


class Executing:
    def __init__(self, lost: LostCheck) -> None:
        self._lost = lost
        self._jobs: dict[int, list[Handler]] = {}

    def of_job(self, job_id: int) -> list[Handler]:
        return list(self._jobs.get(job_id, ()))

    def count(self, job_id: int) -> int:
        return len(self._jobs.get(job_id, ()))

    def revoke(self, firing_id: FiringId, claim_token: str | None, reason: str) -> None:
        """This attempt no longer holds its claim (or gave it up): a zombie, stopped."""
        for handlers in self._jobs.values():
            for h in handlers:
                if h.firing_id == firing_id and claim_token in (None, h.claim_token):
                    h.zombie = True
                    h.stop(reason)

    async def wait_turn(self, claim: ClaimedFiring, ctx: Context | None = None) -> None:
        """Return when this firing's handler may be called: no zombie of its job executes
        here (after stopping those the store revoked for it); or as soon as ``ctx``'s
        cancel is requested (its handler will not be called then)."""
        policies = claim.policies
        job_id = claim.firing.job_id
        if policies.overlap is OverlapPolicy.ALLOW or not self._jobs.get(job_id):
            return  # no cap to keep, or nothing of the job executes here
        live = [h for h in self._jobs.get(job_id, ()) if not h.zombie]
        # the store counts these: only at the cap (explicit, else 1: a recurring job's)
        # may it have revoked one of them for this firing
        if len(live) >= (policies.max_concurrency or 1):
            lost = await self._lost([(h.firing_id, h.claim_token) for h in live])
            for h in live:
                if h.firing_id in lost and not h.zombie:
                    h.zombie = True
                    h.stop("revoked: a newer firing of its job took its place")
        cancelled = asyncio.Event()
        if ctx is not None:
            loop = asyncio.get_running_loop()

            def cancel_requested() -> None:  # from any thread, maybe after this wait
                with contextlib.suppress(RuntimeError):  # its loop is closed
                    loop.call_soon_threadsafe(cancelled.set)

            ctx.on_cancel(cancel_requested)
        while not cancelled.is_set():
            for h in self.of_job(job_id):
                if h.returned:  # a thread whose loop could not be told (it is gone)
                    self.ended(h)
            zombies = [h for h in self._jobs.get(job_id, ()) if h.zombie]
            if not zombies:
                return
            waits = [asyncio.ensure_future(w) for w in (cancelled.wait(), _ended(zombies[0]))]
            try:
                await asyncio.wait(waits, timeout=0.5, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()

    @contextlib.contextmanager
    def executing(self, claim: ClaimedFiring, stop: Callable[[str], None]) -> Iterator[Handler]:
        """Register a handler of ``claim`` as executing until :meth:`ended` is called for
        it (on the loop), which may be after this block exits: a thread given up at its
        timeout runs on, a zombie until it returns."""
        handler = Handler(claim.firing.job_id, claim.firing.id, claim.claim_token, stop)
        self._jobs.setdefault(handler.job_id, []).append(handler)
        try:
            yield handler
        finally:
            if not handler.ended.is_set():
                handler.zombie = True  # the attempt is over; its code still runs

    def ended(self, handler: Handler) -> None:
        """``handler`` stopped executing (its code returned, or its process is gone)."""
        handlers = self._jobs.get(handler.job_id, [])
        if handler in handlers:
            handlers.remove(handler)
        if not handlers:
            self._jobs.pop(handler.job_id, None)
        handler.ended.set()


async def _ended(handler: Handler) -> None:
    """Wait for ``handler.ended``; an Event first awaited on an older loop (a previous
    ``asyncio.run``) cannot be awaited on this one: then poll its ``returned`` flag."""
    try:
        await handler.ended.wait()
    except RuntimeError:
        while not handler.returned:
            await asyncio.sleep(0.05)
