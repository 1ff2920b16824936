from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronwheel.app import App
from cronwheel.dispatch.dispatcher import Dispatcher, DispatcherConfig
from cronwheel.domain.clock import FakeClock
from cronwheel.store.sqlite import SqliteStore
from cronwheel.worker.worker import Worker, WorkerConfig

T0 = datetime(2026, 3, 27, 23, 0, tzinfo=UTC)


@dataclass
class Rig:
    """Dispatcher(s) + worker + store on one FakeClock: time moves only when told."""

    clock: FakeClock
    store: SqliteStore
    app: App
    path: str
    calls: list[dict[str, Any]] = field(default_factory=list)
    others: list[SqliteStore] = field(default_factory=list)

    def dispatcher(
        self, holder: str = "node-a", *, events: Any = None, **config: Any
    ) -> Dispatcher:
        store = SqliteStore(self.path, clock=self.clock)
        self.others.append(store)
        return Dispatcher(
            store, self.clock, holder=holder, config=DispatcherConfig(**config), events=events
        )

    def worker(self, *, events: Any = None, **config: Any) -> Worker:
        return Worker(
            self.store,
            self.app.registry,
            self.clock,
            config=WorkerConfig(**config),
            events=events,
        )

    def run(
        self,
        dispatchers: list[Dispatcher],
        worker: Worker | None,
        *,
        until: timedelta,
        step: timedelta = timedelta(milliseconds=100),
    ) -> None:
        """Advance the fake clock in steps, stepping every dispatcher and draining the worker."""
        end = self.clock.now() + until
        while self.clock.now() < end:
            self.clock.advance(step)
            for d in dispatchers:
                d.step()
            if worker is not None:
                while asyncio.run(worker.drain_once()):
                    pass


@pytest.fixture
def rig(tmp_path: Any) -> Iterator[Rig]:
    clock = FakeClock(T0)
    path = str(tmp_path / "rig.db")
    store = SqliteStore(path, clock=clock)
    store.migrate()
    app = App(f"sqlite:///{path}", clock=clock)
    app.use_store(store)
    r = Rig(clock=clock, store=store, app=app, path=path)

    @app.task
    def record(ctx: Any, *args: Any, **kwargs: Any) -> None:
        r.calls.append(
            {
                "key": ctx.idempotency_key,
                "attempt": ctx.attempt,
                "scheduled_for": ctx.scheduled_for,
                "started": clock.now(),
                "args": args,
                "kwargs": kwargs,
            }
        )

    @app.task
    def fail(ctx: Any) -> None:
        r.calls.append({"key": ctx.idempotency_key, "attempt": ctx.attempt})
        raise ValueError("handler exploded")

    @app.task
    async def arecord(ctx: Any, value: int) -> None:
        await asyncio.sleep(0)
        r.calls.append({"key": ctx.idempotency_key, "value": value, "async": True})

    yield r
    for s in r.others:
        s.close()
    store.close()
