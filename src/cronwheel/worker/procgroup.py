"""Process groups: a shell task's command and everything it started, stopped as one
(SIGTERM, a grace, then SIGKILL, and the group waited for until it is gone)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def group_alive(pgid: int) -> bool:
    """A process of the group still runs. Zombies don't count: orphans are reaped by init,
    which in a container may take a while (or forever), so on Linux /proc is consulted."""
    if not os.path.isdir("/proc/self/task"):
        return _signal_group(pgid, 0)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError):
            state, _, pgrp = stat.read_text().rsplit(")", 1)[1].split(maxsplit=3)[:3]
            if int(pgrp) == pgid and state not in {"Z", "X"}:
                return True
    return False


async def stop_group(proc: asyncio.subprocess.Process, grace: float) -> None:
    """SIGTERM the process group, wait up to ``grace`` for all of it, then SIGKILL."""
    pgid = proc.pid
    try:
        if _signal_group(pgid, signal.SIGTERM):
            loop = asyncio.get_running_loop()
            deadline = loop.time() + grace
            while loop.time() < deadline:
                if proc.returncode is not None and not group_alive(pgid):
                    break
                await asyncio.sleep(0.05)
    finally:  # also when cancelled again while waiting: no grace left, but reap it
        _signal_group(pgid, signal.SIGKILL)
        await proc.wait()
        # the rest of the group (grandchildren) dies as the kernel delivers the SIGKILL:
        # wait for it (bounded), so that a stopped task's processes are gone when this
        # returns, not shortly after
        await _group_gone(pgid, _KILL_WAIT_S)


_KILL_WAIT_S = 2.0


async def _group_gone(pgid: int, within: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while group_alive(pgid) and loop.time() < deadline:
        await asyncio.sleep(0.01)
