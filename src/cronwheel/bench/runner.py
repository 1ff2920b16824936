"""Benchmark workloads. Each returns a result dict; the CLI renders a table or JSON.

Every run uses its own fresh store (a temporary SQLite file, or a fresh schema-less
reset of the given PostgreSQL database), starts one scheduler and ``workers`` worker
processes, registers the workload's jobs, waits until every expected firing has
finished (or a deadline), stops the processes and reads the outcome from the store:
lateness = handler start - scheduled instant; lost = expected firings that never
succeeded; duplicated = more than one firing row (or success) per expected instant.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from cronwheel.bench.cpu import SideMeter, on_this_host
from cronwheel.domain.clock import SystemClock
from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import JobPolicies, JobSpec
from cronwheel.domain.schedules import at
from cronwheel.errors import StoreUnavailableError
from cronwheel.store.protocol import Store
from cronwheel.store.url import open_store, sqlite_path

from .registry import jobs_from

# the states of a firing not finished yet, as status() counts them
ACTIVE = ("queued", "claimed", "running")

BENCH_APP = "cronwheel.bench.app:app"
TASK = "bench.noop"


@dataclass(slots=True)
class BenchResult:
    workload: str
    store: str
    expected: int
    ran: int = 0
    lost: int = 0
    duplicated: int = 0
    lateness_ms: dict[str, float | None] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "store": self.store,
            "expected": self.expected,
            "ran": self.ran,
            "lost": self.lost,
            "duplicated": self.duplicated,
            "lateness_ms": self.lateness_ms,
            **self.figures,
        }


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


class Cluster:
    """Scheduler(s) and N worker processes on a store, stopped on exit."""

    def __init__(
        self,
        store_url: str,
        workers: int,
        concurrency: int,
        log_dir: Path,
        *,
        schedulers: int = 1,
        scheduler_args: Sequence[str] = (),
        workers_after: Callable[[], bool] | None = None,
    ) -> None:
        self.store_url = store_url
        # the workers start once this is true (or after GATE_S): the schedulers first
        self.workers_after = workers_after
        self.workers = workers
        self.concurrency = concurrency
        self.log_dir = log_dir
        self.n_schedulers = schedulers
        self.scheduler_args = list(scheduler_args)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.schedulers: list[subprocess.Popen[bytes]] = []
        self._logs: list[Any] = []

    def _spawn(self, role: str, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.log_dir / f"{role}.log", "wb")  # noqa: SIM115 - closed in stop()
        self._logs.append(log)
        env = dict(os.environ, CRONWHEEL_LOG_LEVEL="warning", CRONWHEEL_LOG_FORMAT="json")
        proc = subprocess.Popen(
            [sys.executable, "-m", "cronwheel", *args, "--store", self.store_url, BENCH_APP],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        self.procs.append(proc)
        return proc

    def start(self) -> None:
        for i in range(self.n_schedulers):
            name = "scheduler" if i == 0 else f"scheduler-{i + 1}"
            self.schedulers.append(self._spawn(name, "scheduler", *self.scheduler_args))
        self.scheduler = self.schedulers[0]
        if self.workers_after is not None:
            wait_until(self.workers_after, GATE_S, DRAIN_POLL_S)
        for i in range(self.workers):
            self._spawn(f"worker-{i + 1}", "worker", "--concurrency", str(self.concurrency))

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in self._logs:
            f.close()

    def __enter__(self) -> Cluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def fresh_store(url: str | None, tmp: Path) -> Iterator[tuple[str, Store]]:
    """A store with nothing in it: a temporary SQLite file by default; for a PostgreSQL
    URL, a temporary database created on that server and dropped afterwards (the
    database named in the URL is only used to connect, never written)."""
    if url is None:
        url = f"sqlite:///{tmp / 'bench.db'}"
    path = sqlite_path(url)
    if path is not None:
        for suffix in ("", "-wal", "-shm"):
            Path(path + suffix).unlink(missing_ok=True)
        store = open_store(url)
        try:
            yield url, store
        finally:
            store.close()
    else:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        name = f"cronwheel_bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        params = {k: str(v) for k, v in conninfo_to_dict(url).items() if v is not None}
        params["dbname"] = name
        bench_url = _as_url(make_conninfo("", **params))
        store = open_store(bench_url)
        try:
            yield bench_url, store
        finally:
            store.close()
            with psycopg.connect(url, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _as_url(conninfo: str) -> str:
    """psycopg conninfo 'host=... dbname=...' -> a postgresql:// URL for the CLI."""
    from psycopg.conninfo import conninfo_to_dict

    d = conninfo_to_dict(conninfo)
    user = d.get("user", "")
    auth = f"{user}@" if user else ""
    host = d.get("host", "127.0.0.1")
    port = d.get("port", "5432")
    return f"postgresql://{auth}{host}:{port}/{d['dbname']}"


