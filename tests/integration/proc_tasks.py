"""Tasks the process-isolation tests run in child processes (importable by name).

Each writes what it saw to the file named by its ``out`` argument (one JSON object), so
the test reads what happened inside the child.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

from cronwheel import App, Context
from cronwheel.signals import Cancel, Retry
from tests.integration import proc_helpers

app = App("memory://")


def _write(out: str, **fields: Any) -> None:
    with open(out, "a") as f:
        f.write(json.dumps(fields) + "\n")


@app.task(isolation="process")
def report(ctx: Context, out: str) -> None:
    """The Context as the child sees it."""
    ctx.logger.info("hello from the child")
    _write(
        out,
        pid=os.getpid(),
        key=ctx.idempotency_key,
        firing_id=ctx.firing_id,
        attempt=ctx.attempt,
        job=ctx.job,
        cancel_requested=ctx.cancel_requested,
    )


@app.task(isolation="process")
async def areport(ctx: Context, out: str) -> None:
    _write(out, pid=os.getpid(), key=ctx.idempotency_key)


@app.task(isolation="process")
def cooperative(ctx: Context, out: str) -> None:
    """Waits for its cancel, then honours it."""
    _write(out, phase="start", pid=os.getpid())
    if ctx.wait_cancelled(60):
        _write(out, phase="saw_cancel", cancel_requested=ctx.cancel_requested)
        raise Cancel("asked to stop")


@app.task(isolation="process")
def stubborn(ctx: Context, out: str, ignore_term: bool = False) -> None:
    """Ignores its cancel (and SIGTERM when told); sleeps a minute."""
    if ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _write(out, phase="start", pid=os.getpid(), at=time.time())
    time.sleep(60)
    _write(out, phase="done")


@app.task(isolation="process")
def crash(ctx: Context, out: str) -> None:
    _write(out, phase="start", pid=os.getpid())
    os.kill(os.getpid(), signal.SIGKILL)


@app.task(isolation="process")
def explode(ctx: Context) -> None:
    raise ValueError("boom in the child")


@app.task(isolation="process")
def again(ctx: Context) -> None:
    raise Retry(after=7, reason="not yet")


@app.task
def plain(ctx: Context, out: str) -> None:
    """No isolation of its own: the worker's default decides."""
    _write(out, pid=os.getpid())


@app.task
def overrun(ctx: Context, out: str, seconds: float = 1.5) -> None:
    """A thread handler that runs past its timeout (a thread cannot be interrupted)."""
    _write(out, phase="start", attempt=ctx.attempt, at=time.time())
    time.sleep(seconds)
    _write(out, phase="end", attempt=ctx.attempt, at=time.time())


@app.task(isolation="process")
def loud(ctx: Context) -> None:
    """A reason larger than any pipe buffer."""
    raise Cancel("x" * 1_000_000)


@app.task
async def adeaf(ctx: Context, out: str, seconds: float = 1.2) -> None:
    """An async handler that swallows its cancellation and runs on (loop isolation)."""
    import asyncio

    _write(out, phase="start", attempt=ctx.attempt, at=time.time())
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            await asyncio.sleep(end - time.monotonic())
        except asyncio.CancelledError:
            continue  # deaf to it
    _write(out, phase="end", attempt=ctx.attempt, at=time.time())


# registered here, defined in a module with no App: the child finds it through the
# app's module (``TaskRegistry.app_module``, set by ``cronwheel worker MODULE:APP``)
app.task(name="borrowed", isolation="process")(proc_helpers.borrowed)
