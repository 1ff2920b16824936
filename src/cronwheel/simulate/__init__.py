"""What-if: every occurrence's fate over a period, under hypothetical events, decided by
the real dispatcher and store on a fake clock — nothing runs, nothing is written to the
user's store.

The jobs (read from a store, or from a JSON file) are copied into a fresh
:class:`~cronwheel.store.memory.MemoryStore` driven by a :class:`FakeClock`. The real
:class:`~cronwheel.dispatch.dispatcher.Dispatcher` plans and enqueues the firings
(misfire and catch-up policies, DST rules, skips, run limits); a simulated worker
claims, starts, heartbeats and completes them through the store's ``WorkerPort``, so
the overlap and concurrency policies and start deadlines are decided by the store at
claim time, as in production. The clock moves from one interesting instant to the
next — a job's next instant, a queued firing's due time, a handler's end, a heartbeat,
an event's boundary — never tick by tick, so a month of a per-minute job takes
seconds. The fates are those ``jobs explain`` gives (domain/fates.py).

Events:

- an outage ``T1..T2``: no scheduler and no worker in ``[T1, T2)``; handlers running
  at ``T1`` die with their worker (their claims expire and the reaper decides);
  instants the outage covers follow the job's misfire policy when it ends;
- the scheduler down ``T1..T2`` (workers up: what is queued runs, nothing new is
  queued), or the workers down ``T1..T2`` (the scheduler up: firings queue and wait;
  handlers running at ``T1`` die);
- a pause ``JOB@T1..T2``: the job is paused at ``T1`` and resumed at ``T2`` (its
  misfire policy decides what the pause covered);
- a slow handler ``JOB=D``: each of the job's handlers runs for ``D`` (default 0).

Assumed: handlers succeed, workers have a free slot for every due firing, and run until
they finish (a cancelled handler stops at the heartbeat that learns of its cancel).
"""

from __future__ import annotations

from cronwheel.simulate.run import MAX_OCCURRENCES_SHOWN, MAX_STEPS, Simulation, simulate
from cronwheel.simulate.scenario import (
    MAX_JOBS,
    MAX_PERIOD,
    JobResult,
    Scenario,
    Window,
    jobs_from_json,
    load_jobs_file,
    parse_pause,
    parse_slow,
    parse_window,
    seeds_from_store,
)

__all__ = [
    "MAX_JOBS",
    "MAX_OCCURRENCES_SHOWN",
    "MAX_PERIOD",
    "MAX_STEPS",
    "JobResult",
    "Scenario",
    "Simulation",
    "Window",
    "jobs_from_json",
    "load_jobs_file",
    "parse_pause",
    "parse_slow",
    "parse_window",
    "seeds_from_store",
    "simulate",
]
