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


async def _hold(slots: Slots, release: asyncio.Event) -> None:
    async with slots:
        await release.wait()


async def _enter(slots: Slots, seen: list[str], name: str) -> None:
    async with slots:
        seen.append(name)


async def _one_held_two_waiting() -> tuple[Slots, list[str], asyncio.Event, list[Any]]:
    """One slot, held until ``release`` is set; waiters "a" then "b" queued for it."""
    slots = Slots(1)
    seen: list[str] = []
    release = asyncio.Event()
    h = asyncio.create_task(_hold(slots, release))
    await asyncio.sleep(0)
    a = asyncio.create_task(_enter(slots, seen, "a"))
    b = asyncio.create_task(_enter(slots, seen, "b"))
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


def test_a_crowd_waiting_for_its_instant_wakes_only_as_many_as_there_are_slots() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        slots = Slots(3)
        entered: list[tuple[int, float]] = []
        gate = asyncio.Event()
        start = loop.time()

        async def held(i: int) -> None:
            async with slots.after(0.05):
                entered.append((i, loop.time()))
                await gate.wait()

        timers = 0
        call_at = loop.call_at

        def counting_call_at(*args: Any, **kw: Any) -> asyncio.TimerHandle:
            nonlocal timers
            timers += 1
            return call_at(*args, **kw)

        loop.call_at = counting_call_at  # type: ignore[method-assign]
        tasks = [asyncio.create_task(held(i)) for i in range(500)]
        await asyncio.sleep(0)
        loop.call_at = call_at  # type: ignore[method-assign]
        assert timers == 1  # one timer for the crowd, not one a waiter (each a wake-up)
        assert entered == [] and slots.free == 3  # waiting for the instant holds no slot
        while len(entered) < 3:
            await asyncio.sleep(0.01)
        for _ in range(5):
            await asyncio.sleep(0)
        assert [i for i, _ in entered] == [0, 1, 2]
        assert all(at >= start + 0.05 - 1e-3 for _, at in entered)  # never before it
        awake = sum(1 for t in tasks if t.done())
        assert awake == 0 and slots.free == 0
        gate.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        assert [i for i, _ in entered] == list(range(500))  # in order
        assert slots.free == 3

    asyncio.run(scenario())


def test_waits_for_instants_join_the_queue_in_the_order_of_their_instants() -> None:
    async def scenario() -> list[str]:
        slots = Slots(1)
        seen: list[str] = []
        release = asyncio.Event()

        async def timed(name: str, delay: float) -> None:
            async with slots.after(delay):
                seen.append(name)

        h = asyncio.create_task(_hold(slots, release))
        await asyncio.sleep(0)
        later = asyncio.create_task(timed("later", 0.06))
        sooner = asyncio.create_task(timed("sooner", 0.02))  # an earlier timer, set after
        first = asyncio.create_task(_enter(slots, seen, "queued first"))
        await asyncio.sleep(0.1)  # both instants passed: all three wait for the slot
        assert seen == []
        release.set()
        await asyncio.wait_for(asyncio.gather(h, later, sooner, first), 5)
        assert slots.free == 1
        return seen

    assert asyncio.run(scenario()) == ["queued first", "sooner", "later"]


def test_a_wait_for_an_instant_neither_blocks_others_nor_keeps_a_slot_when_cancelled() -> None:
    async def scenario() -> None:
        slots = Slots(1)
        seen: list[str] = []

        async def timed() -> None:
            async with slots.after(0.03):
                seen.append("timed")

        t = asyncio.create_task(timed())
        await asyncio.sleep(0)
        assert slots.take(1) == 1  # before its instant the slot is anyone's
        slots.give(1)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        await asyncio.sleep(0.05)  # its instant passes: the cancelled wait takes nothing
        assert seen == [] and slots.free == 1
        async with slots.after(0.0):  # no delay: a plain acquire
            assert slots.free == 0
        assert slots.free == 1

    asyncio.run(scenario())
