"""``soak``: the same measurements on a store holding three hours of history (the
baseline) and on one holding N days of it, at the design's rate, each reported as a
ratio (loaded / baseline).

The baseline is not an empty store: the reads of a scrape, the dashboard and
``explain`` take bounded samples (the newest N firings, the newest ``SAMPLE`` (100)
firings of each job shown, an hour of a job's occurrences), which an empty store
leaves empty, so that a ratio to it would measure the sample, not the history. The
baseline holds enough to fill every sample (:func:`base_days`: each job's 100 newest
firings, and at least three hours); what differs between the two sides is the depth
of history alone, and never more than half of the loaded side's. (Until 2026-12-05
it held three hours: 125 firings a job at the design's rate, but 12 at a tenth of
it, so that a soak at a tenth of the rate measured the jobs page's sample filling up,
a ratio of 2.5-3.0; with the sample full on both sides, 2,000 jobs at a tenth of the
rate, the page cost 21.9 ms over 2.4 days of history and 24.1 ms over 30.)

Each side gets a fresh store with ``jobs`` recurring jobs, then ``days x rate``
finished firings, generated in the engine (``load_history``: one
INSERT ... SELECT per chunk), a tenth of them as immediate one-shot jobs (a job row
each, as ``app.enqueue`` leaves them), ending two hours before the run (so that the
runs' own completion checks, which read status' last hour, see only their firings);
on PostgreSQL the history is then vacuumed and analyzed (VACUUM (ANALYZE)), as
autovacuum leaves it in steady state.
Both sides keep everything during the runs (retention ``keep_for`` = days + 1).

Both stores are loaded first and kept side by side; then each figure is taken on the two
in turns: the in-process ones in rounds (each round times every figure on one side, then
on the other: :func:`interleaved`), the runs (herd, drain, precision) one side after the
other, run after run. (Until 2026-12-07 each side was measured whole, one after the
other: a slow spell of this VM during the loaded side's minutes made every in-process
ratio of that run 1.5-2.0, the hot paths' too, which no history touches.)

Figures, each the median of its calls where it is a call:

- ``enqueue_ms`` / ``claim_ms``: ``enqueue_now`` and a claim + completion (the hot
  paths), in this process, 50 calls of each a side in 5 rounds;
- ``herd``, ``drain``, ``precision``: the workloads of the same names (real scheduler and
  worker processes), on the same store; the drain of ten times ``count`` jobs (at least
  ``DRAIN_MIN``): one of ``count`` (2,000) lasted a third of a second, and its rate
  moved from 4,050 to 6,870 jobs/s between runs on one store (docs/benchmarks.md); the
  precision run of ``count`` jobs, at most ``PRECISION`` (``bench precision``'s size:
  with 50, its p99 was its slowest start); with ``--runs K`` the three run K times on
  each side's store, loaded once, and each figure is their median (``runs`` lists them);
- ``scrape_ms`` (a ``/metrics`` collection after a first one), ``status_ms``, the
  dashboard's ``overview_ms``, ``jobs_page_ms``, ``firings_page_ms``, and
  ``explain_ms`` (``jobs explain`` of one job over the newest hour of history), 10 calls
  of each a side in 5 rounds, after ``WARM_CALLS`` calls, as in an API process that
  has served them before: on PostgreSQL a statement is prepared at its fifth call on a
  connection (psycopg) and the pool hands its connections out in turn, so the first
  calls of a fresh store plan every statement for every partition (its cost is in
  docs/benchmarks.md "Reads planned once");
- loaded side only: ``drain_while_pruning``: a drain of the same size while the
  leader's retention pass drops the oldest day (the namespace's ``keep_for`` set to
  days - 1; under two days of history, half of it), its rate as a share of
  ``drain_gated``, the same drain while the pass has nothing to delete, run just before
  it; with ``--runs K``, K such pairs, each dropping the next oldest day, the share
  that of their medians. The pass paces itself, a step then nine times its duration of
  pause: a drain shorter than a few steps would measure one step, not the pass; and a
  drain of a second or so could end before a new leader's first step, so each drain's
  workers start once a new leader holds its term, at most ``GATE_S`` after its
  scheduler. (Until 2026-12-07 the reference was the plain drain, whose workers start
  with the cluster: a new leader's first steps fell on the pruning drain only.) The
  firings the pass deleted before the workers started (``pruned_before_drain``) and
  during the drains are summed over the pairs, and so are the one-shot jobs' rows it
  deleted (``jobs_pruned_before_drain``, ``jobs_pruned_during_drain``): at the design's
  rate a day's drop on PostgreSQL deletes its one-shot jobs in paced steps for minutes
  before its partition goes, so a drain of seconds meets those deletes, not the drop;
  ``bytes_per_firing`` (the store's size over the firings it holds) and the size at
  steady state for the retention period (``days x rate x bytes_per_firing``);
- loaded side only, last: ``pass_steps``: the leader's retention steps timed one by
  one in this process while the pass drops the next oldest day (:func:`pass_steps`).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from cronwheel.bench.pass_steps import pass_steps
from cronwheel.bench.runner import (
    TASK,
    drain_on,
    fresh_store,
    herd_on,
    precision_on,
    store_kind,
)
from cronwheel.domain.fates import explain
from cronwheel.domain.models import ClaimedFiring, JobSpec
from cronwheel.domain.schedules import every
from cronwheel.domain.schedules import now as now_schedule
from cronwheel.observability.lateness import SAMPLE
from cronwheel.store.protocol import DISPATCHER_LEASE, Completion, Store
from cronwheel.store.url import sqlite_path

CHUNK = 200_000  # firings per INSERT ... SELECT of the loader
ONE_SHOT_SHARE = 10  # one firing in ten of the history is an immediate one-shot job
ONE_SHOT_CHUNK = 20_000  # firings per transaction of a one-shot chunk
HOT_ROUNDS, HOT_CALLS = 5, 10  # the hot paths: 5 rounds of 10 calls a side (interleaved)
READ_ROUNDS, READ_CALLS = 5, 2  # the reads: 5 rounds of 2 calls a side
WARM_CALLS = 40  # 5 calls on each of the store pool's 8 connections
DRAIN = 10  # the drains (plain, and during the retention pass): this many times ``count``
DRAIN_MIN = 5_000  # jobs, and at least this many (several seconds: see the module doc)
PRECISION = 200  # at most this many jobs 100 ms apart (bench precision's default size)
DAY = timedelta(days=1)
BASE_DAYS = 3 / 24  # the baseline's history: at least three hours (base_days)


def drain_size(count: int) -> int:
    """The drains' size for a run of ``count`` (module doc)."""
    return max(DRAIN * count, DRAIN_MIN)


