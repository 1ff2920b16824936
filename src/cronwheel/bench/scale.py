"""``scale``: a million registered jobs (the bulk path).

Reports the registration rate, the store's size on disk, the scheduler's peak RSS
with every job registered, and the dispatcher's per-tick cost at N jobs divided by
its cost at 10,000: the due-jobs scan the dispatcher runs every tick
(``store.due_jobs(now + lookahead, limit=scan_page)`` with DispatcherConfig's
defaults), averaged over many calls.

The jobs are one-shots spread uniformly over a day. Both measurements see the same
due set: the first 10,000 jobs include the ``N / 86400 * lookahead`` jobs (58 at a
million) that a uniform spread puts inside one lookahead window, so at 10,000 and at
N jobs the scan returns the same rows and any difference in its cost comes from the
jobs that are *not* due (it must be none: the query is a range scan of the partial
index ``jobs_due``). The plan is checked: ``EXPLAIN (FORMAT JSON)`` on PostgreSQL (an
index scan on ``jobs_due``, no Seq Scan on jobs), ``EXPLAIN QUERY PLAN`` on SQLite.
The planner statistics are refreshed (ANALYZE) before each measurement, as
autovacuum would after a bulk load.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cronwheel.bench.runner import TASK, BenchResult, Cluster, fresh_store, rounded, store_kind
from cronwheel.dispatch.dispatcher import DispatcherConfig
from cronwheel.domain.clock import SystemClock
from cronwheel.domain.models import JobPolicies, JobSpec
from cronwheel.domain.schedules import at
from cronwheel.store.protocol import Store
from cronwheel.store.url import sqlite_path

CHUNK = 5000
DAY_S = 86_400.0
BASE_COUNT = 10_000


def run_scale(
    store_url: str | None,
    *,
    count: int,
    workers: int,
    concurrency: int,
    calls: int = 1000,
    settle_s: float = 15.0,
    progress: Callable[[int, int], None],
) -> BenchResult:
    config = DispatcherConfig()
    lookahead_s = config.lookahead.total_seconds()
    base_count = min(BASE_COUNT, max(count // 10, 1))
    due_count = max(1, round(count / DAY_S * lookahead_s))
    with tempfile.TemporaryDirectory() as tmp, fresh_store(store_url, Path(tmp)) as (url, store):
        result = BenchResult(workload="scale", store=store_kind(url), expected=0)
        # Nothing is due while the measurements run: the day starts in an hour.
        base = SystemClock().now() + timedelta(hours=1)
        horizon = base + config.lookahead
        rng = random.Random(7)
        policies = JobPolicies(misfire_grace=timedelta(minutes=10))

        def instant(i: int) -> datetime:
            if i < due_count:  # inside the first lookahead window
                return base + timedelta(seconds=lookahead_s * i / due_count)
            return horizon + timedelta(seconds=rng.uniform(0.001, DAY_S - lookahead_s))

        register_s = 0.0

        def register(lo: int, hi: int) -> None:
            nonlocal register_s
            for start in range(lo, hi, CHUNK):
                items = []
                for i in range(start, min(start + CHUNK, hi)):
                    t = instant(i)
                    items.append(
                        (JobSpec(name=f"s-{i}", task=TASK, schedule=at(t), policies=policies), t)
                    )
                t0 = time.perf_counter()
                store.create_jobs(items)
                register_s += time.perf_counter() - t0
                progress(min(start + CHUNK, hi), count)

        register(0, base_count)
        _analyze(url)
        small = _tick_cost(store, horizon, config.scan_page, calls)
        plan_small = explain_due_jobs(url, horizon, config.scan_page)
        register(base_count, count)
        result.figures["register_s"] = round(register_s, 3)
        result.figures["register_jobs_per_s"] = round(count / max(register_s, 1e-6))
        if count != 1_000_000:
            result.figures["register_1M_s_extrapolated"] = round(register_s * 1e6 / count, 1)
        _analyze(url)
        large = _tick_cost(store, horizon, config.scan_page, calls)
        plan = explain_due_jobs(url, horizon, config.scan_page)
        result.figures["store_size_mb"] = round(store_size(url) / 2**20, 1)
        with Cluster(url, workers, concurrency, Path(tmp)) as cluster:
            time.sleep(settle_s)
            mem = proc_memory(cluster.scheduler.pid)
        result.figures["scheduler_peak_rss_mb"] = rounded(mem.get("VmHWM", 0) / 1024)
        result.figures["jobs"] = count
        result.figures["due_rows_per_scan"] = large["rows"]
        result.figures[f"tick_ms_at_{base_count}"] = rounded(small["mean_ms"])
        result.figures[f"tick_ms_at_{count}"] = rounded(large["mean_ms"])
        result.figures["tick_ratio"] = rounded(large["mean_ms"] / max(small["mean_ms"], 1e-9))
        result.figures["tick_p50_ratio"] = rounded(large["p50_ms"] / max(small["p50_ms"], 1e-9))
        result.figures["due_plan"] = plan["summary"]
        result.figures["due_plan_index_scan"] = plan["uses_index"] and plan_small["uses_index"]
        if large["rows"] != small["rows"]:
            result.figures["due_rows_mismatch"] = f"{small['rows']} vs {large['rows']}"
        return result


def _tick_cost(store: Store, horizon: datetime, limit: int, calls: int) -> dict[str, Any]:
    for _ in range(max(calls // 10, 3)):  # warm caches and connections
        rows = len(store.due_jobs(horizon, limit=limit))
    times: list[float] = []
    for _ in range(calls):
        t0 = time.perf_counter()
        store.due_jobs(horizon, limit=limit)
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return {"rows": rows, "mean_ms": sum(times) / len(times), "p50_ms": times[len(times) // 2]}


def _analyze(url: str) -> None:
    path = sqlite_path(url)
    if path is not None:
        import sqlite3

        with sqlite3.connect(path) as conn:
            conn.execute("ANALYZE jobs")
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE jobs")


def explain_due_jobs(url: str, horizon: datetime, limit: int) -> dict[str, Any]:
    """The plan of the store's own ``due_jobs`` query; ``uses_index`` when it is a range
    scan of ``jobs_due`` (and, on PostgreSQL, no Seq Scan of jobs anywhere)."""
    path = sqlite_path(url)
    if path is not None:
        import sqlite3

        from cronwheel.store.codec import to_us
        from cronwheel.store.sql import load_package_queries

        sql = load_package_queries("cronwheel.store.sqlite")["due_jobs"]
        with sqlite3.connect(path) as lite:
            rows = lite.execute(
                "EXPLAIN QUERY PLAN " + sql,
                {"horizon": to_us(horizon), "limit": limit, "after_at": -(2**62), "after_id": 0},
            ).fetchall()
        details = [str(r[-1]) for r in rows]
        uses = any("USING INDEX jobs_due" in d for d in details) and not any(
            d.startswith("SCAN jobs") and "jobs_due" not in d for d in details
        )
        return {"summary": "; ".join(details), "uses_index": uses}
    import psycopg

    from cronwheel.store.postgres.db import load_sql, query

    sql = load_sql()["due_jobs"]
    params = {
        "horizon": horizon,
        "limit": limit,
        "after_at": datetime(1, 1, 2, tzinfo=UTC),
        "after_id": 0,
        "_pin": None,
        "_off": timedelta(0),
    }
    with psycopg.connect(url, autocommit=True) as conn:
        cur = psycopg.ClientCursor(conn)
        cur.execute(query("EXPLAIN (FORMAT JSON) " + sql), params)
        row = cur.fetchone()
    assert row is not None
    doc = row[0]
    nodes: list[dict[str, Any]] = []

    def walk(node: dict[str, Any]) -> None:
        nodes.append(node)
        for child in node.get("Plans", []):
            walk(child)

    walk(doc[0]["Plan"])
    scans = [
        f"{n['Node Type']}" + (f" using {n['Index Name']}" if "Index Name" in n else "")
        for n in nodes
        if "Scan" in n["Node Type"]
    ]
    index_scan = any(
        n.get("Index Name") == "jobs_due"
        and n["Node Type"] in ("Index Scan", "Index Only Scan", "Bitmap Index Scan")
        for n in nodes
    )
    seq_on_jobs = any(
        n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "jobs" for n in nodes
    )
    return {
        "summary": " > ".join(n["Node Type"] for n in nodes) + f" [{'; '.join(scans)}]",
        "uses_index": index_scan and not seq_on_jobs,
    }


def store_size(url: str) -> int:
    path = sqlite_path(url)
    if path is not None:
        return sum(os.path.getsize(path + s) for s in ("", "-wal") if os.path.exists(path + s))
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    assert row is not None
    return int(row[0])


def proc_memory(pid: int) -> dict[str, int]:
    """VmHWM (peak RSS) and VmRSS of a process, in KiB, from /proc/<pid>/status."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmHWM", "VmRSS"):
                    out[key] = int(value.split()[0])
    except OSError:
        pass
    return out
