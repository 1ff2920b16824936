"""``bulk``: the calls that create work many at a time, against their one-at-a-time
counterparts, through the public API on a fresh store:

- ``App.schedule`` one job per call, for a fixed time (jobs/s), then
  ``App.schedule_many`` of ``count`` one-shot jobs in one call (seconds, wall and CPU);
- ``App.enqueue_many`` of ``count`` immediate runs in one call;
- through the HTTP API (``cronwheel api`` on 127.0.0.1, ``Client``):
  ``POST /v1/jobs/batch`` and ``POST /v1/firings/batch`` of 1,000 items each, repeated
  (``cronwheel api`` as its own process; milliseconds per request, client to client:
  encoding, HTTP, the write, the answer; and the client's own CPU milliseconds).

``ran`` counts what the store holds afterwards: every job and firing the calls reported
created, none lost or duplicated.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from cronwheel.app import App
from cronwheel.bench.runner import TASK, BenchResult, fresh_store, store_kind
from cronwheel.client import Client
from cronwheel.domain.batch import BATCH_LIMIT
from cronwheel.domain.clock import SystemClock
from cronwheel.domain.schedules import at
from cronwheel.store.protocol import Store

API_BATCHES = 10  # requests of BATCH_LIMIT items per endpoint (fewer for a --count under 10,000)


def run_bulk(
    store_url: str | None,
    *,
    count: int,
    single_s: float,
    progress: Callable[[int, int], None],
) -> BenchResult:
    api_batches = min(API_BATCHES, max(1, count // BATCH_LIMIT))
    api_items = api_batches * BATCH_LIMIT
    total = 2 * count + 2 * api_items
    with tempfile.TemporaryDirectory() as tmp, fresh_store(store_url, Path(tmp)) as (url, store):
        result = BenchResult(workload="bulk", store=store_kind(url), expected=total)
        app = App(url, allow_unknown_task=True)
        app.use_store(store)
        clock = SystemClock()
        later = clock.now() + timedelta(days=1)
        # one job per call, for a fixed time
        n = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < single_s:
            app.schedule(TASK, at(later), name=f"one-{n}", replace=False)
            n += 1
        single_rate = n / (time.perf_counter() - t0)
        result.figures |= _upserts(app, later, single_s)
        # schedule_many: count one-shot jobs, one call
        items = [
            {"task": TASK, "name": f"many-{i}", "schedule": at(later + i * timedelta(seconds=1))}
            for i in range(count)
        ]
        wall, cpu, jobs = _timed(lambda: app.schedule_many(items, all_or_nothing=True))
        result.figures["schedule_x1_jobs_per_s"] = round(single_rate)
        result.figures["schedule_many_s"] = wall
        result.figures["schedule_many_cpu_s"] = cpu
        result.figures["schedule_many_jobs_per_s"] = round(count / wall)
        progress(count, total)
        runs = [{"task": TASK, "args": [i]} for i in range(count)]
        wall, cpu, firings = _timed(lambda: app.enqueue_many(runs, all_or_nothing=True))
        result.figures["enqueue_many_s"] = wall
        result.figures["enqueue_many_cpu_s"] = cpu
        progress(2 * count, total)
        made = len(jobs.created) + len(firings.created)
        # the HTTP API: batches of BATCH_LIMIT
        with _api_server(url) as (base, server_pid), Client(base, timeout=60) as api:
            job_ms: list[float] = []
            run_ms: list[float] = []
            job_cpu: list[float] = []
            run_cpu: list[float] = []
            job_server: list[float] = []
            run_server: list[float] = []
            for b in range(api_batches):
                batch = [
                    {"name": f"api-{b}-{i}", "task": TASK, "schedule": at(later)}
                    for i in range(BATCH_LIMIT)
                ]
                s0, c0, t0 = _cpu_s(server_pid), time.process_time(), time.perf_counter()
                made += len(api.create_jobs(batch, all_or_nothing=True).created)
                job_ms.append((time.perf_counter() - t0) * 1000)
                job_cpu.append((time.process_time() - c0) * 1000)
                job_server.append((_cpu_s(server_pid) - s0) * 1000)
                calls = [{"task": TASK, "args": [b, i]} for i in range(BATCH_LIMIT)]
                s0, c0, t0 = _cpu_s(server_pid), time.process_time(), time.perf_counter()
                made += len(api.enqueue_many(calls, all_or_nothing=True).created)
                run_ms.append((time.perf_counter() - t0) * 1000)
                run_cpu.append((time.process_time() - c0) * 1000)
                run_server.append((_cpu_s(server_pid) - s0) * 1000)
                progress(2 * count + 2 * (b + 1) * BATCH_LIMIT, total)
        result.figures["api_jobs_batch_1000_ms_p50"] = round(statistics.median(job_ms), 1)
        result.figures["api_jobs_batch_1000_ms_max"] = round(max(job_ms), 1)
        result.figures["api_firings_batch_1000_ms_p50"] = round(statistics.median(run_ms), 1)
        result.figures["api_firings_batch_1000_ms_max"] = round(max(run_ms), 1)
        # the client's CPU (encoding the items, reading the answer)
        result.figures["api_jobs_batch_1000_client_cpu_ms_p50"] = round(
            statistics.median(job_cpu), 1
        )
        result.figures["api_firings_batch_1000_client_cpu_ms_p50"] = round(
            statistics.median(run_cpu), 1
        )
        # the API process's CPU per request (/proc: 10 ms ticks)
        result.figures["api_jobs_batch_1000_server_cpu_ms_p50"] = round(
            statistics.median(job_server)
        )
        result.figures["api_firings_batch_1000_server_cpu_ms_p50"] = round(
            statistics.median(run_server)
        )
        result.figures["load_avg_1m"] = round(os.getloadavg()[0], 2)
        stored = _stored(store)
        result.ran = min(made, stored)
        result.lost = max(0, total - stored)
        result.duplicated = max(0, stored - total)
        progress(total, total)
        return result


def _upserts(app: App, at_: datetime, single_s: float) -> dict[str, int]:
    """``App.schedule`` with its default (``replace=True``, an upsert), one job per
    call for ``single_s`` each: new names, then those names again as stored
    (unchanged), then again with other arguments (a changed definition, the same
    schedule). Jobs/s of each."""
    names: list[str] = []
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < single_s:
        names.append(f"up-{len(names)}")
        app.schedule(TASK, at(at_), name=names[-1])
    figures = {"schedule_upsert_new_jobs_per_s": round(len(names) / (time.perf_counter() - t0))}
    for figure, changed in (("unchanged", False), ("changed", True)):
        n = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < single_s:
            args = (n,) if changed else ()
            app.schedule(TASK, at(at_), name=names[n % len(names)], args=args)
            n += 1
        figures[f"schedule_upsert_{figure}_jobs_per_s"] = round(n / (time.perf_counter() - t0))
    return figures


def _timed(call: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall seconds, this process's CPU seconds, result) of one call."""
    c0, t0 = time.process_time(), time.perf_counter()
    out = call()
    return round(time.perf_counter() - t0, 3), round(time.process_time() - c0, 3), out


def _cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stored(store: Store) -> int:
    """What the bulk calls left in the store: the batch jobs (``many-``, ``api-``) and
    the firings (only the immediate runs have any: no scheduler runs)."""
    jobs = sum(_count(store, prefix) for prefix in ("many-", "api-"))
    return jobs + sum(store.status().counts.values())


def _count(store: Store, prefix: str) -> int:
    n, after = 0, 0
    while page := store.list_jobs(name_prefix=prefix, after_id=after, limit=1000):
        n += len(page)
        after = page[-1].id
    return n


@contextmanager
def _api_server(url: str) -> Iterator[tuple[str, int]]:
    """``cronwheel api`` on this store (authentication off: loopback), as its own process,
    as in production: the client's work does not share the server's interpreter."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "cronwheel", "api", "--store", url, "--port", str(port)]
    server = subprocess.Popen(
        [*command, "--log-level", "warning"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        with Client(base, timeout=2) as probe_client:
            deadline = time.monotonic() + 30
            while not probe_client.ready():
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the API server did not start")
                time.sleep(0.05)
        yield base, server.pid
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