def _median(values: list[Any]) -> Any:
    """The median of the runs' figures that were measured (None when none was)."""
    measured = [v for v in values if v is not None]
    return statistics.median(measured) if measured else None


def base_days(days: float, rate: int, jobs: int) -> float:
    """The baseline's days of history: enough for each of ``jobs`` to have its newest
    ``SAMPLE`` firings (the jobs page's sample) with a quarter to spare (a tenth of the
    history goes to one-shot jobs), and at least ``BASE_DAYS``; at most half of the
    loaded side's ``days``."""
    return min(max(BASE_DAYS, 1.25 * SAMPLE * jobs / rate), days / 2)


def median_ms(fn: Callable[[], Any], calls: int = 5, warm: int = 0) -> float:
    for _ in range(warm):
        fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times), 2)


def load(store: Store, *, days: float, rate: int, jobs: int, first_job: int) -> int:
    """``days x rate`` finished firings ending two hours ago; a tenth as one-shot jobs."""
    total = int(days * rate)
    step = DAY / rate
    start = store.now() - timedelta(hours=2) - total * step
    loader: Any = store
    done = 0
    while done < total:
        one_shots = (done // CHUNK) % ONE_SHOT_SHARE == ONE_SHOT_SHARE - 1
        # a one-shot chunk in transactions of ONE_SHOT_CHUNK: each of its firings is
        # also a job row written and a firing moved (200,000 in one transaction ran past
        # the store's 30 s stall_timeout on a store of 20 days at 1,000,000 a day)
        n = min(ONE_SHOT_CHUNK if one_shots else CHUNK, CHUNK - done % CHUNK, total - done)
        loader.load_history(
            first_job=first_job,
            jobs=jobs,
            start=start + done * step,
            step=step,
            count=n,
            one_shots=one_shots,
        )
        done += n
    return total


def analyze(url: str) -> None:
    """PostgreSQL: the history vacuumed, the planner statistics refreshed and a
    checkpoint made after the bulk load, as autovacuum leaves each day's partition in
    steady state (it vacuums a table after a fifth of it was inserted and analyzes it
    after a tenth changed): without it, the insert-triggered autovacuum of days of
    history loaded at once runs during the measurements, a cost of the load, not of the
    history. SQLite: nothing (it keeps no statistics unless asked, and has no vacuum
    debt after inserts)."""
    if sqlite_path(url) is not None:
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
        # and the load's dirty pages written: a month of writes made in two minutes
        # left a checkpoint spread over the next minutes (checkpoint_completion_target),
        # whose writes and fsyncs ran under the hot paths' commits (claim + completion
        # 17 ms in one run of 2026-12-05, 3.7 ms in the next); a deployment's writes of
        # a day are spread over the day
        conn.execute("CHECKPOINT")


def store_bytes(store: Store) -> int:
    sized: Any = store  # the SQL engines' database_size (store/core/retention.py)
    return int(sized.database_size())


def succeeded(c: ClaimedFiring, at: datetime) -> Completion:
    """``c``'s attempt, succeeded at ``at`` (started then too)."""
    return Completion(
        firing_id=c.firing.id,
        claim_token=c.claim_token,
        succeeded=True,
        started_at=at,
        finished_at=at,
    )


def claim_and_complete(store: Store, task: str) -> None:
    """Claim one firing of ``task`` (there must be one) and complete it, succeeded."""
    (c,) = store.claim("soak-bench", tasks=[task], limit=1)
    store.complete([succeeded(c, store.now())])


def _hot_timers(store: Store, side: str) -> dict[str, Callable[[], None]]:
    """The hot paths (``enqueue_now`` of an immediate job, a claim + completion of it),
    each call a fresh job: the round's timer calls them in turn."""
    made = iter(range(10**9))

    def enqueue() -> None:
        spec = JobSpec(name=f"hot-{side}-{next(made)}", task="soak.hot", schedule=now_schedule())
        store.enqueue_now(spec)

    return {"enqueue_ms": enqueue, "claim_ms": lambda: claim_and_complete(store, "soak.hot")}


def hot_paths(store: Store, *, calls: int = HOT_CALLS, prefix: str = "hot") -> dict[str, float]:
    """``calls`` calls of each hot path on one store: the medians (ms)."""
    return interleaved([_hot_timers(store, prefix)], 1, calls)[0]


def _readers(store: Any) -> dict[str, Callable[[], Any]]:
    """The periodic reads, each already called ``WARM_CALLS`` times (as in an API process
    that has served them before: module doc)."""
    from cronwheel.dashboard import data
    from cronwheel.observability.cluster import ClusterCollector

    collector = ClusterCollector(store)
    list(collector.collect())  # the first scrape reads its starting point
    job = store.get_job("default", "soak-0")
    now = store.now()

    def explain_day() -> None:
        until = now - timedelta(hours=2)  # the newest hour of history
        since = until - timedelta(hours=1)
        firings = store.list_job_firings(
            job.id, scheduled_from=since, scheduled_to=until, limit=5000
        )
        events = store.job_events(job.id, limit=5000)
        explain(job, since=since, until=until, now=now, firings=firings, events=events)

    reads: dict[str, Callable[[], Any]] = {
        "scrape_ms": lambda: list(collector.collect()),
        "status_ms": store.status,
        "overview_ms": lambda: data.overview(store, "default", cluster=True),
        "jobs_page_ms": lambda: data.jobs(store, "default"),
        "firings_page_ms": lambda: data.firings(store, "default", state=None, job_id=None),
        "explain_ms": explain_day,
    }
    for read in reads.values():
        for _ in range(WARM_CALLS):
            read()
    return reads


def interleaved(
    sides: list[dict[str, Callable[[], Any]]], rounds: int, calls: int
) -> list[dict[str, float]]:
    """Each side's figures timed in turns: ``rounds`` rounds, in each of which every side
    (the first one, then the last one first: neither side always follows the other)
    times each of its figures ``calls`` times; each figure the median (ms) of its
    ``rounds x calls`` calls. The sides' calls are spread over the same minutes, so that
    a slow spell of the host (a VM's neighbours, a checkpoint) falls on both sides, not
    on the one measured while it lasted."""
    times: list[dict[str, list[float]]] = [{k: [] for k in side} for side in sides]
    for r in range(rounds):
        order = list(zip(sides, times, strict=True))
        for side, out in order if r % 2 == 0 else order[::-1]:  # each side first in turn
            for key, fn in side.items():
                for _ in range(calls):
                    start = time.perf_counter()
                    fn()
                    out[key].append((time.perf_counter() - start) * 1000)
    return [{k: round(statistics.median(v), 2) for k, v in out.items()} for out in times]


@dataclass
class _Side:
    """One side of the soak: its store, loaded with ``days`` of history."""

    url: str
    store: Store
    tmp: Path
    days: float
    loaded: bool
    history: int = 0
    floor: int = 0
    doc: dict[str, Any] = field(default_factory=dict)


def _prepare(side: _Side, *, rate: int, jobs: int) -> None:
    store = side.store
    store.migrate()
    side.doc |= {"store": store_kind(side.url), "days": side.days}
    specs = [
        (JobSpec(name=f"soak-{i}", task=TASK, schedule=every("1d")), None) for i in range(jobs)
    ]
    store.create_jobs(specs)
    first_job = store.get_job("default", "soak-0").id
    keep = {"keep_for": (side.days + 1) * 86400, "keep_last": 1}
    store.set_retention("default", keep)
    t0 = time.monotonic()
    side.history = load(store, days=side.days, rate=rate, jobs=jobs, first_job=first_job)
    analyze(side.url)
    side.doc["load_s"] = round(time.monotonic() - t0, 1)
    side.doc["history_firings"] = side.history
    side.floor = int(store.list_firings(limit=1)[0].id)


def _runs(sides: list[_Side], *, runs: int, count: int, workers: int, concurrency: int,
          progress: Callable[[int, int], None]) -> None:  # fmt: skip
    """Herd, drain and precision ``runs`` times on each side, the sides in turns."""
    long = drain_size(count)
    figures: list[dict[str, list[Any]]] = [{"herd": [], "drain": [], "precision_p99_ms": []}
                                           for _ in sides]  # fmt: skip
    for side in sides:
        side.doc["lost"] = side.doc["duplicated"] = 0
    for k in range(runs):
        for side, got in zip(sides, figures, strict=True):
            url, store, tmp, floor = side.url, side.store, side.tmp, side.floor
            herd = herd_on(
                url, store, tmp, count, workers, concurrency, progress, floor=floor,
                prefix=f"herd{k}",
            )  # fmt: skip
            drain = drain_on(
                url, store, tmp, long, workers, concurrency, progress, floor=floor,
                prefix=f"drain{k}",
            )  # fmt: skip
            precision = precision_on(
                url, store, tmp, min(count, PRECISION), 100, workers, concurrency,
                progress, floor=floor, prefix=f"precision{k}",
            )  # fmt: skip
            got["herd"].append(herd.figures.get("firings_per_s"))
            got["drain"].append(drain.figures.get("jobs_per_s"))
            got["precision_p99_ms"].append(precision.lateness_ms.get("p99"))
            for result in (herd, drain, precision):
                side.doc["lost"] += result.lost
                side.doc["duplicated"] += result.duplicated
    for side, got in zip(sides, figures, strict=True):
        side.doc["herd_firings_per_s"] = _median(got["herd"])
        side.doc["drain_jobs_per_s"] = _median(got["drain"])
        side.doc["precision_p99_ms"] = _median(got["precision_p99_ms"])
        if runs > 1:
            side.doc["runs"] = got


def _pruning(side: _Side, *, rate: int, runs: int, count: int, workers: int, concurrency: int,
             progress: Callable[[int, int], None]) -> None:  # fmt: skip
    """The loaded side's size, and its drains while the leader's pass drops the oldest
    day, each beside the same drain while the pass has nothing to delete."""
    store, days, history = side.store, side.days, side.history
    long = drain_size(count)
    size = store_bytes(store)
    # the herds', drains' and precision runs' firings
    held = history + runs * (count + long + min(count, PRECISION))
    side.doc["store_bytes"] = size
    side.doc["bytes_per_firing"] = round(size / held)
    side.doc["steady_state_bytes"] = round(days * rate * size / held)
    counter: Any = store  # the SQL engines' count (store/core/retention.py)
    plain: list[Any] = []
    pruning: list[Any] = []
    before = during = jobs_before = jobs_during = 0
    for k in range(runs):
        # the next oldest day goes (half the history when there is less than two days)
        keep_for = max(days - 1 - k, days / 2) * DAY
        cutoff = store.now() - keep_for
        for drops in (False, True):
            # a drain of the plain ones' size, long enough to span the pass's pacing (a
            # step, then nine times its duration of pause); its workers start once a new
            # leader holds its term, whose first step starts the pass (a drain of a
            # second could otherwise end before that leader's first step: CI saw it
            # once). The drain beside it starts the same way, with nothing to delete: a
            # new leader's first steps (its catch-up, the pass's reads) fall on both.
            set_at = store.now()
            prunable = [counter.count_finished_before(cutoff)]
            job_rows = [counter.count_job_rows()]
            if drops:
                store.set_retention("default", {"keep_for": keep_for})

            def leader_up(
                set_at: datetime = set_at,
                prunable: list[int] = prunable,
                job_rows: list[int] = job_rows,
                cutoff: datetime = cutoff,
            ) -> bool:
                lease = store.get_lease(DISPATCHER_LEASE)
                if lease is None or lease.acquired_at < set_at:
                    return False
                prunable.append(counter.count_finished_before(cutoff))
                job_rows.append(counter.count_job_rows())
                return True

            result = drain_on(
                side.url, store, side.tmp, long, workers, concurrency, progress,
                floor=side.floor, prefix=f"drain-{'pruning' if drops else 'gated'}{k}",
                gate=leader_up,
            )  # fmt: skip
            (pruning if drops else plain).append(result.figures.get("jobs_per_s"))
            side.doc["lost"] += result.lost
            side.doc["duplicated"] += result.duplicated
            if drops:
                # from the retention's setting to the workers' start (the gate), and from
                # then to the drain's end
                before += prunable[0] - prunable[-1]
                during += prunable[-1] - counter.count_finished_before(cutoff)
                # the drain added its ``long`` jobs after the first count (kept: they
                # are newer than keep_for); what left the jobs table were one-shot jobs
                # of the history (PostgreSQL deletes a day's before it drops the day's
                # partition, its firings with it)
                jobs_before += job_rows[0] + long - job_rows[-1]
                jobs_during += job_rows[-1] - counter.count_job_rows()
                side.doc["prunable_when_drain_started"] = prunable[-1]
    side.doc["drain_gated_jobs_per_s"] = _median(plain)
    side.doc["drain_while_pruning_jobs_per_s"] = _median(pruning)
    if runs > 1:
        side.doc["runs"] |= {"drain_gated": plain, "drain_while_pruning": pruning}
    side.doc["pruned_before_drain"] = before
    side.doc["pruned_during_drain"] = during
    side.doc["jobs_pruned_before_drain"] = jobs_before
    side.doc["jobs_pruned_during_drain"] = jobs_during


_COST = ("enqueue_ms", "claim_ms", "precision_p99_ms", "scrape_ms", "status_ms",
         "overview_ms", "jobs_page_ms", "firings_page_ms", "explain_ms")  # fmt: skip
_RATE = ("herd_firings_per_s", "drain_jobs_per_s")


def ratios(empty: dict[str, Any], loaded: dict[str, Any]) -> dict[str, float | None]:
    """Loaded over baseline for a cost, baseline over loaded for a rate: > 1 is worse."""
    out: dict[str, float | None] = {}
    for key in _COST:
        a, b = empty.get(key), loaded.get(key)
        out[key] = round(b / a, 2) if a and b is not None else None
    for key in _RATE:
        a, b = empty.get(key), loaded.get(key)
        out[key] = round(a / b, 2) if a and b else None
    drain = loaded.get("drain_gated_jobs_per_s")
    pruning = loaded.get("drain_while_pruning_jobs_per_s")
    out["drain_while_pruning_share"] = round(pruning / drain, 2) if drain and pruning else None
    return out


def run_soak(
    store_url: str | None,
    *,
    days: float,
    rate: int,
    jobs: int,
    count: int,
    workers: int,
    concurrency: int,
    progress: Callable[[int, int], None],
    runs: int = 1,
) -> dict[str, Any]:
    with ExitStack() as stack:
        sides = []
        for loaded, d in ((False, base_days(days, rate, jobs)), (True, days)):
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            url, store = stack.enter_context(fresh_store(store_url, tmp))
            side = _Side(url=url, store=store, tmp=tmp, days=d, loaded=loaded)
            _prepare(side, rate=rate, jobs=jobs)
            sides.append(side)
        hot = interleaved(
            [_hot_timers(s.store, str(i)) for i, s in enumerate(sides)], HOT_ROUNDS, HOT_CALLS
        )
        reads = interleaved([_readers(s.store) for s in sides], READ_ROUNDS, READ_CALLS)
        for side, h, r in zip(sides, hot, reads, strict=True):
            side.doc |= h | r
        args = {"count": count, "workers": workers, "concurrency": concurrency}
        _runs(sides, runs=runs, progress=progress, **args)
        _pruning(sides[1], rate=rate, runs=runs, progress=progress, **args)
        keep = max(sides[1].days - 1 - runs, sides[1].days / 4)  # the next oldest day
        sides[1].doc["pass_steps"] = pass_steps(sides[1].store, keep)
        empty, loaded_doc = sides[0].doc, sides[1].doc
    load_avg = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {
        "workload": "soak",
        "baseline": empty,
        "loaded": loaded_doc,
        "ratios": ratios(empty, loaded_doc),
        "load_average": None if load_avg is None else round(load_avg, 2),
    }
