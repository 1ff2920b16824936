"""`cronwheel simulate` agrees with a real run on a fake clock.

Each scenario registers jobs in a SQLite store, simulates them (read from that store:
nothing is written to it), then runs them for real on the same store: the real
Dispatcher (the default config but a lease that outlives a step) and the real Worker
(``drain_once``; an async handler waits for the fake clock to pass its duration), the
clock stepped a minute at a time and half a second before each minute (the
dispatcher's lead), an outage played by stepping neither (the scheduler's, the
workers', or both; new processes after it), a pause by ``set_paused``. Every
occurrence's fate, as ``jobs explain`` gives it, must be the same in both.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronwheel.app import App
from cronwheel.dispatch.dispatcher import Dispatcher, DispatcherConfig
from cronwheel.domain.clock import FakeClock
from cronwheel.domain.fates import explain
from cronwheel.domain.models import ClaimedFiring
from cronwheel.domain.schedules import Schedule, cron, every
from cronwheel.simulate import Scenario, Window, seeds_from_store, simulate
from cronwheel.store.sqlite import SqliteStore
from cronwheel.worker.events import QuietWorkerEvents
from cronwheel.worker.worker import Worker, WorkerConfig

MINUTE = timedelta(minutes=1)
# the defaults, but a lease that outlives a minute's step (an outage still outlives it)
CONFIG = DispatcherConfig(lease_ttl=timedelta(minutes=10))
Fates = dict[str, list[tuple[str, str, str]]]


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@dataclass
class World:
    """A SQLite store with jobs registered one second before the period."""

    path: str
    clock: FakeClock
    store: SqliteStore
    app: App
    gates: dict[int, tuple[datetime, asyncio.Future[None]]] = field(default_factory=dict)
    slow: dict[str, timedelta] = field(default_factory=dict)

    def job(self, name: str, schedule: Schedule, **policies: Any) -> None:
        self.app.schedule("work", schedule, name=name, **policies)


@pytest.fixture
def make_world(tmp_path: Any) -> Iterator[Any]:
    opened: list[SqliteStore] = []

    def make(since: datetime) -> World:
        clock = FakeClock(since - timedelta(seconds=1))
        path = str(tmp_path / f"sim-{len(opened)}.db")
        store = SqliteStore(path, clock=clock)
        store.migrate()
        opened.append(store)
        app = App(f"sqlite:///{path}", clock=clock)
        app.use_store(store)
        world = World(path=path, clock=clock, store=store, app=app)

        @app.task
        async def work(ctx: Any) -> None:
            duration = world.slow.get(ctx.firing.job_name, timedelta(0))
            if duration > timedelta(0):
                gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                world.gates[ctx.firing.id] = (clock.now() + duration, gate)
                await gate

        return world

    yield make
    for store in opened:
        store.close()


def fates_of(store: Any, since: datetime, until: datetime, now: datetime) -> Fates:
    out: Fates = {}
    for job in store.list_jobs(namespace="default", limit=1000):
        firings = store.list_job_firings(job.id, limit=5000)
        events = store.job_events(job.id, limit=5000)
        occurrences = explain(
            job, since=since, until=until, now=now, firings=firings, events=events
        )
        out[job.name] = [(o.nominal, o.fate, o.detail) for o in occurrences]
    return out


def simulated(world: World, scenario: Scenario) -> Fates:
    jobs = world.store.list_jobs(namespace="default", limit=1000)
    results = simulate(seeds_from_store(jobs), scenario)
    assert world.store.list_firings(limit=10) == []  # the simulation wrote nothing
    return {r.name: [(o.nominal, o.fate, o.detail) for o in r.occurrences] for r in results}


class _Claims(QuietWorkerEvents):
    def __init__(self) -> None:
        self.reports: list[Sequence[ClaimedFiring]] = []

    def claimed(self, claims: Sequence[ClaimedFiring]) -> None:
        self.reports.append(list(claims))


async def _until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"the real run did not settle: {what}")
        await asyncio.sleep(0.0005)


async def _real_run(world: World, scenario: Scenario) -> None:
    clock, store = world.clock, world.store
    leader = SqliteStore(world.path, clock=clock)
    dispatcher = Dispatcher(leader, clock, holder="node-a", config=CONFIG)
    events = _Claims()
    one = WorkerConfig(concurrency=1)
    worker = Worker(store, world.app.registry, clock, config=one, events=events)
    world.slow = dict(scenario.slow)
    running: list[tuple[asyncio.Task[int], Sequence[ClaimedFiring]]] = []
    edges = sorted(
        (t, name, paused)
        for name, windows in scenario.pauses.items()
        for w in windows
        for t, paused in ((w.start, True), (w.end, False))
    )

    def gated(claims: Sequence[ClaimedFiring]) -> bool:
        return all(
            c.firing.id in world.gates and not world.gates[c.firing.id][1].done() for c in claims
        )

    async def drain() -> None:
        """Claim until nothing is left: one firing per drain (concurrency 1), each
        settled — finished, or its handler waiting for the clock — before the next."""
        while True:
            before = len(events.reports)
            task = asyncio.create_task(worker.drain_once())
            await _until(lambda t=task, n=before: len(events.reports) > n or t.done(), "claim")
            claims = events.reports[before]
            await _until(lambda t=task, c=claims: t.done() or gated(c), "handler")
            if not claims:
                return
            if not task.done():
                running.append((task, claims))

    try:
        clock.advance(timedelta(seconds=1))  # the period starts
        leader_was_down = workers_were_down = False
        while True:
            now = clock.now()
            while edges and edges[0][0] <= now:
                _, name, paused = edges.pop(0)
                store.set_paused("default", name, paused)
            leader_down, workers_down = scenario.leader_down(now), scenario.workers_gone(now)
            if workers_down and not workers_were_down:
                # the worker dies with its handlers (no completion is sent)
                for task, _ in running:
                    task.cancel()
                await asyncio.gather(*(t for t, _ in running), return_exceptions=True)
                running.clear()
            if not workers_down and workers_were_down:  # a new worker process
                worker = Worker(store, world.app.registry, clock, config=one, events=events)
            if not leader_down and leader_was_down:  # a new scheduler process
                leader.close()
                leader = SqliteStore(world.path, clock=clock)
                dispatcher = Dispatcher(leader, clock, holder=f"node-{now:%H%M}", config=CONFIG)
            leader_was_down, workers_were_down = leader_down, workers_down
            if not leader_down:
                dispatcher.step()
            if not workers_down:
                done = [g for end, g in world.gates.values() if end <= now and not g.done()]
                for gate in done:
                    gate.set_result(None)
                if done:  # their drains record the completions
                    await _until(lambda: all(t.done() or gated(c) for t, c in running), "end")
                running[:] = [(t, c) for t, c in running if not t.done()]
                await drain()
            if now >= scenario.until:
                return
            # each minute is stepped at its instant and a lead before it, when the
            # dispatcher enqueues what falls due at it
            lead = CONFIG.lead
            clock.advance(lead if now.second or now.microsecond else MINUTE - lead)
    finally:
        for task, _ in running:
            task.cancel()
        leader.close()


def agree(world: World, scenario: Scenario) -> Fates:
    """The simulation's fates, checked equal to a real run's; returned for spot checks."""
    predicted = simulated(world, scenario)
    asyncio.run(_real_run(world, scenario))
    actual = fates_of(world.store, scenario.since, scenario.until, world.clock.now())
    assert predicted == actual
    return predicted


def fates(rows: list[tuple[str, str, str]]) -> list[str]:
    return [fate for _, fate, _ in rows]


# -- the scenarios ------------------------------------------------------------------------
def test_a_dst_weekend_in_berlin(make_world: Any) -> None:
    since, until = utc(2026, 3, 28, 22), utc(2026, 3, 29, 3)
    world = make_world(since)
    world.job("moved", cron("30 2 * * *", tz="Europe/Berlin"))
    world.job("dropped", cron("30 2 * * *", tz="Europe/Berlin", dst_gap="skip"))
    world.job("half-hourly", cron("*/30 * * * *", tz="Europe/Berlin"))
    result = agree(world, Scenario(since=since, until=until))
    assert fates(result["moved"]) == ["fired (dst_moved)"]
    assert fates(result["dropped"]) == ["dst_skipped"]
    assert fates(result["half-hourly"]).count("dst_skipped") == 2


def test_a_dst_weekend_in_new_york(make_world: Any) -> None:
    since, until = utc(2026, 11, 1, 4), utc(2026, 11, 1, 8)
    world = make_world(since)
    world.job("once", cron("30 1 * * *", tz="America/New_York"))
    world.job("twice", cron("30 1 * * *", tz="America/New_York", dst_overlap="twice"))
    world.job("every-20m", cron("*/20 * * * *", tz="America/New_York"))
    result = agree(world, Scenario(since=since, until=until))
    assert fates(result["once"]) == ["fired (dst_once)"]
    assert fates(result["twice"]) == ["fired (dst_doubled)", "fired (dst_doubled)"]
    assert len(result["every-20m"]) == 12 + 1  # 01:xx occurs twice


def test_an_outage_over_the_0200_batch(make_world: Any) -> None:
    since, until = utc(2026, 6, 9, 23), utc(2026, 6, 10, 2)
    world = make_world(since)
    berlin_2am = cron("0 2 * * *", tz="Europe/Berlin")  # 00:00 UTC in summer
    world.job("batch-fire-once", berlin_2am, misfire="fire_once")
    world.job("batch-skip", berlin_2am, misfire="skip")
    world.job("batch-fire-all", berlin_2am, misfire="fire_all")
    world.job("ten-fire-all", every("10m"), misfire="fire_all", overlap="allow")
    world.job("ten-fire-once", every("10m"), misfire="fire_once")
    outage = Window(utc(2026, 6, 9, 23, 50), utc(2026, 6, 10, 0, 35))
    result = agree(world, Scenario(since=since, until=until, outages=(outage,)))
    assert fates(result["batch-fire-once"]) == ["fired"]
    assert fates(result["batch-skip"]) == ["missed"]
    assert fates(result["batch-fire-all"]) == ["fired"]
    assert fates(result["ten-fire-all"]).count("missed") == 0
    assert fates(result["ten-fire-once"]).count("missed") == 3


def test_a_slow_handler_under_the_overlap_policies(make_world: Any) -> None:
    since, until = utc(2026, 6, 10, 8), utc(2026, 6, 10, 11)
    world = make_world(since)
    world.job("slow-skip", every("10m"), overlap="skip", visibility_timeout=3600)
    world.job("slow-buffer", every("10m"), overlap="buffer_one", visibility_timeout=3600)
    world.job(
        "slow-deadline",
        every("10m"),
        overlap="buffer_one",
        visibility_timeout=3600,
        start_deadline=300,
    )
    world.job("slow-cancel", every("10m"), overlap="cancel_other", visibility_timeout=3600)
    world.job("slow-terminate", every("10m"), overlap="terminate_other", visibility_timeout=3600)
    world.job(
        "slow-allow", every("10m"), overlap="allow", max_concurrency=2, visibility_timeout=3600
    )
    names = ("slow-skip", "slow-buffer", "slow-deadline", "slow-cancel", "slow-terminate")
    slow = {name: timedelta(minutes=25) for name in (*names, "slow-allow")}
    result = agree(world, Scenario(since=since, until=until, slow=slow))
    assert "skipped" in fates(result["slow-skip"])
    assert fates(result["slow-buffer"])[:4] == ["fired", "fired", "skipped", "fired"]
    assert "missed" in fates(result["slow-deadline"])
    # the running one is asked to stop; its grace (30 s) ends before a heartbeat would
    # tell it (a third of an hour): revoked by the reaper
    cancelled = [d for _, f, d in result["slow-cancel"] if f == "cancelled"]
    assert cancelled and all("cancel grace expired" in d for d in cancelled)
    assert fates(result["slow-terminate"])[:3] == ["cancelled"] * 3
    assert set(fates(result["slow-allow"])) == {"fired"}


def test_a_pause_window(make_world: Any) -> None:
    since, until = utc(2026, 6, 10, 8), utc(2026, 6, 10, 10)
    world = make_world(since)
    world.job("paused-fire-once", every("10m"), misfire="fire_once")
    world.job("paused-skip", every("10m"), misfire="skip")
    world.job("untouched", every("10m"))
    window = (Window(utc(2026, 6, 10, 8, 25), utc(2026, 6, 10, 9, 5)),)
    pauses = {"paused-fire-once": window, "paused-skip": window}
    result = agree(world, Scenario(since=since, until=until, pauses=pauses))
    assert fates(result["paused-skip"]).count("paused") == 4
    assert fates(result["paused-fire-once"]).count("paused") == 3  # the last is caught up
    assert set(fates(result["untouched"])) == {"fired"}


def test_an_outage_while_the_batch_runs(make_world: Any) -> None:
    """The worker dies with the 10:00 handler; its claim expires in the outage; when the
    cluster is back the reaper queues it again (attempt 2) or ends it (one attempt)."""
    since, until = utc(2026, 6, 10, 9), utc(2026, 6, 10, 12)
    world = make_world(since)
    world.job("hourly-retried", every("1h"), visibility_timeout=1800)
    world.job("hourly-once", every("1h"), visibility_timeout=1800, max_attempts=1)
    slow = {"hourly-retried": timedelta(minutes=20), "hourly-once": timedelta(minutes=20)}
    outage = Window(utc(2026, 6, 10, 10, 10), utc(2026, 6, 10, 10, 50))
    result = agree(world, Scenario(since=since, until=until, outages=(outage,), slow=slow))
    assert fates(result["hourly-retried"]) == ["fired", "fired", "skipped", "fired"]
    assert fates(result["hourly-once"]) == ["fired", "failed", "fired", "fired"]


def test_the_scheduler_down_and_the_workers_down(make_world: Any) -> None:
    """Scheduler down, workers up: what was queued runs, nothing new is queued (the
    misfire policy decides on its return). Workers down, scheduler up: firings queue and
    wait; when a worker is back the overlap policy and the start deadline decide."""
    since, until = utc(2026, 6, 10, 8), utc(2026, 6, 10, 11)
    world = make_world(since)
    world.job("sched-fire-once", every("10m"), misfire="fire_once", visibility_timeout=3600)
    world.job("sched-skip", every("10m"), misfire="skip")
    world.job("work-skip", every("10m"), overlap="skip")
    world.job("work-buffer", every("10m"), overlap="buffer_one")
    world.job("work-deadline", every("10m"), overlap="allow", start_deadline=300)
    slow = {"sched-fire-once": timedelta(minutes=15)}
    scenario = Scenario(
        since=since,
        until=until,
        scheduler_down=(Window(utc(2026, 6, 10, 8, 45), utc(2026, 6, 10, 9, 25)),),
        workers_down=(Window(utc(2026, 6, 10, 9, 45), utc(2026, 6, 10, 10, 22)),),
        slow=slow,
    )
    result = agree(world, scenario)
    assert fates(result["sched-skip"]).count("missed") == 4  # 08:50 to 09:20
    assert fates(result["sched-fire-once"]).count("missed") == 3  # 09:20 caught up
    assert "skipped" in fates(result["work-skip"])
    assert "missed" in fates(result["work-deadline"])
