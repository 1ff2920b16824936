"""Where the API runs an endpoint's store call (api/calls.py ``store_call``): in the
process's store threads, seeing the request's context, or on the loop when the app
serves its store that way."""

from __future__ import annotations

import asyncio
import os
import threading
from contextvars import ContextVar

import pytest

from cronwheel.api import calls
from tests.forked import exit_code, fork

REQUEST: ContextVar[str] = ContextVar("request", default="none")


def where(tag: str) -> tuple[str, str, str]:
    return threading.current_thread().name, REQUEST.get(), tag


def test_a_threaded_store_call_runs_off_the_loop_with_the_requests_context() -> None:
    async def request(i: int) -> tuple[str, str, str, str]:
        REQUEST.set(f"r{i}")
        loop_thread = threading.current_thread().name
        thread, seen, tag = await calls.store_call(where, tag=f"t{i}")
        return loop_thread, thread, seen, tag

    async def main() -> list[tuple[str, str, str, str]]:
        return await asyncio.gather(*(request(i) for i in range(20)))

    for i, (loop_thread, thread, seen, tag) in enumerate(asyncio.run(main())):
        assert thread != loop_thread
        assert thread.startswith("cronwheel-api-store")
        assert (seen, tag) == (f"r{i}", f"t{i}")


def test_a_store_call_on_the_loop_runs_in_the_loops_thread() -> None:
    async def main() -> tuple[str, str]:
        token = calls._ON_LOOP.set(True)
        try:
            thread, _, _ = await calls.store_call(where, tag="x")
        finally:
            calls._ON_LOOP.reset(token)
        return threading.current_thread().name, thread

    loop_thread, thread = asyncio.run(main())
    assert thread == loop_thread


def test_an_exception_of_a_threaded_store_call_reaches_the_request() -> None:
    def fails() -> None:
        raise LookupError("no such firing")

    async def main() -> None:
        await calls.store_call(fails)

    with pytest.raises(LookupError, match="no such firing"):
        asyncio.run(main())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_process_forked_after_a_store_call_makes_its_own_threads() -> None:
    """``cronwheel api --workers N`` forks its serving processes: a child must not wait
    on the threads of a pool its parent made (they do not exist in the child)."""
    asyncio.run(calls.store_call(where, tag="parent"))

    def child() -> bool:  # its store call comes back
        _, _, tag = asyncio.run(asyncio.wait_for(calls.store_call(where, tag="c"), 5))
        return tag == "c"

    assert exit_code(fork(child)) == 0
