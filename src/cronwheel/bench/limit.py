"""``limit``: what the store itself can do on this machine, through the same store code
the processes use, with no scheduler or worker running.

- single-row commits: ``create_job``, one job per transaction, for a fixed time;
- batched inserts: ``create_jobs`` of 5,000 jobs per transaction;
- fenced enqueue: ``enqueue`` of 1,000 firings per transaction under a dispatcher lease
  (the leader's write path), which fills the queue for:
- claims: ``claim`` of 100 firings per call until the queue is empty (no handler);
- completions: ``complete`` of 100 claimed firings per call.

Each is reported as rows/s, so the other workloads can be read as fractions of these.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from cronwheel.bench.registry import all_jobs
from cronwheel.bench.runner import TASK, BenchResult, fresh_store, store_kind
from cronwheel.domain.clock import SystemClock
from cronwheel.domain.models import ClaimedFiring, JobPolicies, JobSpec
from cronwheel.domain.schedules import at
from cronwheel.store.protocol import DISPATCHER_LEASE, Completion, JobAdvance, PlannedFiring

BATCH = 5000
ENQUEUE_BATCH = 1000
CLAIM_BATCH = 100


def run_limit(
    store_url: str | None,
    *,
    count: int,
    single_s: float,
    progress: Callable[[int, int], None],
) -> BenchResult:
    """``count`` rows go through the batched paths (rounded up to whole 5,000 batches)."""
    batches = max(1, -(-count // BATCH))
    rows = batches * BATCH
    with tempfile.TemporaryDirectory() as tmp, fresh_store(store_url, Path(tmp)) as (url, store):
        result = BenchResult(workload="limit", store=store_kind(url), expected=0)
        clock = SystemClock()
        total = rows * 4
        # single-row commits
        n = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < single_s:
            spec = JobSpec(name=f"one-{n}", task=TASK, schedule=at(clock.now() + timedelta(days=1)))
            store.create_job(spec, first_fire_at=None)
            n += 1
        single = n / (time.perf_counter() - t0)
        # batched inserts: one-shot jobs due a second ago, ready to be enqueued
        due = clock.now() - timedelta(seconds=1)
        policies = JobPolicies(misfire_grace=timedelta(hours=1))
        spent = 0.0
        for b in range(batches):
            items = [
                (JobSpec(name=f"b-{b}-{i}", task=TASK, schedule=at(due), policies=policies), due)
                for i in range(BATCH)
            ]
            t0 = time.perf_counter()
            store.create_jobs(items)
            spent += time.perf_counter() - t0
            progress((b + 1) * BATCH, total)
        batched = rows / spent
        # fenced enqueue under the dispatcher lease
        lease = store.acquire_lease(DISPATCHER_LEASE, "bench-limit", timedelta(minutes=10))
        assert lease is not None
        jobs = [j for j in all_jobs(store) if j.spec.name.startswith("b-")]
        spent = 0.0
        for lo in range(0, len(jobs), ENQUEUE_BATCH):
            advances = [
                JobAdvance(
                    job_id=j.id,
                    expected_next_fire_at=due,
                    new_next_fire_at=None,
                    firings=[PlannedFiring(scheduled_for=due)],
                )
                for j in jobs[lo : lo + ENQUEUE_BATCH]
            ]
            t0 = time.perf_counter()
            store.enqueue(lease, advances)
            spent += time.perf_counter() - t0
            progress(rows + lo + len(advances), total)
        enqueued = len(jobs) / spent
        store.release_lease(lease)
        # claims of 100 (no handler), then completions of 100
        claimed: list[ClaimedFiring] = []
        t0 = time.perf_counter()
        while batch := store.claim("bench-limit", tasks=[TASK], limit=CLAIM_BATCH):
            claimed += batch
            if len(claimed) % 5000 < CLAIM_BATCH:
                progress(2 * rows + len(claimed), total)
        claim_rate = len(claimed) / (time.perf_counter() - t0)
        now = clock.now()
        accepted = 0
        t0 = time.perf_counter()
        for lo in range(0, len(claimed), CLAIM_BATCH):
            accepted += sum(
                store.complete(
                    [
                        Completion(
                            firing_id=c.firing.id,
                            claim_token=c.claim_token,
                            succeeded=True,
                            started_at=now,
                            finished_at=now,
                        )
                        for c in claimed[lo : lo + CLAIM_BATCH]
                    ]
                )
            )
        complete_rate = len(claimed) / (time.perf_counter() - t0)
        progress(total, total)
        result.figures["single_commit_rows_per_s"] = round(single)
        result.figures["batch_insert_rows_per_s"] = round(batched)
        result.figures["enqueue_rows_per_s"] = round(enqueued)
        result.figures["claim_rows_per_s"] = round(claim_rate)
        result.figures["complete_rows_per_s"] = round(complete_rate)
        result.expected = rows
        result.ran = accepted
        result.lost = rows - accepted
        return result
