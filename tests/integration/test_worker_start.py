"""A worker started while its store is unavailable (its database still starting, a
failover, a pooler's queue full) waits for the store instead of exiting: it registers
once the store answers, then claims as usual; a stop while it waits ends it cleanly.

Real time, on SQLite: ``register_node`` is made to fail a given number of times.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from cronwheel.app import App
from cronwheel.domain.clock import SystemClock
from cronwheel.domain.models import JobSpec
from cronwheel.domain.schedules import every
from cronwheel.errors import StoreUnavailableError
from cronwheel.store.sqlite import SqliteStore
from cronwheel.worker.worker import Worker
from tests.integration.test_events import Recorder


@pytest.fixture
def store(tmp_path: Any) -> Any:
    s = SqliteStore(str(tmp_path / "start.db"))
    s.migrate()
    yield s
    s.close()


def _failing_register(store: SqliteStore, failures: int) -> list[float]:
    """``register_node`` raises for its first ``failures`` calls; returns the calls'
    monotonic instants."""
    real = store.register_node
    calls: list[float] = []

    def register(node: Any) -> None:
        calls.append(time.monotonic())
        if len(calls) <= failures:
            raise StoreUnavailableError("server closed the connection unexpectedly")
        real(node)

    store.register_node = register  # type: ignore[method-assign]
    return calls


def _run_until(worker: Worker, done: Callable[[], bool]) -> float:
    """Run the worker until ``done()`` (20 s at most), then stop it; how long the stop
    took."""

    async def scenario() -> float:
        stop = asyncio.Event()
        runner = asyncio.create_task(worker.run(stop))
        deadline = time.monotonic() + 20
        while not done() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        stop.set()
        began = time.monotonic()
        await asyncio.wait_for(runner, 10)
        return time.monotonic() - began

    return asyncio.run(scenario())


def test_a_worker_waits_for_its_store_then_registers_and_runs(store: SqliteStore) -> None:
    app = App("sqlite://")
    app.use_store(store)
    ran: list[str] = []

    @app.task
    def noted(ctx: Any) -> None:
        ran.append(ctx.job)

    store.create_jobs([(JobSpec(name="now", task="noted", schedule=every(3600)), None)])
    store.add_firings("default", "now", [store.now() - timedelta(seconds=1)], note="test")
    calls = _failing_register(store, failures=3)
    sink = Recorder()
    worker = Worker(store, app.registry, SystemClock(), events=sink)

    _run_until(worker, lambda: bool(ran))
    assert ran == ["now"]
    assert len(calls) == 4
    unavailable = sink.named("store_unavailable")
    assert [k or a[1] for a, k in unavailable] == [0.2, 0.4, 0.8]  # doubling pauses
    # the pauses are waited: 0.2 + 0.4 + 0.8 s between the first call and the fourth
    assert calls[3] - calls[0] >= 1.4
    assert len(sink.named("worker_started")) == 1
    assert [n.id for n in store.list_nodes()] == []  # removed on the way out


def test_a_stop_while_the_store_is_unavailable_ends_the_worker(store: SqliteStore) -> None:
    app = App("sqlite://")
    app.use_store(store)
    calls = _failing_register(store, failures=10**6)
    sink = Recorder()
    worker = Worker(store, app.registry, SystemClock(), events=sink)

    took = _run_until(worker, lambda: len(calls) >= 2)
    assert took < 5  # the pause is cut short by the stop, not waited out
    assert sink.named("worker_started") == []
    assert len(sink.named("worker_stopped")) == 1
