"""Waiting on the event loop for whichever comes first."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
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


def store_backoff() -> Iterator[float]:
    """The pauses between tries of a call while the store is unavailable (a process
    started beside its database, or during a failover): 0.2 s, doubling up to 5 s."""
    delay = 0.2
    while True:
        yield delay
        delay = min(delay * 2, 5.0)


async def until_available(
    call: Callable[[], Awaitable[Any]],
    stop: asyncio.Event,
    unavailable: Callable[[str, float], None],
) -> bool:
    """``call`` retried, after each pause of ``store_backoff``, while the store is
    unavailable (a worker waits for its store instead of exiting); False when ``stop``
    came first."""
    pauses = store_backoff()
    while not stop.is_set():
        try:
            await call()
            return True
        except StoreUnavailableError as exc:
            delay = next(pauses)
            unavailable(str(exc), delay)
            await wait_any([stop.wait()], delay)
    return False
