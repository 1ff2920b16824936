"""A held firing's wait on the event loop ends ``START_LEAD_S`` before its instant, and
the store's thread waits out the rest (worker/starts.py): the start (CLAIMED ->
RUNNING) is never written before the instant.

Real clocks here (a SQLite store on the system clock, whose offset to the worker's
host is zero): the point is where the real wait happens, which a fake clock hides.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cronwheel.app import App
from cronwheel.domain.clock import SystemClock
from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import FiringId, JobSpec
from cronwheel.domain.schedules import every
from cronwheel.store.sqlite.store import SqliteStore
from cronwheel.worker.config import WorkerConfig
from cronwheel.worker.starts import START_LEAD_S
from cronwheel.worker.worker import Worker

N = 8
# the worker's estimate of the store's clock, here the same clock, is off by at most
# the round trip of one sample: far less than the lead this test would catch
SLACK = timedelta(microseconds=500)


class StartTimes:
    """The store, recording for each start call when the write began (when the worker's
    ``ready`` returned, or at the call without one) and for which firings."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store
        self.calls: list[tuple[datetime, list[FiringId]]] = []
        self.primed = 0  # calls made early enough to warm up before the instant

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def complete_and_start(
        self, *args: Any, ready: Callable[[], None] | None = None, **kw: Any
    ) -> tuple[list[bool], set[FiringId]]:
        claims: Sequence[tuple[FiringId, str]] = args[2]  # (completions, worker_id, claims)
        fids = [fid for fid, _ in claims]
        if ready is None:
            self.calls.append((datetime.now(UTC), fids))
            return self._store.complete_and_start(*args, **kw)
        self.primed += 1

        def timed() -> None:
            ready()
            self.calls.append((datetime.now(UTC), fids))

        return self._store.complete_and_start(*args, ready=timed, **kw)


def test_held_firings_start_at_their_instants_not_at_the_loops_early_wake(
    tmp_path: Path,
) -> None:
    assert 2 * SLACK.total_seconds() < START_LEAD_S  # the test can tell early from on time
    path = str(tmp_path / "cw.db")
    store = SqliteStore(path)
    store.migrate()
    app = App(f"sqlite:///{path}")
    app.use_store(store)
    ran: list[int] = []

    @app.task
    def timed(ctx: Any) -> None:
        ran.append(ctx.firing_id)

    first = datetime.now(UTC) + timedelta(milliseconds=600)
    instants = [first + timedelta(milliseconds=40 * i) for i in range(N)]
    store.create_jobs(
        [(JobSpec(name=f"timed{i}", task="timed", schedule=every(3600)), None) for i in range(N)]
    )
    for i, at in enumerate(instants):
        store.add_firings("default", f"timed{i}", [at], note="timed")
    with sqlite3.connect(path) as conn:  # due at their instants, not at once
        conn.execute("UPDATE firings SET due_at = scheduled_for, vdeadline = scheduled_for")
    starts = StartTimes(store)
    worker = Worker(
        store, app.registry, SystemClock(), config=WorkerConfig(prefetch=timedelta(seconds=5))
    )
    worker.store = starts  # type: ignore[assignment]

    def succeeded() -> int:
        return len(store.list_firings(states=[FiringState.SUCCEEDED], limit=100))

    async def scenario() -> None:
        stop = asyncio.Event()
        runner = asyncio.create_task(worker.run(stop))
        deadline = asyncio.get_running_loop().time() + 30
        while succeeded() < N and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        stop.set()
        await runner

    asyncio.run(scenario())
    assert succeeded() == N and sorted(ran) == sorted(set(ran)) and len(ran) == N
    due = {f.id: f.due_at for f in store.list_firings(limit=100)}
    started = [fid for _, fids in starts.calls for fid in fids]
    assert sorted(started) == sorted(due)  # every firing was held, then started
    for at, fids in starts.calls:
        assert at >= max(due[f] for f in fids) - SLACK, (at, [due[f] for f in fids])
    # how many calls came early enough to warm up (PRIME_S before their instant) is the
    # loop's timing, 40 ms apart: in CI 7 of 8 once; all calls are checked above
    assert starts.primed >= 1
    for f in store.list_firings(limit=100):  # RUNNING was written at or after the instant
        assert f.started_at is not None and f.started_at >= f.scheduled_for - SLACK
    store.close()