# Progress polls count firings by state (a scan of the table): at a few per second they
# took measurable CPU from the processes under test, on a 2-core machine. Every figure
# comes from the stored timestamps, so the poll interval changes none of them.
POLL_S = 1.0
# the drain polls four times a second: its CPU per job is read from the first poll that
# saw a job done to the one that saw the last, most of a drain of a few seconds
DRAIN_POLL_S = 0.25
GATE_S = 60.0  # at most this long for a Cluster's workers_after (then they start anyway)


def wait_until(done: Callable[[], bool], timeout_s: float, interval_s: float = 0.2) -> bool:
    """Poll ``done`` until it is true or the deadline passes; a store that is briefly
    unavailable (a PostgreSQL restart) only counts as "not yet"."""

    def check() -> bool:
        try:
            return done()
        except StoreUnavailableError:
            return False

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval_s)
    return check()


def server_started_at(url: str | None) -> str | None:
    """PostgreSQL: the server's start time (``pg_postmaster_start_time``), waiting up to
    60 s for a server that is restarting; None for SQLite. A run during which it changed
    was disturbed by a restart and is repeated by the CLI."""
    if url is None or sqlite_path(url) is not None:
        return None
    import psycopg

    deadline = time.monotonic() + 60
    while True:
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
                row = conn.execute("SELECT pg_postmaster_start_time()::text").fetchone()
            return None if row is None else str(row[0])
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _progress(store: Store, n: int, base: int = 0) -> tuple[int, bool]:
    """From one read of status: the finishes in its last hour beyond ``base``, and
    whether the run is over (nothing active, and ``n`` of them)."""
    st = store.status()
    done = sum(v for k, v in st.counts.items() if k not in ACTIVE) - base
    return done, done >= n and all(st.counts.get(state, 0) == 0 for state in ACTIVE)


def collect(store: Store, result: BenchResult, job_ids: set[int], *, floor: int = 0) -> list[float]:
    """Fill ran/lost/duplicated/lateness from the store; return lateness values (ms).
    Only firings above id ``floor`` are read (the soak's history lies below it)."""
    per_job: dict[int, int] = {}
    lateness: list[float] = []
    before: int | None = None
    while True:
        page = [f for f in store.list_firings(before_id=before, limit=5000) if f.id > floor]
        if not page:
            break
        for f in page:
            if f.job_id not in job_ids:
                continue
            per_job[f.job_id] = per_job.get(f.job_id, 0) + 1
            if f.state is FiringState.SUCCEEDED and f.started_at is not None:
                result.ran += 1
                lateness.append((f.started_at - f.scheduled_for).total_seconds() * 1000)
        before = page[-1].id
    result.duplicated = sum(c - 1 for c in per_job.values() if c > 1)
    result.lost = result.expected - result.ran
    result.lateness_ms = {
        "p50": rounded(percentile(lateness, 50)),
        "p99": rounded(percentile(lateness, 99)),
        "max": rounded(max(lateness) if lateness else None),
    }
    return lateness


