"""The threads that run sync handlers.

A ``ThreadPoolExecutor`` costs two futures, a chained callback and a cross-thread
wake-up of the event loop per call. Here each call is one C-level queue put and get,
and results come back in batches: a handler thread appends its outcome to a deque and
wakes the loop only if no wake-up is already pending, so under load one wake-up
delivers many results; a call's ``after`` (the worker marks the handler ended) runs
on the loop in that same delivery, not in a wake-up of its own. Same concurrency:
``size`` threads, each running one handler at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

After = Callable[[], None] | None
_Call = tuple[Callable[[], Any], "asyncio.Future[Any]", After]


class HandlerThreads:
    def __init__(self, size: int, *, name: str = "cronwheel-task") -> None:
        self._size = size
        self._name = name
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._done: deque[tuple[asyncio.Future[Any], bool, Any, After]] = deque()
        self._wake_pending = threading.Event()
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def _start(self) -> None:
        for i in range(self._size):
            t = threading.Thread(target=self._serve, name=f"{self._name}_{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def submit(self, call: Callable[[], Any], after: After = None) -> asyncio.Future[Any]:
        """Run ``call`` on a handler thread; the returned future resolves on the loop,
        where ``after`` is called first once ``call`` returned (even if the future was
        given up: a timeout), unless that loop is closed."""
        loop = asyncio.get_running_loop()
        if not self._threads:
            self._start()
        self._loop = loop  # results are delivered to the loop of the latest submission
        future: asyncio.Future[Any] = loop.create_future()
        self._calls.put((call, future, after))
        return future

    def _serve(self) -> None:
        while True:
            item = self._calls.get()
            if item is None:
                return
            call, future, after = item
            try:
                outcome: tuple[asyncio.Future[Any], bool, Any, After] = (
                    future,
                    True,
                    call(),
                    after,
                )
            except BaseException as exc:  # handed to the awaiting coroutine
                outcome = (future, False, exc, after)
            self._done.append(outcome)
            if not self._wake_pending.is_set():
                self._wake_pending.set()
                assert self._loop is not None
                with contextlib.suppress(RuntimeError):  # the loop is closed: shutting down
                    self._loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        self._wake_pending.clear()
        while self._done:
            future, ok, value, after = self._done.popleft()
            if future.get_loop().is_closed():
                continue  # its loop ended (a worker driven by one asyncio.run per drain)
            if after is not None:
                after()
            if future.done():
                continue  # the awaiting coroutine gave up (timeout, stop)
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    def shutdown(self) -> None:
        for _ in self._threads:
            self._calls.put(None)
