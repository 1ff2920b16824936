"""One attempt of a claimed firing: run its handler, turn what happened into a
:class:`Completion` (succeeded, failed with or without a retry, cancelled), report it.

A sync handler runs in the worker's handler threads, an async one on the event loop,
a process-isolated one in a child process (worker/processes.py); ``timeout`` bounds all
three (a thread cannot be interrupted: its result is dropped, and it counts as executing
until it returns; a child process is killed). Every handler is registered with the
worker's :class:`Executing` while its code runs.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
import traceback
from datetime import timedelta
from functools import partial
from typing import Any, Literal

from cronwheel.domain.clock import Clock
from cronwheel.domain.error_text import ERROR_MAX, bound_error, error_summary
from cronwheel.domain.models import ClaimedFiring, Firing
from cronwheel.domain.policies import retry_backoff
from cronwheel.errors import CronwheelError
from cronwheel.signals import Cancel, Retry
from cronwheel.store.protocol import Completion
from cronwheel.worker.config import WorkerConfig, WorkerStats
from cronwheel.worker.context import Context
from cronwheel.worker.events import WorkerEvents
from cronwheel.worker.executing import Executing, Handler
from cronwheel.worker.hooks import AttemptHooks, AttemptScope
from cronwheel.worker.processes import HandlerError, ProcessRunner
from cronwheel.worker.registry import Isolation, TaskDef, TaskRegistry
from cronwheel.worker.threads import HandlerThreads


class Attempts:
    """Runs attempts for one worker (its registry, clock, events, stats and threads)."""

    def __init__(
        self,
        registry: TaskRegistry,
        clock: Clock,
        events: WorkerEvents,
        stats: WorkerStats,
        threads: HandlerThreads,
        rng: random.Random,
    ) -> None:
        self.registry = registry
        self.clock = clock
        self.events = events
        self.stats = stats
        self.threads = threads
        self.rng = rng
        self.executing = Executing(_nothing_lost)
        self.processes = ProcessRunner(kill_grace=timedelta(seconds=5))
        self.isolation: Literal["auto", "process"] = "auto"
        self.hooks: AttemptHooks | None = None  # worker/hooks.py: tracing plugs in here

    def isolate(self, config: WorkerConfig, executing: Executing) -> None:
        """The worker's isolation settings and its register of executing handlers."""
        self.executing = executing
        self.isolation = config.isolation
        modules = {t.fn.__module__ for t in map(self.registry.get, self.registry.names())}
        self.processes = ProcessRunner(
            kill_grace=config.kill_grace,
            modules=modules,
            app_module=self.registry.app_module,
            on_stopped=self.events.handler_stopped,
        )

    def isolation_of(self, task: TaskDef) -> Isolation:
        """Where ``task``'s handler runs: its own setting, else the worker's default."""
        if task.isolation is not None:
            return task.isolation
        if self.isolation == "process":
            return "process"
        return "loop" if task.is_async else "thread"

    def cancelled_before_call(self, claim: ClaimedFiring) -> Completion:
        """The outcome of a started firing whose cancel came before its handler was
        called: CANCELLED, the handler never called."""
        at = self.clock.now()
        return Completion(
            firing_id=claim.firing.id,
            claim_token=claim.claim_token,
            succeeded=False,
            started_at=at,
            finished_at=at,
            error="cancelled before its handler was called",
            cancelled=True,
        )

    async def run(self, claim: ClaimedFiring, ctx: Context) -> Completion:
        """Run the handler of one claimed firing; its outcome as a completion."""
        firing = claim.firing
        timeout = claim.policies.timeout
        timeout_s = None if timeout is None else timeout.total_seconds()
        started = self.clock.now()
        lateness_ms = (started - firing.scheduled_for).total_seconds() * 1000
        self.events.firing_started(firing, lateness_ms)
        scope = None if self.hooks is None else self.hooks.attempt_started(claim, ctx, lateness_ms)
        error: str | None = None
        failure: BaseException | None = None  # what ended it, for the hooks
        cancelled = False
        retry_after: timedelta | None = None
        try:
            await self._run_handler(claim, ctx, timeout_s, scope)
        except TimeoutError as exc:
            error, failure = f"timed out after {timeout_s} s", exc
            ctx.request_cancel()
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                if scope is not None:
                    scope.ended("interrupted", exc, None, None)
                raise  # the worker itself is stopping
            cancelled, error, failure = True, "cancelled: the handler was interrupted", exc
        except Cancel as exc:
            cancelled, error, failure = True, f"cancelled: {exc.reason}", exc
        except Retry as exc:
            error, retry_after, failure = f"retry requested: {exc.reason}", exc.after, exc
        except HandlerError as exc:  # raised in a child process: its traceback
            error, failure = exc.text, exc
        except CronwheelError as exc:
            error, failure = f"{type(exc).__name__}: {exc}", exc
        except Exception as exc:
            error, failure = traceback.format_exc()[-ERROR_MAX:], exc
        except BaseException as exc:
            if scope is not None:
                scope.ended("interrupted", exc, None, None)
            raise
        if error is not None:  # secrets out before it is written (or logged), then bounded
            error = bound_error(self.registry.redact(error))
        finished = self.clock.now()
        if cancelled:
            self.events.firing_cancelled(firing)
            if scope is not None:
                scope.ended("cancelled", failure, error, None)
            return Completion(
                firing_id=firing.id,
                claim_token=claim.claim_token,
                succeeded=False,
                cancelled=True,
                started_at=started,
                finished_at=finished,
                error=error,
            )
        if error is None:
            self.stats.succeeded += 1
            self.stats.lateness_ms.append(lateness_ms)
            self.events.firing_succeeded(
                firing, lateness_ms, (finished - started).total_seconds() * 1000
            )
            if scope is not None:
                scope.ended("succeeded", None, None, None)
            return Completion(
                firing_id=firing.id,
                claim_token=claim.claim_token,
                succeeded=True,
                started_at=started,
                finished_at=finished,
            )
        self.stats.failed += 1
        retry_at = None
        if firing.attempt < firing.max_attempts:
            p = claim.policies
            retry_at = finished + (
                retry_after
                if retry_after is not None
                else retry_backoff(
                    firing.attempt, base=p.retry_backoff, maximum=p.retry_backoff_max, rng=self.rng
                )
            )
        self.events.firing_failed(firing, retry_at, error_summary(error) or error)
        if scope is not None:
            scope.ended("failed" if retry_at is None else "retrying", failure, error, retry_at)
        return Completion(
            firing_id=firing.id,
            claim_token=claim.claim_token,
            succeeded=False,
            started_at=started,
            finished_at=finished,
            error=error,
            retry_at=retry_at,
        )

    async def _run_handler(
        self,
        claim: ClaimedFiring,
        ctx: Context,
        timeout_s: float | None,
        scope: AttemptScope | None = None,
    ) -> None:
        firing = claim.firing
        task = self.registry.get(firing.task)
        if self.isolation_of(task) == "process":
            entry = None
            if scope is not None and self.hooks is not None and self.hooks.child_entry:
                entry = (self.hooks.child_entry, scope.child_carrier())
            child = self.processes.attempt(task, ctx, firing, entry)
            with self.executing.executing(claim, child.stop) as running:
                try:
                    await child.run(timeout_s, claim.policies.cancel_grace.total_seconds())
                finally:
                    self.executing.ended(running)  # its process is gone (reaped)
            return
        with self.executing.executing(claim, lambda _: ctx.request_cancel()) as running:
            await self._run_in_process(task, firing, ctx, timeout_s, running, scope is not None)

    async def _run_in_process(
        self,
        task: TaskDef,
        firing: Firing,
        ctx: Context,
        timeout_s: float | None,
        running: Handler,
        in_context: bool = False,
    ) -> None:
        """Run the task in this process; an async handler is cancelled — once — when
        cancellation is requested, when it times out, or when the worker stops (a shell
        task reads a second cancel as "kill now", so it must not get one by accident).
        ``running`` is marked ended when the handler's code has really returned. With
        ``in_context`` a sync handler runs in a copy of the current context variables
        (the attempt's hooks set them: worker/hooks.py)."""
        loop = asyncio.get_running_loop()
        handler: asyncio.Future[Any]
        cancelled = False

        def stop() -> None:
            nonlocal cancelled
            if task.is_async and not cancelled and not handler.done():
                cancelled = True
                handler.cancel()

        if task.is_async:
            handler = asyncio.ensure_future(task.fn(ctx, *firing.args, **firing.kwargs))
            handler.add_done_callback(lambda _: self.executing.ended(running))

            def from_any_thread() -> None:
                loop.call_soon_threadsafe(stop)

            ctx.on_cancel(from_any_thread)
        else:
            call = partial(task.fn, ctx, *firing.args, **firing.kwargs)
            if in_context:
                call = partial(contextvars.copy_context().run, call)
            handler = self.threads.submit(
                partial(_then, call, running), after=partial(self.executing.ended, running)
            )
            if timeout_s is None:
                # a thread cannot be interrupted, so there is nothing to shield it from;
                # if the worker stops, the future is dropped and the thread runs on
                await handler
                return
        try:
            await asyncio.wait_for(asyncio.shield(handler), timeout_s)
        finally:
            stop()


async def _nothing_lost(_claims: Any) -> set[Any]:
    """Before :meth:`Attempts.isolate`: no store to ask."""
    return set()


def _then(call: Any, running: Handler) -> Any:
    """``call()`` on a handler thread, then flag ``running`` as returned, whatever
    happened (a flag ``Executing`` reads even if this loop is gone: a worker driven by one
    ``asyncio.run`` per ``drain_once``); the handler threads' delivery then marks it
    ended on the loop (``after``)."""
    try:
        return call()
    finally:
        running.returned = True
