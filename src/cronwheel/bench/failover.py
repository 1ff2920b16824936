"""``failover`` (PostgreSQL): SIGKILL the leader while one-shot jobs fire every 100 ms.

Two schedulers (``--lease-ttl``, 2 s by default) and the workers run; ``count`` one-shot
jobs are due 100 ms apart. Mid-run the leader is found through the lease row (its
holder is a ``nodes`` row with the scheduler's pid) and killed with SIGKILL: no lease
release, no clean shutdown. Reported: the time from the kill to the first firing
enqueued by the new epoch (``enqueued_epoch``/``enqueued_at``, by the database's
clock), the time until the standby held the lease, the lateness of the firings due in
the gap, and, as in every workload, lost and duplicated firings.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from cronwheel.bench.runner import (
    BenchResult,
    Cluster,
    all_firings,
    collect,
    fresh_store,
    percentile,
    register_at_jobs,
    report_progress,
    rounded,
    store_kind,
    wait_until,
)
from cronwheel.domain.clock import SystemClock
from cronwheel.errors import ValidationError
from cronwheel.store.protocol import DISPATCHER_LEASE
from cronwheel.store.url import sqlite_path


def run_failover(
    store_url: str | None,
    *,
    count: int,
    spacing_ms: int,
    lease_ttl_s: float,
    workers: int,
    concurrency: int,
    progress: Callable[[int, int], None],
) -> BenchResult:
    if store_url is None or sqlite_path(store_url) is not None:
        raise ValidationError(
            "failover needs a PostgreSQL store (--store postgresql://...): SQLite is "
            "one file on one host, where a second scheduler has nothing to take over",
            field="store",
        )
    with tempfile.TemporaryDirectory() as tmp, fresh_store(store_url, Path(tmp)) as (url, store):
        result = BenchResult(workload="failover", store=store_kind(url), expected=count)
        clock = SystemClock()
        cluster = Cluster(
            url,
            workers,
            concurrency,
            Path(tmp),
            schedulers=2,
            scheduler_args=["--lease-ttl", str(lease_ttl_s)],
        )
        with cluster:
            if not wait_until(lambda: store.get_lease(DISPATCHER_LEASE) is not None, 30):
                raise RuntimeError("no scheduler took the dispatcher lease within 30 s")
            first = clock.now() + timedelta(seconds=3)
            instants = [first + timedelta(milliseconds=spacing_ms * i) for i in range(count)]
            ids = register_at_jobs(store, instants, "failover")
            run_s = count * spacing_ms / 1000
            kill_at_mono = time.monotonic() + 3 + run_s * 0.4
            while time.monotonic() < kill_at_mono:
                report_progress(store, count, progress)
                time.sleep(0.2)
            lease = store.get_lease(DISPATCHER_LEASE)
            assert lease is not None
            pids = {n.id: n.pid for n in store.list_nodes()}
            leader = next((p for p in cluster.schedulers if p.pid == pids.get(lease.holder)), None)
            if leader is None:
                raise RuntimeError(f"the lease holder {lease.holder!r} is not one of ours")
            leader.kill()  # SIGKILL
            killed_at = clock.now()
            old_epoch = lease.epoch
            wait_until(lambda: report_progress(store, count, progress), 3 + run_s + 60)
            new_lease = store.get_lease(DISPATCHER_LEASE)
        collect(store, result, ids)
        firings = [f for f in all_firings(store) if f.job_id in ids]
        by_new = [f for f in firings if (f.enqueued_epoch or 0) > old_epoch]
        result.figures["lease_ttl_s"] = lease_ttl_s
        result.figures["killed_epoch"] = old_epoch
        if new_lease is not None and new_lease.epoch > old_epoch:
            result.figures["lease_taken_after_s"] = rounded(
                (new_lease.acquired_at - killed_at).total_seconds()
            )
        if by_new:
            first_new = min(f.enqueued_at for f in by_new)
            takeover = (first_new - killed_at).total_seconds()
            result.figures["first_new_enqueue_after_s"] = rounded(takeover)
            result.figures["target_s"] = lease_ttl_s + 0.5
            gap = [
                (f.started_at - f.scheduled_for).total_seconds() * 1000
                for f in firings
                if killed_at < f.scheduled_for <= first_new and f.started_at is not None
            ]
            result.figures["gap_firings"] = len(gap)
            result.figures["gap_lateness_p50_ms"] = rounded(percentile(gap, 50))
            result.figures["gap_lateness_max_ms"] = rounded(max(gap) if gap else None)
        else:
            result.figures["first_new_enqueue_after_s"] = None
        return result
