"""``partitions`` (PostgreSQL): what the number of day partitions of firings costs the
hot paths. For each count N, a fresh database whose firings have day partitions for
today, the N - 1 days before it and tomorrow (empty: only their number differs); one
``enqueue_now`` and one claim + completion through the store (soak's hot paths), the
median of ``calls`` calls, three times, the median of the three; and a claim +
completion of a recurring job with the default policies (``claim_recurring_ms``: the
planned claim, which counts each job's held firings, see store/claiming.py); and a held
firing's own calls (``held_ms``: a firing claimed ahead of its start, then its start, one
heartbeat and its completion: the statements that find a held firing by its claim
token, planned for the partition the token names); and the periodic reads of the live
work (``status_ms``: ``status``; ``next_due_ms``: an idle worker's hint of the next
instant), each after ``WARM_CALLS`` calls (soak's). The leader keeps
about ``keep_for`` + 2 partitions (README "Partitions by day"): 9 with the default
7 days, 32 with 30."""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from cronwheel.bench.runner import fresh_store
from cronwheel.bench.soak import WARM_CALLS, claim_and_complete, hot_paths, median_ms, succeeded
from cronwheel.domain.models import JobSpec
from cronwheel.domain.schedules import every
from cronwheel.domain.schedules import now as now_schedule
from cronwheel.store.protocol import DISPATCHER_LEASE, JobAdvance, PlannedFiring

DEFAULT_COUNTS = (2, 10, 40)  # days back from today (tomorrow's is made too)
TIMED = ("enqueue_ms", "claim_ms", "claim_recurring_ms", "held_ms", "status_ms", "next_due_ms")
ROUNDS = 3


def run_partitions(
    url: str, counts: Sequence[int] = DEFAULT_COUNTS, calls: int = 50
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for n in counts:
        with tempfile.TemporaryDirectory() as tmp, fresh_store(url, Path(tmp)) as (_u, store):
            store.migrate()
            pg: Any = store  # PostgresStore: db, partitions
            now = store.now()

            def make(tx: Any, now: Any = now, n: int = n) -> None:
                for i in range(n):
                    tx.one("partition_ensure", {"at": now - i * timedelta(days=1)})

            pg.db.write(make, atomic=False)
            held = len([p for p in pg.partitions() if p[0] != "firings_legacy"])
            runs = []
            for r in range(ROUNDS):
                runs.append(hot_paths(store, calls=calls, prefix=f"p{r}"))
            rows.append(
                {
                    "partitions": held,
                    "enqueue_ms": round(statistics.median(x["enqueue_ms"] for x in runs), 2),
                    "claim_ms": round(statistics.median(x["claim_ms"] for x in runs), 2),
                    "claim_recurring_ms": _recurring(store, calls),
                    "held_ms": _held(store, calls),
                    "status_ms": median_ms(store.status, calls, warm=WARM_CALLS),
                    "next_due_ms": median_ms(store.next_due_at, calls, warm=WARM_CALLS),
                }
            )
    base = rows[0]
    for row in rows:
        for key in TIMED:
            row[key.replace("_ms", "_ratio")] = round(row[key] / base[key], 2)
    return {"workload": "partitions", "calls": calls, "rows": rows}


def _recurring(store: Any, calls: int) -> float:
    """Median ms of a claim + completion of a recurring job (default policies, a firing
    due now each), over ``calls`` of them after as many untimed (psycopg prepares a
    statement at its fifth execution, PostgreSQL plans it generically after five more)."""
    now = store.now()
    specs = [
        (JobSpec(name=f"rec-{i}", task="bench.rec", schedule=every("1h")), now)
        for i in range(2 * calls)
    ]
    store.create_jobs(specs)
    jobs = [store.get_job("default", f"rec-{i}") for i in range(2 * calls)]
    lease = store.acquire_lease(DISPATCHER_LEASE, "bench-partitions", timedelta(minutes=5))
    advances = [
        JobAdvance(
            job_id=j.id,
            expected_next_fire_at=j.next_fire_at,
            new_next_fire_at=now + timedelta(hours=1),
            firings=[PlannedFiring(scheduled_for=now)],
        )
        for j in jobs
    ]
    store.enqueue(lease, advances)
    times = []
    for i in range(2 * calls):
        t0 = time.perf_counter()
        claim_and_complete(store, "bench.rec")
        if i >= calls:
            times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 2)


def _held(store: Any, calls: int) -> float:
    """Median ms of a held firing's start + heartbeat + completion (claimed with
    ``start=0``, untimed), over ``calls`` of them after as many untimed."""
    times = []
    for i in range(2 * calls):
        store.enqueue_now(JobSpec(name=f"held-{i}", task="bench.held", schedule=now_schedule()))
        (c,) = store.claim("bench-partitions", tasks=["bench.held"], limit=1, start=0)
        held = [(c.firing.id, c.claim_token)]
        t0 = time.perf_counter()
        started = store.start("bench-partitions", held)
        lost = store.heartbeat("bench-partitions", held)
        (ok,) = store.complete([succeeded(c, store.now())])
        if i >= calls:
            times.append((time.perf_counter() - t0) * 1000)
        if started != {c.firing.id} or lost or not ok:
            raise RuntimeError(f"a held firing's calls failed: {started} {lost} {ok}")
    return round(statistics.median(times), 2)
