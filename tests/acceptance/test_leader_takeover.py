"""Two scheduler processes on one SQLite file: one leader, a standby that takes over.

P2 exactly one node enqueues each firing (lease + epoch fencing + unique key),
P3 a crashed or paused leader loses no firing.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from datetime import datetime, timedelta

import pytest

from cronwheel import FiringState
from tests.acceptance.conftest import Cluster, Proc, check_ledger, executions, wait_until

LEASE_TTL = 2.0
# A standby notices an expired lease on its next renewal attempt (every ttl/3); the
# rest of the margin absorbs a loaded 2-core machine.
TAKEOVER_BOUND_S = LEASE_TTL + LEASE_TTL / 3 + 2.0
PERIOD = timedelta(milliseconds=200)


def _start_pair(cluster: Cluster) -> tuple[dict[str, Proc], Proc]:
    env = {"LEDGER_JOBS": "fast"}
    schedulers = [
        cluster.start("scheduler", "--lease-ttl", str(LEASE_TTL), env=env, name=f"scheduler-{x}")
        for x in "ab"
    ]
    worker = cluster.start("worker", env=env)
    wait_until(
        lambda: (
            all(p.events("scheduler_started") for p in schedulers)
            and worker.events("worker_started")
        ),
        30,
        message=lambda: f"two schedulers and a worker; {cluster.diagnostics()}",
    )
    by_holder = {p.events("scheduler_started")[0]["holder"]: p for p in schedulers}
    return by_holder, worker


def _leader(cluster: Cluster, by_holder: dict[str, Proc]) -> tuple[str, int]:
    status = cluster.cli_json("status")
    assert status["leader"] in by_holder, status
    assert sorted(n["kind"] for n in status["nodes"]) == ["scheduler", "scheduler", "worker"]
    acquired = [h for h, p in by_holder.items() if p.events("lease_acquired")]
    assert acquired == [status["leader"]], (acquired, status)  # exactly one ever led
    return status["leader"], status["epoch"]


def _fast_firings(cluster: Cluster) -> list:
    with cluster.store() as store:
        job = store.get_job("default", "fast")
        return sorted(
            store.list_firings(job_id=job.id, limit=10_000), key=lambda f: f.scheduled_for
        )


def _succeeded_since(cluster: Cluster, since: datetime, n: int) -> bool:
    done = [
        f
        for f in _fast_firings(cluster)
        if f.scheduled_for >= since and f.state is FiringState.SUCCEEDED
    ]
    return len(done) >= n


def _drain_and_check(
    cluster: Cluster, standby: Proc, worker: Proc, epochs: tuple[int, int], takeover_at: datetime
) -> list:
    """Stop the new leader, let the worker finish what is queued, stop it; then check that
    every instant between the first and the last firing was enqueued exactly once, by the
    epoch that led at the time, and executed exactly once."""
    cluster.kill(standby)
    wait_until(
        lambda: all(f.state is FiringState.SUCCEEDED for f in _fast_firings(cluster)),
        20,
        message=lambda: f"the worker to drain the queue; {worker.tail()}",
    )
    cluster.kill(worker)
    firings = _fast_firings(cluster)
    instants = [f.scheduled_for for f in firings]
    gaps = [b - a for a, b in itertools.pairwise(instants)]
    bad = [
        (str(a), str(b))
        for (a, b), g in zip(itertools.pairwise(instants), gaps, strict=True)
        if g != PERIOD
    ]
    assert not bad, f"gaps or duplicates across the takeover: {bad}"
    old, new = epochs
    assert {f.enqueued_epoch for f in firings} == {old, new}
    wrong = [
        (f.id, str(f.scheduled_for), str(f.enqueued_at), f.enqueued_epoch)
        for f in firings
        if f.enqueued_epoch != (old if f.enqueued_at < takeover_at else new)
    ]
    assert not wrong, f"enqueued under the wrong epoch (takeover at {takeover_at}): {wrong}"
    # Epochs never go backwards along the schedule: the old leader wrote nothing after.
    assert [f.enqueued_epoch for f in firings] == sorted(f.enqueued_epoch for f in firings)
    report = check_ledger(
        {f.idempotency_key for f in firings}, executions(cluster.ledger(), job="fast")
    )
    assert report.ok, report.summary()
    late = max((f.started_at - f.scheduled_for).total_seconds() for f in firings)
    print(
        f"{len(firings)} firings {instants[0]:%H:%M:%S.%f}..{instants[-1]:%H:%M:%S.%f}, "
        f"every 200 ms, none lost or doubled; max lateness {late:.2f} s (across the takeover)"
    )
    return firings


@pytest.mark.slow
def test_standby_takes_over_from_a_killed_leader(cluster: Cluster) -> None:
    by_holder, worker = _start_pair(cluster)
    leader_id, epoch = wait_until(lambda: _leader(cluster, by_holder), 20, message="one leader")
    leader = by_holder[leader_id]
    ((standby_id, standby),) = ((h, p) for h, p in by_holder.items() if h != leader_id)
    started = datetime.fromisoformat(leader.events("lease_acquired")[0]["timestamp"])
    wait_until(
        lambda: _succeeded_since(cluster, started, 10),
        20,
        message=lambda: f"10 fast firings under the first leader; {cluster.diagnostics()}",
    )

    cluster.kill(leader)
    killed = time.monotonic()
    with cluster.store() as store:
        old_lease = store.get_lease("dispatcher")
    assert old_lease is not None
    assert (old_lease.holder, old_lease.epoch) == (leader_id, epoch)

    def taken_over():
        with cluster.store() as store:
            lease = store.get_lease("dispatcher")
            alive = lease is not None and lease.expires_at > store.now()
            return lease if alive and lease.epoch > epoch else None

    new_lease = wait_until(taken_over, 20, interval=0.02, message="the standby to take over")
    took = time.monotonic() - killed
    print(
        f"\ntakeover after SIGKILL of the leader: {took:.2f} s "
        f"(lease ttl {LEASE_TTL} s, bound {TAKEOVER_BOUND_S:.2f} s), epoch {epoch} -> "
        f"{new_lease.epoch}"
    )
    assert new_lease.holder == standby_id
    assert new_lease.epoch == epoch + 1
    assert took <= TAKEOVER_BOUND_S, f"takeover took {took:.2f} s"
    # Never before the dead leader's lease ran out.
    assert new_lease.acquired_at >= old_lease.expires_at, (new_lease, old_lease)
    acquired = standby.events("lease_acquired")
    assert [e["epoch"] for e in acquired] == [epoch + 1], acquired
    status = cluster.cli_json("status")
    assert (status["leader"], status["epoch"]) == (standby_id, epoch + 1), status

    wait_until(
        lambda: _succeeded_since(cluster, new_lease.acquired_at + timedelta(seconds=1), 5),
        20,
        message=lambda: f"fast firings under the new leader; {cluster.diagnostics()}",
    )
    _drain_and_check(cluster, standby, worker, (epoch, epoch + 1), new_lease.acquired_at)


@pytest.mark.slow
def test_paused_leader_is_fenced_out_when_it_resumes(cluster: Cluster) -> None:
    """SIGSTOP the leader past its lease: the standby takes over; on SIGCONT the old
    leader must step down (``lease_lost``) and enqueue nothing under its stale epoch."""
    by_holder, worker = _start_pair(cluster)
    leader_id, epoch = wait_until(lambda: _leader(cluster, by_holder), 20, message="one leader")
    leader = by_holder[leader_id]
    ((_, standby),) = ((h, p) for h, p in by_holder.items() if h != leader_id)
    started = datetime.fromisoformat(leader.events("lease_acquired")[0]["timestamp"])
    wait_until(
        lambda: _succeeded_since(cluster, started, 5),
        20,
        message=lambda: f"fast firings under the first leader; {cluster.diagnostics()}",
    )

    cluster.pause(leader)
    try:

        def taken_over():
            with cluster.store() as store:
                lease = store.get_lease("dispatcher")
                return lease if lease is not None and lease.epoch > epoch else None

        new_lease = wait_until(taken_over, 20, interval=0.02, message="the standby to take over")
        # Stay paused a little longer, so it resumes well inside the new leader's term.
        time.sleep(0.5)
    finally:
        os.kill(leader.pid, signal.SIGCONT)
    resumed = time.monotonic()

    lost = wait_until(
        lambda: leader.events("lease_lost"),
        15,
        message=lambda: f"the resumed leader to step down; {leader.tail()}",
    )
    print(
        f"\nresumed leader stepped down after {time.monotonic() - resumed:.2f} s: "
        f"{lost[0].get('reason')}"
    )
    assert lost[0]["epoch"] == epoch
    assert leader.alive(), "a fenced-out leader stands by; it does not crash"
    wait_until(
        lambda: _succeeded_since(cluster, new_lease.acquired_at + timedelta(seconds=1), 5),
        20,
        message=lambda: f"fast firings under the new leader; {cluster.diagnostics()}",
    )
    cluster.kill(leader)
    _drain_and_check(cluster, standby, worker, (epoch, epoch + 1), new_lease.acquired_at)
