"""Worker faults: SIGKILL mid-run, SIGSTOP past the visibility timeout (zombie), and the
healthy long job that must never be re-delivered.

Re-delivery bound after a worker's death: its claim expires at most one visibility
timeout after its last heartbeat, the leader's reaper runs every second, an idle
worker polls every second (a re-queue sends no NOTIFY): ``vt + 2 s`` plus a margin.
"""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronwheel.domain.firing import idempotency_key
from tests.faults.harness import Cluster, Proc, wait_until

pytestmark = pytest.mark.slow

MARGIN_S = 1.5


def redelivery_bound(vt: float) -> float:
    return vt + 2.0 + MARGIN_S


def _lines(cluster: Cluster, key: str, phase: str) -> list[dict[str, Any]]:
    return [e for e in cluster.executions_log() if e["key"] == key and e["phase"] == phase]


def _firing(cluster: Cluster, job_id: int) -> dict[str, Any]:
    rows = cluster.sql("SELECT * FROM firings WHERE job_id = %s", (job_id,))
    assert len(rows) == 1, rows
    return rows[0]


def _attempts(cluster: Cluster, firing_id: int) -> list[tuple[int, str]]:
    rows = cluster.sql(
        "SELECT attempt, outcome FROM firing_attempts WHERE firing_id = %s ORDER BY attempt",
        (firing_id,),
    )
    return [(r["attempt"], r["outcome"]) for r in rows]


def _worker_id(proc: Proc) -> str:
    return str(proc.events("worker_started")[0]["worker_id"])


def _setup(cluster: Cluster, workers: int = 2) -> list[Proc]:
    s = cluster.start_scheduler("s-1")
    ws = [cluster.start_worker(f"w{i + 1}") for i in range(workers)]
    cluster.wait_started([s, *ws])
    cluster.wait_leader(15)
    return ws


def _slow_job(cluster: Cluster, name: str, seconds: float, vt: float) -> tuple[int, str]:
    when = datetime.now(UTC) + timedelta(seconds=1.0)
    h = cluster.one_shot(
        name, when, task="slow", visibility_timeout=vt, kwargs={"seconds": seconds}
    )
    wait_until(
        lambda: cluster.sql("SELECT id FROM firings WHERE job_id = %s", (h.expectation.job_id,)),
        10,
        message="the slow firing to be enqueued",
    )
    key = f"{h.expectation.job_id}:"
    start = wait_until(
        lambda: [e for e in cluster.executions_log() if e["key"].startswith(key)],
        10,
        message="the slow firing to start",
    )
    return h.expectation.job_id, start[0]["key"]


# -- 3 -------------------------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_sigkill_worker_mid_run_redelivers_same_key_next_attempt(cluster: Cluster) -> None:
    vt = cluster.sizes.vt
    workers = _setup(cluster)
    job_id, key = _slow_job(cluster, "slow-kill", seconds=2.0, vt=vt)
    first = _lines(cluster, key, "start")[0]
    assert first["attempt"] == 1
    victim = cluster.by_pid(first["pid"])
    assert victim in workers
    survivor = next(w for w in workers if w is not victim)
    t_kill = victim.kill()
    cluster.disrupted[victim.pid] = "worker SIGKILLed mid-run"

    second = wait_until(
        lambda: [e for e in _lines(cluster, key, "start") if e["attempt"] == 2],
        redelivery_bound(vt) + 2,
        message="re-delivery (attempt 2)",
    )[0]
    redelivery = second["start"] - t_kill
    assert second["pid"] == survivor.pid
    assert second["key"] == key  # the same idempotency key, attempt + 1
    assert redelivery <= redelivery_bound(vt), f"re-delivered after {redelivery:.2f} s"
    # not before the claim could have expired (last heartbeat <= vt/3 before the kill)
    assert redelivery >= vt * 2 / 3 - 0.2, f"re-delivered too early: {redelivery:.2f} s"

    wait_until(
        lambda: _firing(cluster, job_id)["state"] == "succeeded", 10, message="attempt 2 to succeed"
    )
    row = _firing(cluster, job_id)
    assert row["attempt"] == 2 and row["worker_id"] == _worker_id(survivor)
    assert _attempts(cluster, row["id"]) == [(1, "lease_expired")]
    done = _lines(cluster, key, "done")
    assert [(d["attempt"], d["pid"]) for d in done] == [(2, survivor.pid)]
    effect = cluster.sql("SELECT runs FROM fault_effects WHERE key = %s", (key,))
    assert effect == [{"runs": 1}], "exactly one execution reached its side effect"
    cluster.finish()
    report = cluster.check()
    report.assert_clean()
    cluster.figures.update(
        visibility_timeout_s=vt,
        redelivery_after_kill_s=round(redelivery, 3),
        redelivery_bound_s=round(redelivery_bound(vt), 3),
        ledger=report.summary(),
    )


