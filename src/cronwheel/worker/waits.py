"""Waiting on the event loop for whichever comes first."""

from __future__ import annotations

import asyncio
from typing import Any


async def wait_any(aws: list[Any], timeout: float) -> None:
    """Until one of ``aws`` is done or ``timeout`` seconds pass; the others are cancelled."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
