"""worker/threads.py: sync handlers on the worker's threads, their results delivered to
the loop in batches, each call's ``after`` in the same delivery."""

from __future__ import annotations

import asyncio
import threading
from functools import partial

import pytest

from cronwheel.worker.threads import HandlerThreads


def _gated(gate: threading.Event, i: int) -> int:
    gate.wait(5)
    return i


def test_after_runs_on_the_loop_before_the_result_and_without_a_wake_up_of_its_own() -> None:
    threads = HandlerThreads(4)
    seen: list[tuple[str, int, bool]] = []
    wakes = 0

    async def scenario() -> list[int]:
        nonlocal wakes
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()
        plain = loop.call_soon_threadsafe

        def counting(*args: object, **kwargs: object) -> asyncio.Handle:
            nonlocal wakes
            wakes += 1
            return plain(*args, **kwargs)  # type: ignore[arg-type]

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        gate = threading.Event()
        futures = []

        def after(i: int) -> None:
            seen.append(("after", i, threading.get_ident() == loop_thread))

        for i in range(4):
            futures.append(threads.submit(partial(_gated, gate, i), after=partial(after, i)))
        await asyncio.sleep(0.05)  # the four calls wait at the gate
        gate.set()
        results = []
        for f in futures:
            results.append(await f)
            seen.append(("result", results[-1], True))
        return results

    try:
        assert asyncio.run(scenario()) == [0, 1, 2, 3]
    finally:
        threads.shutdown()
    afters = [s for s in seen if s[0] == "after"]
    assert sorted(i for _, i, _ in afters) == [0, 1, 2, 3]
    assert all(on_loop for _, _, on_loop in afters)  # called on the loop's thread
    for i in range(4):  # each call's after came before its result was seen
        assert seen.index(("after", i, True)) < seen.index(("result", i, True))
    # one wake-up per delivery, and four calls need at most four: none for the afters
    assert 1 <= wakes <= 4


def test_after_runs_when_the_awaiting_coroutine_gave_up() -> None:
    """A handler that timed out still runs on its thread; when it returns, its ``after``
    (the worker's "this handler stopped executing") is called all the same."""
    threads = HandlerThreads(1)
    ended = threading.Event()

    async def scenario() -> None:
        release = threading.Event()
        future = threads.submit(lambda: release.wait(5), after=ended.set)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(future), 0.01)
        assert not ended.is_set()
        future.cancel()  # given up
        release.set()
        for _ in range(500):  # bounded: the thread returns at once
            if ended.is_set():
                return
            await asyncio.sleep(0.01)

    try:
        asyncio.run(scenario())
    finally:
        threads.shutdown()
    assert ended.is_set()


def test_a_call_that_raises_hands_its_exception_to_the_awaiting_coroutine() -> None:
    threads = HandlerThreads(1)
    ran_after: list[bool] = []

    def boom() -> None:
        raise ValueError("boom")

    async def scenario() -> None:
        with pytest.raises(ValueError, match="boom"):
            await threads.submit(boom, after=lambda: ran_after.append(True))

    try:
        asyncio.run(scenario())
    finally:
        threads.shutdown()
    assert ran_after == [True]