# -- 4 -------------------------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_sigstop_worker_past_visibility_timeout_is_a_rejected_zombie(cluster: Cluster) -> None:
    """Frozen past its visibility timeout, the worker's firing is re-delivered; woken up,
    the zombie's heartbeat (claim_lost) and completion (completion_rejected) are refused
    by the claim token; the database records exactly one success, attempt 2's."""
    vt = cluster.sizes.vt
    workers = _setup(cluster)
    # long enough that the zombie still runs for a few heartbeats after SIGCONT
    run_s = redelivery_bound(vt) + 4.0
    job_id, key = _slow_job(cluster, "slow-zombie", seconds=run_s, vt=vt)
    first = _lines(cluster, key, "start")[0]
    zombie = cluster.by_pid(first["pid"])
    assert zombie in workers
    other = next(w for w in workers if w is not zombie)
    t_stop = time.time()
    zombie.signal(signal.SIGSTOP)
    cluster.disrupted[zombie.pid] = "worker SIGSTOPped past its visibility timeout (zombie)"

    second = wait_until(
        lambda: [e for e in _lines(cluster, key, "start") if e["attempt"] == 2],
        redelivery_bound(vt) + 2,
        message="re-delivery (attempt 2) while the worker is frozen",
    )[0]
    redelivery = second["start"] - t_stop
    assert second["pid"] == other.pid
    t_cont = time.time()
    zombie.signal(signal.SIGCONT)
    assert redelivery <= redelivery_bound(vt)

    firing_id = _firing(cluster, job_id)["id"]
    lost = wait_until(
        lambda: [e for e in zombie.events("claim_lost") if e["firing_id"] == firing_id],
        5,
        message="the zombie's heartbeat to be rejected (claim_lost)",
    )
    rejected = wait_until(
        lambda: [e for e in zombie.events("completion_rejected") if e["firing_id"] == firing_id],
        run_s + 5,
        message="the zombie's completion to be rejected",
    )
    wait_until(
        lambda: _firing(cluster, job_id)["state"] == "succeeded",
        run_s + 5,
        message="attempt 2 to succeed",
    )
    row = _firing(cluster, job_id)
    assert row["attempt"] == 2 and row["worker_id"] == _worker_id(other)
    assert _attempts(cluster, firing_id) == [(1, "lease_expired")]
    effect = cluster.sql("SELECT runs, pids FROM fault_effects WHERE key = %s", (key,))
    assert effect[0]["runs"] == 2 and sorted(effect[0]["pids"]) == sorted([zombie.pid, other.pid])
    cluster.finish()
    report = cluster.check()
    report.assert_clean()
    assert len(report.duplicate_executions) == 1  # the zombie's, reported as allowed
    cluster.figures.update(
        visibility_timeout_s=vt,
        frozen_s=round(t_cont - t_stop, 3),
        redelivery_after_stop_s=round(redelivery, 3),
        claim_lost_events=len(lost),
        completion_rejected_events=len(rejected),
        duplicate_executions=report.duplicate_executions,
        ledger=report.summary(),
    )