def rounded(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def register_at_jobs(store: Store, instants: list[Any], prefix: str) -> set[int]:
    """Bulk-register one-shot jobs (the bulk path: one transaction per 5,000)."""
    policies = JobPolicies(misfire_grace=timedelta(minutes=10))
    items = [
        (JobSpec(name=f"{prefix}-{i}", task=TASK, schedule=at(t), policies=policies), t)
        for i, t in enumerate(instants)
    ]
    for start in range(0, len(items), 5000):
        store.create_jobs(items[start : start + 5000])
    return jobs_from(store, prefix, len(items))


def run_precision(
    store_url: str | None,
    *,
    count: int,
    spacing_ms: int,
    workers: int,
    concurrency: int,
    progress: Callable[[int, int], None],
) -> BenchResult:
    with tempfile.TemporaryDirectory() as tmp, fresh_store(store_url, Path(tmp)) as (url, store):
        return precision_on(
            url, store, Path(tmp), count, spacing_ms, workers, concurrency, progress
        )


def precision_on(
    url: str,
    store: Store,
    tmp: Path,
    count: int,
    spacing_ms: int,
    workers: int,
    concurrency: int,
    progress: Callable[[int, int], None],
    *,
    floor: int = 0,
    prefix: str = "precision",
) -> BenchResult:
    """The precision run on a given store (the soak's, with history below ``floor``); its
    jobs' names begin with ``prefix``."""
    result = BenchResult(workload="precision", store=store_kind(url), expected=count)
    base = done_count(store)
    with Cluster(url, workers, concurrency, tmp):
        start = SystemClock().now() + timedelta(seconds=4)
        instants = [start + timedelta(milliseconds=spacing_ms * i) for i in range(count)]
        ids = register_at_jobs(store, instants, prefix)
        total_s = 4 + count * spacing_ms / 1000 + 30
        wait_until(lambda: report_progress(store, count, progress, base), total_s)
    collect(store, result, ids, floor=floor)
    result.figures["spacing_ms"] = spacing_ms
    return result


def run_herd(
    store_url: str | None,
    *,
    count: int,
    workers: int,
    concurrency: int,
    progress: Callable[[int, int], None],
) -> BenchResult:
    with tempfile.TemporaryDirectory() as tmp, fresh_store(store_url, Path(tmp)) as (url, store):
        return herd_on(url, store, Path(tmp), count, workers, concurrency, progress)


def herd_on(
    url: str,
    store: Store,
    tmp: Path,
    count: int,
    workers: int,
    concurrency: int,
    progress: Callable[[int, int], None],
    *,
    floor: int = 0,
    prefix: str = "herd",
) -> BenchResult:
    """The herd run on a given store (the soak's, with history below ``floor``); its jobs'
    names begin with ``prefix``."""
    result = BenchResult(workload="herd", store=store_kind(url), expected=count)
    base = done_count(store)
    with Cluster(url, workers, concurrency, tmp):
        t_reg = time.monotonic()
        due = SystemClock().now() + timedelta(seconds=6 + count / 4000)
        ids = register_at_jobs(store, [due] * count, prefix)
        result.figures["register_s"] = round(time.monotonic() - t_reg, 3)
        wait_until(
            lambda: report_progress(store, count, progress, base),
            (due - SystemClock().now()).total_seconds() + 120,
            POLL_S,
        )
    lateness = collect(store, result, ids, floor=floor)
    result.figures["last_started_after_s"] = rounded(max(lateness) / 1000 if lateness else None)
    if lateness:
        spread = max(lateness) - min(lateness)
        result.figures["firings_per_s"] = round(len(lateness) / max(spread / 1000, 1e-3))
    return result


def run_drain(
    store_url: str | None,
    *,
    count: int,
    workers: int,
    concurrency: int,
    progress: Callable[[int, int], None],
) -> BenchResult:
    with tempfile.TemporaryDirectory() as tmp, fresh_store(store_url, Path(tmp)) as (url, store):
        return drain_on(url, store, Path(tmp), count, workers, concurrency, progress)


def drain_on(
    url: str,
    store: Store,
    tmp: Path,
    count: int,
    workers: int,
    concurrency: int,
    progress: Callable[[int, int], None],
    *,
    floor: int = 0,
    prefix: str = "drain",
    gate: Callable[[], bool] | None = None,
) -> BenchResult:
    """The drain run on a given store (the soak's, with history below ``floor``); with
    ``gate``, the workers start only once it is true (Cluster's ``workers_after``)."""
    from cronwheel.domain.schedules import now as now_schedule

    result = BenchResult(workload="drain", store=store_kind(url), expected=count)
    base = done_count(store)
    ids: set[int] = set()
    # Queue everything first, then start the processes: the figure is the drain
    # rate of the workers, not the producer's enqueue rate.
    for i in range(count):
        spec = JobSpec(name=f"{prefix}-{i}", task=TASK, schedule=now_schedule())
        ids.add(store.enqueue_now(spec).job_id)
    with Cluster(url, workers, concurrency, tmp, workers_after=gate) as cluster:
        procs = [p for p in cluster.procs if p not in cluster.schedulers]
        server = store_kind(url) == "postgresql" and on_this_host(url)
        cpu = SideMeter.of_processes(procs, cluster.schedulers, server=server)
        readings: list[tuple[int, dict[str, dict[int, float]]]] = []

        def done() -> bool:
            n, finished = _progress(store, count, base)
            progress(n, count)
            if n > 0 and (not readings or finished):
                readings.append((n, cpu.read()))
            return finished

        wait_until(done, 300, DRAIN_POLL_S)
    if len(readings) == 2:
        (n0, before), (n1, after) = readings
        # CPU per job of each side from the first poll that saw a job done to the one
        # that saw the last: the workers' start-up is left out (see docs/benchmarks.md)
        for side, us in SideMeter.per_item(before, after, n1 - n0).items():
            result.figures[f"cpu_us_per_job_{side}"] = us
        machine = result.figures.get("cpu_us_per_job_machine")
        if machine:
            cores = os.cpu_count() or 1
            result.figures["cores_bound_jobs_per_s"] = round(cores * 1e6 / machine)
    collect(store, result, ids, floor=floor)
    firings = [f for f in all_firings(store, floor=floor) if f.job_id in ids and f.started_at]
    if firings:
        first = min(f.started_at for f in firings if f.started_at)
        last = max(f.finished_at for f in firings if f.finished_at)
        span = (last - first).total_seconds()
        result.figures["jobs_per_s"] = round(len(firings) / max(span, 1e-3))
        # The same rate once every worker is running: the worker processes start a
        # second or so apart on 2 cores, and for that second one worker drains alone.
        # From the latest of the workers' first starts to the last completion.
        firsts: dict[str, Any] = {}
        for f in firings:
            if f.worker_id and f.started_at:
                firsts[f.worker_id] = min(firsts.get(f.worker_id, f.started_at), f.started_at)
        if len(firsts) == workers:
            all_up = max(firsts.values())
            steady = [f for f in firings if f.started_at and f.started_at >= all_up]
            span = (last - all_up).total_seconds()
            result.figures["jobs_per_s_all_workers_up"] = round(len(steady) / max(span, 1e-3))
    return result


def all_firings(store: Store, *, floor: int = 0) -> list[Any]:
    out: list[Any] = []
    before: int | None = None
    while page := [f for f in store.list_firings(before_id=before, limit=5000) if f.id > floor]:
        out += page
        before = page[-1].id
    return out


def report_progress(
    store: Store, count: int, progress: Callable[[int, int], None], base: int = 0
) -> bool:
    """Update the progress bar; True when every expected firing has finished (``base``:
    the finishes status counted before the run)."""
    done, finished = _progress(store, count, base)
    progress(done, count)
    return finished


def done_count(store: Store) -> int:
    st = store.status()
    return sum(v for k, v in st.counts.items() if k not in ACTIVE)


def store_kind(url: str) -> str:
    return "sqlite" if sqlite_path(url) is not None else "postgresql"
