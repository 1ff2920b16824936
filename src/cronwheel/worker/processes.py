"""Process isolation: an attempt's handler in a child process the worker can kill.

Each attempt of a task with ``isolation="process"`` (or any Python task of a worker
started with ``--isolation process``) runs in a fresh child forked from a forkserver
(``multiprocessing``'s, which imports the worker's task modules once, so a child costs
a fork, not an interpreter start). The child imports the task's module and runs the
handler by task name (``worker/child.py``); its Context works there
(``cancel_requested`` and ``wait_cancelled`` through the pipe, ``logger``, the
idempotency key).

Stopping an attempt: SIGTERM to the child's process group, then SIGKILL after the
worker's ``kill_grace`` if it still runs. An attempt is stopped when

- its ``timeout`` passes (the attempt fails: timed out, retried as usual);
- its firing's cancel was requested and the job's ``cancel_grace`` passed since the
  worker saw the request (the handler was told at once: ``ctx.cancel_requested``);
- the store revoked its claim (``terminate_other``, the reaper after ``cancel_grace``,
  a lost lease): the worker stops it as soon as it learns it.

The attempt ends when the child is gone (reaped), never before: a stopped handler is
not executing any more when its firing is reported. A child whose worker goes away
exits by itself (its pipe closes).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from cronwheel.domain.models import Firing
from cronwheel.errors import CronwheelError
from cronwheel.signals import Cancel, Retry
from cronwheel.worker.child import child_main
from cronwheel.worker.context import Context
from cronwheel.worker.hooks import ChildEntry
from cronwheel.worker.registry import TaskDef

# the hooks' entry of a child and the context it continues (worker/hooks.py)
Entry = tuple[ChildEntry, dict[str, str]]

# called once a stopped child is gone: (firing, why it was stopped, the last signal
# sent, the wall-clock instant it was found gone)
OnStopped = Callable[[Firing, str, str, float], None]


class HandlerProcessDied(CronwheelError):
    """The handler's process ended without reporting (a crash, or killed from outside)."""

    code = "handler_process_died"


class HandlerError(Exception):
    """The handler raised in its process; ``text`` is its traceback (or message)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _context() -> Any:
    return multiprocessing.get_context("forkserver")


class ProcessRunner:
    """Starts and stops the child processes of one worker's attempts."""

    def __init__(
        self,
        *,
        kill_grace: timedelta,
        modules: Iterable[str | None] = (),
        app_module: str | None = None,
        on_stopped: OnStopped | None = None,
    ) -> None:
        self.kill_grace = kill_grace.total_seconds()
        self.app_module = app_module
        self.on_stopped = on_stopped
        self.children: set[ChildAttempt] = set()
        # the forkserver (one per worker process, started on first use) imports these
        # once: each child then starts with the task modules already loaded
        named = {m for m in (*modules, app_module) if isinstance(m, str) and m != "__main__"}
        preload = ["cronwheel.worker.child", *sorted(named)]
        with contextlib.suppress(ValueError, RuntimeError):
            _context().set_forkserver_preload(preload)

    def attempt(
        self, task: TaskDef, ctx: Context, firing: Firing, entry: Entry | None = None
    ) -> ChildAttempt:
        return ChildAttempt(self, task, ctx, firing, entry)

    def shutdown(self) -> None:
        """SIGKILL every child still running (the worker is exiting)."""
        for child in list(self.children):
            child.kill_now()