# -- 5 -------------------------------------------------------------------------------------


def _long_healthy_job(cluster: Cluster, vt: float, workers: int, phase: bool) -> dict[str, Any]:
    """Run one job of 5x its visibility timeout; assert it was never re-delivered.

    ``phase``: place the firing so its claim lands just after the worker's heartbeat
    loop began a sleep (the worst case: the first heartbeat of a new claim is then
    furthest away). The worker's heartbeat loop also writes its node heartbeat, so the
    node row's ``heartbeat_at`` tells the loop's phase.
    """
    run_s = 5 * vt
    procs = _setup(cluster, workers)
    when = datetime.now(UTC) + timedelta(seconds=1.0)
    if phase:
        (worker,) = procs
        beats: list[datetime] = []

        def two_beats() -> bool:
            rows = cluster.sql("SELECT heartbeat_at FROM nodes WHERE pid = %s", (worker.pid,))
            if rows and (not beats or rows[0]["heartbeat_at"] != beats[-1]):
                beats.append(rows[0]["heartbeat_at"])
            return len(beats) >= 2

        wait_until(two_beats, 10, 0.02, message="two worker heartbeats")
        period = beats[-1] - beats[-2]
        # enqueued 0.5 s before its instant (the leader's lead) and claimed at once
        # (NOTIFY): the claim lands ~0.15 s after a heartbeat cycle began
        when = beats[-1] + 2 * period + timedelta(seconds=0.65)
    h = cluster.one_shot(
        "slow-healthy", when, task="slow", visibility_timeout=vt, kwargs={"seconds": run_s}
    )
    job_id = h.expectation.job_id
    wait_until(
        lambda: cluster.sql(
            "SELECT 1 FROM firings WHERE job_id = %s AND state IN ('succeeded', 'dead')", (job_id,)
        ),
        (when - datetime.now(UTC)).total_seconds() + run_s + 3 * vt + 5,
        0.1,
        message="the long job to finish",
    )
    row = _firing(cluster, job_id)
    key = idempotency_key(job_id, row["scheduled_for"])
    figures = {
        "visibility_timeout_s": vt,
        "run_s": run_s,
        "workers": workers,
        "attempts": row["attempt"],
        "requeued": _attempts(cluster, row["id"]),
        "claim_lost": sum(len(p.events("claim_lost")) for p in cluster.procs),
    }
    cluster.figures.update(figures)
    assert row["state"] == "succeeded" and row["attempt"] == 1, figures
    assert _attempts(cluster, row["id"]) == []
    assert [e["attempt"] for e in _lines(cluster, key, "start")] == [1]
    assert len(_lines(cluster, key, "done")) == 1
    assert cluster.sql("SELECT runs FROM fault_effects WHERE key = %s", (key,)) == [{"runs": 1}]
    for p in cluster.procs:
        assert not p.events("claims_requeued"), p.name
        assert not p.events("claim_lost"), p.name
        assert not p.events("completion_rejected"), p.name
    cluster.finish()
    report = cluster.check()
    report.assert_clean()
    cluster.figures["ledger"] = report.summary()
    return figures


@pytest.mark.timeout(90)
def test_long_healthy_job_is_never_redelivered(cluster: Cluster) -> None:
    """5x the visibility timeout, two workers: heartbeats keep the claim; attempt stays 1.
    (vt 3 s: above the worker's fixed 2 s heartbeat sleep, see the next test.)"""
    _long_healthy_job(cluster, vt=cluster.sizes.vt, workers=2, phase=False)


@pytest.mark.timeout(90)
def test_long_healthy_job_short_visibility_timeout_worst_phase(cluster: Cluster) -> None:
    """The same promise at the smallest visibility timeout (1 s), with the claim aimed just
    after the worker's heartbeat loop went to sleep."""
    _long_healthy_job(cluster, vt=1.0, workers=1, phase=True)
