"""The pauses of a process that waits for its store (worker/waits.py ``store_backoff``),
shared by the worker's registration and the scheduler's start (node.py)."""

from __future__ import annotations

import threading
from itertools import islice

from cronwheel import node
from cronwheel.errors import StoreUnavailableError
from cronwheel.worker.waits import store_backoff


def test_the_pause_doubles_from_a_fifth_of_a_second_up_to_five_seconds() -> None:
    assert list(islice(store_backoff(), 8)) == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]


def test_the_scheduler_retries_its_store_with_those_pauses() -> None:
    waited: list[float] = []

    class Stop(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            assert timeout is not None
            waited.append(timeout)
            return False

    calls: list[int] = []

    def call() -> None:
        calls.append(1)
        if len(calls) < 4:
            raise StoreUnavailableError("down", field="store")

    node._retry_store(call, Stop())
    assert len(calls) == 4
    assert waited == [0.2, 0.4, 0.8]
