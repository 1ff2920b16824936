"""The worker's concurrency gate: at most n holders, FIFO, cancellation-safe."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cronwheel.worker.slots import Slots


def test_at_most_n_hold_a_slot_and_waiters_are_served_in_order() -> None:
    async def scenario() -> tuple[int, list[int]]:
        slots = Slots(3)
        holding, peak, order = 0, 0, []
        gates = [asyncio.Event() for _ in range(10)]

        async def job(i: int) -> None:
            nonlocal holding, peak
            async with slots:
                order.append(i)
                holding += 1
                peak = max(peak, holding)
                await gates[i].wait()
                holding -= 1

        tasks = [asyncio.create_task(job(i)) for i in range(10)]
        await asyncio.sleep(0)
        assert order == [0, 1, 2] and slots.free == 0
        for i in (1, 0, 2, 3, 4, 5, 6, 7, 8, 9):  # release out of order
            gates[i].set()
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        assert slots.free == 3
        return peak, order

    peak, order = asyncio.run(scenario())
    assert peak == 3
    assert order == list(range(10))  # first come, first served


async def _one_held_two_waiting() -> tuple[Slots, list[str], asyncio.Event, list[Any]]:
    """One slot, held until ``release`` is set; waiters "a" then "b" queued for it."""
    slots = Slots(1)
    seen: list[str] = []
    release = asyncio.Event()

    async def holder() -> None:
        async with slots:
            await release.wait()

    async def waiter(name: str) -> None:
        async with slots:
            seen.append(name)

    h = asyncio.create_task(holder())
    await asyncio.sleep(0)
    a = asyncio.create_task(waiter("a"))
    b = asyncio.create_task(waiter("b"))
    await asyncio.sleep(0)
    return slots, seen, release, [h, a, b]


def test_a_cancelled_waiter_does_not_take_or_lose_a_slot() -> None:
    async def scenario() -> list[str]:
        slots, seen, release, (h, a, b) = await _one_held_two_waiting()
        a.cancel()  # while waiting
        release.set()
        await asyncio.wait_for(asyncio.gather(h, b), 5)
        with pytest.raises(asyncio.CancelledError):
            await a
        assert slots.free == 1
        return seen

    assert asyncio.run(scenario()) == ["b"]


def test_a_waiter_cancelled_after_being_handed_a_slot_passes_it_on() -> None:
    async def scenario() -> list[str]:
        slots, seen, release, (h, a, b) = await _one_held_two_waiting()
        release.set()
        await asyncio.sleep(0)  # the holder runs: its exit hands the slot to "a"...
        assert h.done() and not a.done()
        a.cancel()  # ...which is cancelled before it runs
        await asyncio.wait_for(asyncio.gather(a, b, return_exceptions=True), 5)
        assert slots.free == 1
        return seen

    assert asyncio.run(scenario()) == ["b"]


def test_slots_need_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Slots(0)
