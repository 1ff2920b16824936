"""Database faults: PostgreSQL restarted under load (``fast`` and ``immediate``), and a
dropped session's cost to the leader.

These restart the shared server: they rely on pytest running tests serially.
"""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.faults.harness import Cluster, ensure_postgres_up, pg_ctl, wait_until

pytestmark = pytest.mark.slow

MARGIN_S = 1.5
MAX_STORE_ERRORS = 60  # per process and outage: a few per second of outage, not a storm


@pytest.mark.timeout(150)
@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_postgres_restart_under_load(cluster: Cluster, mode: str) -> None:
    """Every process survives and reconnects, a leader is re-established, no firing is
    lost, and no claim stays stuck past its visibility timeout."""
    ttl = cluster.sizes.lease_ttl
    vt = 10.0  # claims must survive the outage: a duplicate here would be a real finding
    procs = [
        cluster.start_scheduler("s-1"),
        cluster.start_scheduler("s-2"),
        cluster.start_worker("w1"),
        cluster.start_worker("w2"),
    ]
    cluster.wait_started(procs)
    cluster.wait_leader(15)
    for i in range(cluster.sizes.tickers):
        cluster.ticker(f"tick-{i}", visibility_timeout=vt)
    # in flight during the restart: slow firings whose claims must be completed or re-queued
    cluster.ticker("slow-tick", "1s", task="slow", visibility_timeout=vt, kwargs={"seconds": 1.5})
    wait_until(lambda: cluster.counts().get("succeeded", 0) >= 4, 15, message="warm-up")
    time.sleep(cluster.sizes.run_s)  # load before the fault

    t_down = time.time()
    pg_ctl("restart", "-m", mode)
    ensure_postgres_up()
    t_up = time.time()

    # a leader again, enqueueing: first firing enqueued after the server came back
    _, epoch = cluster.wait_leader(ttl * 2 + 10)
    first = wait_until(
        lambda: cluster.sql(
            "SELECT min(enqueued_at) AS t FROM firings WHERE enqueued_at > to_timestamp(%s)",
            (t_up,),
        )[0]["t"],
        ttl * 2 + 10,
        message="enqueues to resume",
    )
    enqueue_resumed = first.timestamp() - t_up
    first_success = wait_until(
        lambda: cluster.sql(
            "SELECT min(finished_at) AS t FROM firings WHERE state = 'succeeded'"
            " AND started_at > to_timestamp(%s)",
            (t_up,),
        )[0]["t"],
        ttl * 2 + 15,
        message="a firing to succeed after the restart",
    )
    success_resumed = first_success.timestamp() - t_up

    # no claim stuck: past one visibility timeout (+ reaper) after the outage, no running
    # firing has an expired lease
    deadline = t_up + vt + MARGIN_S + 1
    wait_until(lambda: time.time() >= deadline, vt + 5, 0.2)
    stuck = cluster.sql(
        "SELECT id, worker_id, lease_until FROM firings WHERE state = 'running'"
        " AND lease_until < now() - interval '1 second'"
    )
    assert stuck == [], f"claims stuck past their visibility timeout: {stuck}"

    for p in cluster.procs:
        assert p.alive(), f"{p.name} died:\n" + "\n".join(p.lines()[-30:])
    # every process reconnected: each one's node heartbeat was written after the restart
    beats = {
        r["pid"]: r["heartbeat_at"]
        for r in cluster.sql(
            "SELECT pid, max(heartbeat_at) AS heartbeat_at FROM nodes GROUP BY pid"
        )
    }
    for p in cluster.procs:
        assert p.pid in beats and beats[p.pid].timestamp() > t_up, f"{p.name} did not reconnect"
    cluster.assert_healthy_logs()
    store_errors = {p.name: len(p.events("store_unavailable")) for p in cluster.procs}
    assert max(store_errors.values()) <= MAX_STORE_ERRORS, store_errors
    cluster.finish(drain_timeout=vt + 20)
    report = cluster.check()
    report.assert_clean()
    cluster.figures.update(
        mode=mode,
        restart_s=round(t_up - t_down, 3),
        enqueue_resumed_after_up_s=round(enqueue_resumed, 3),
        first_success_after_up_s=round(success_resumed, 3),
        leader_epoch_after=epoch,
        lease_lost_events={p.name: len(p.events("lease_lost")) for p in cluster.schedulers()},
        store_unavailable_events=store_errors,
        ledger=report.summary(),
    )


@pytest.mark.timeout(60)
def test_dropped_sessions_cost_the_leader_under_a_second(cluster: Cluster) -> None:
    """P1 through a dropped connection: after pg_terminate_backend on every session of the
    leader, it reconnects at once and keeps enqueueing on time (its longest pause between
    enqueues stays under 0.6 s, inside the 0.5 s enqueue lead), without losing its lease."""
    s = cluster.start_scheduler("s-1")
    cluster.wait_started([s])
    _, epoch = cluster.wait_leader(15)
    cluster.ticker("tick-0", "200ms")
    wait_until(lambda: cluster.counts().get("queued", 0) >= 5, 10, message="warm-up")
    t_kill = datetime.now(UTC)
    rows = cluster.sql(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS n FROM pg_stat_activity"
        " WHERE datname = %s AND application_name = %s",
        (cluster.db_name, s.app_name),
    )
    assert int(rows[0]["n"]) > 0
    wait_until(lambda: datetime.now(UTC) > t_kill + timedelta(seconds=4), 6, 0.1)
    # the leader's stall: the longest pause between two of its enqueue transactions
    # around the fault (healthy: one 200 ms tick; a 50 ms change poll wakes it sooner)
    txs = [
        r["t"]
        for r in cluster.sql(
            "SELECT DISTINCT enqueued_at AS t FROM firings WHERE enqueued_at BETWEEN %s AND %s"
            " ORDER BY 1",
            (t_kill - timedelta(seconds=1), t_kill + timedelta(seconds=3)),
        )
    ]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(txs)]
    stall = max(gaps, default=0.0)
    lease = cluster.lease()
    cluster.figures.update(
        leader_stall_s=round(stall, 3),
        enqueue_transactions=len(txs),
        lease_lost=len(s.events("lease_lost")),
    )
    assert len(txs) >= 10, txs
    assert stall < 0.6, f"the leader stalled {stall:.2f} s after its sessions were dropped"
    assert lease is not None and lease["epoch"] == epoch, "the leader lost its lease"