class ChildAttempt:
    """One attempt's child process: :meth:`run` it, :meth:`stop` it from anywhere on
    the loop (idempotent)."""

    def __init__(
        self,
        runner: ProcessRunner,
        task: TaskDef,
        ctx: Context,
        firing: Firing,
        entry: Entry | None = None,
    ) -> None:
        self.runner = runner
        self.task = task
        self.ctx = ctx
        self.firing = firing
        self.entry = entry
        self.stopping: str | None = None
        self.last_signal = ""
        self._proc: Any = None
        self._conn: Any = None
        self._exited = False
        self._timers: list[asyncio.TimerHandle] = []

    async def run(self, timeout_s: float | None, cancel_grace_s: float) -> None:
        """Run the handler in a child; return when it succeeded, raise what it raised
        (Retry, Cancel, :class:`HandlerError`), TimeoutError when stopped at its timeout,
        Cancel when stopped otherwise, :class:`HandlerProcessDied` on a crash."""
        loop = asyncio.get_running_loop()
        mp = _context()
        parent, child = mp.Pipe()
        self._conn = parent
        modules = [m for m in (self.task.fn.__module__, self.runner.app_module) if m]
        args = (
            list(dict.fromkeys(modules)),
            self.task.name,
            self.firing,
            self.ctx.visible,  # the child's handler sees the ids users see
            self.ctx.claim_token,
            self.ctx.worker_id,
            child,
            self.entry,
        )
        proc = mp.Process(target=child_main, args=args, name=f"cronwheel-attempt-{self.firing.id}")
        exited: asyncio.Future[None] = loop.create_future()

        def on_exit() -> None:
            if not exited.done():
                exited.set_result(None)

        try:
            await loop.run_in_executor(None, proc.start)
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        self._proc = proc
        self.runner.children.add(self)
        try:
            loop.add_reader(proc.sentinel, on_exit)
            if timeout_s is not None:
                self._timers.append(loop.call_later(timeout_s, self.stop, "timeout"))

            def cancel_requested() -> None:  # from any thread
                loop.call_soon_threadsafe(self._cancel_requested, cancel_grace_s)

            self.ctx.on_cancel(cancel_requested)
            if self.stopping is not None:  # stopped while it was starting
                self._terminate()
            await exited
            self._exited = True
        finally:
            loop.remove_reader(proc.sentinel)
            for timer in self._timers:
                timer.cancel()
            if not self._exited:  # the attempt itself was cancelled: nothing outlives it
                self.kill_now()
            await loop.run_in_executor(None, proc.join)
            self.runner.children.discard(self)
        gone_at = time.time()
        outcome = None
        with contextlib.suppress(EOFError, OSError):
            if parent.poll():
                outcome = parent.recv()
        parent.close()
        if self.stopping is not None and self.runner.on_stopped is not None:
            self.runner.on_stopped(self.firing, self.stopping, self.last_signal, gone_at)
        self._raise(outcome, proc.exitcode)

    def _raise(self, outcome: tuple[str, Any] | None, exitcode: int | None) -> None:
        if outcome is not None:
            kind, value = outcome
            if kind == "ok":
                return
            if kind == "retry":
                after, reason = value
                raise Retry(after=after, reason=reason)
            if kind == "cancel":
                raise Cancel(str(value))
            raise HandlerError(str(value))
        if self.stopping == "timeout":
            raise TimeoutError
        if self.stopping is not None:
            raise Cancel(f"its process was stopped ({self.stopping}; {self.last_signal})")
        if exitcode is not None and exitcode < 0:
            try:
                how = f"was killed by {signal.Signals(-exitcode).name}"
            except ValueError:
                how = f"was killed by signal {-exitcode}"
        else:
            how = f"exited with code {exitcode} without reporting"
        raise HandlerProcessDied(f"the handler's process {how}")

    def _cancel_requested(self, grace_s: float) -> None:
        if self._exited or self._conn is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self._conn.send("cancel")
        loop = asyncio.get_running_loop()
        self._timers.append(loop.call_later(grace_s, self.stop, "cancel grace passed"))

    def stop(self, reason: str) -> None:
        """SIGTERM the child now, SIGKILL it after the kill grace (once; on the loop)."""
        if self.stopping is not None or self._exited:
            return
        self.stopping = reason
        if self._proc is not None:
            self._terminate()

    def _terminate(self) -> None:
        self._signal(signal.SIGTERM)
        loop = asyncio.get_running_loop()
        self._timers.append(loop.call_later(self.runner.kill_grace, self._signal, signal.SIGKILL))

    def kill_now(self) -> None:
        if self._proc is not None and not self._exited:
            self.stopping = self.stopping or "worker stopping"
            self._signal(signal.SIGKILL)

    def _signal(self, sig: signal.Signals) -> None:
        if self._exited or self._proc is None or self._proc.pid is None:
            return
        self.last_signal = sig.name
        pid = self._proc.pid
        try:
            os.killpg(pid, sig)  # the child and what it started
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)  # not yet its own group leader
