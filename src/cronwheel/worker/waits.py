"""Waiting on the event loop for whichever comes first."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from cronwheel.errors import StoreUnavailableError


async def wait_any(aws: list[Any], timeout: float) -> None:
    """Until one of ``aws`` is done or ``timeout`` seconds pass; the others are cancelled."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()


async def until_available(
    call: Callable[[], Awaitable[Any]],
    stop: asyncio.Event,
    unavailable: Callable[[str, float], None],
) -> bool:
    """``call`` retried, with a doubling pause up to 5 s, while the store is unavailable
    (a worker started beside its database, or during a failover, waits for it instead
    of exiting); False when ``stop`` came first."""
    delay = 0.2
    while not stop.is_set():
        try:
            await call()
            return True
        except StoreUnavailableError as exc:
            unavailable(str(exc), delay)
            await wait_any([stop.wait()], delay)
            delay = min(delay * 2, 5.0)
    return False
