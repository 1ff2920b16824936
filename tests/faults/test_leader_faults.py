"""Leader faults: SIGKILL mid-batch, SIGSTOP past the lease, killed sessions, churn.

Every scenario bounds its recovery time and ends with a clean ledger (see ledger.py).
Takeover bound: the dead leader's lease expires at most ``ttl`` after its last
renewal, a standby retries every ``ttl / 3``, then enqueues at once: ``ttl * 4/3``
plus a margin for process scheduling on a loaded 2-core CI machine.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.faults.harness import Cluster, Proc, wait_until
from tests.faults.ledger import lease_terms

pytestmark = pytest.mark.slow

MARGIN_S = 1.5


def takeover_bound(ttl: float) -> float:
    return ttl * 4 / 3 + MARGIN_S


def _state(proc: Proc) -> str:
    """The kernel's state letter of a process (T = stopped)."""
    with open(f"/proc/{proc.pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _epoch_rows(cluster: Cluster, job_ids: list[int]) -> dict[int | None, int]:
    rows = cluster.sql(
        "SELECT enqueued_epoch AS e, count(*) AS n FROM firings WHERE job_id = ANY(%s)"
        " GROUP BY enqueued_epoch",
        (job_ids,),
    )
    return {r["e"]: int(r["n"]) for r in rows}


# -- 1 -------------------------------------------------------------------------------------


@pytest.mark.timeout(150)
def test_sigkill_leader_mid_enqueue_batch(cluster: Cluster) -> None:
    """The leader dies inside its second enqueue transaction (after the inserts, before
    COMMIT): nothing of that batch exists, a standby leads within the bound and
    enqueues each of its instants exactly once."""
    ttl = cluster.sizes.lease_ttl
    a = cluster.start_scheduler("s-a", failpoints="store.enqueue.before_commit=kill@2")
    cluster.wait_started([a])
    leader, epoch_a = cluster.wait_leader(15)
    assert leader is a
    b = cluster.start_scheduler("s-b")
    w = cluster.start_worker("w1", concurrency=16)
    cluster.wait_started([b, w])

    n = cluster.sizes.batch
    created = time.monotonic()
    t1 = datetime.now(UTC) + timedelta(seconds=2.5 + 0.01 * n * 1.5)
    t2 = t1 + timedelta(seconds=1.5)
    group_a = [cluster.one_shot(f"a-{i:04d}", t1) for i in range(n // 2)]
    group_b = [cluster.one_shot(f"b-{i:04d}", t2) for i in range(n)]
    assert datetime.now(UTC) < t1 - timedelta(seconds=0.6), (
        f"creating {len(group_a) + len(group_b)} jobs took {time.monotonic() - created:.1f} s:"
        " the batch instants were not far enough ahead"
    )
    ids_a = [h.expectation.job_id for h in group_a]
    ids_b = [h.expectation.job_id for h in group_b]

    # batch 1 commits under epoch_a; batch 2 kills the leader before its COMMIT
    wait_until(
        lambda: not a.alive(),
        (t2 - datetime.now(UTC)).total_seconds() + 10,
        0.01,
        message="the leader to die at its failpoint",
    )
    t_kill = time.time()
    assert a.popen.returncode == -signal.SIGKILL
    assert a.failpoint_hits("store.enqueue.before_commit") == 1
    lease = cluster.lease()
    assert lease is not None
    still_a = lease["epoch"] == epoch_a
    rows_a = _epoch_rows(cluster, ids_a)
    rows_b = _epoch_rows(cluster, ids_b)
    assert rows_a == {epoch_a: len(ids_a)}, f"batch 1 must be whole under epoch {epoch_a}"
    assert epoch_a not in rows_b, f"the killed batch left rows: {rows_b}"
    if still_a:  # the standby cannot have taken over yet: nothing at all of batch 2
        assert rows_b == {}, rows_b
        cursors = cluster.sql(
            "SELECT count(*) AS n FROM jobs WHERE id = ANY(%s) AND next_fire_at = %s",
            (ids_b, t2),
        )
        assert int(cursors[0]["n"]) == len(ids_b), "killed batch moved some cursors"

    new_leader, epoch_b = cluster.wait_leader(takeover_bound(ttl) + 1, not_epoch=epoch_a)
    assert new_leader is b and epoch_b > epoch_a
    wait_until(
        lambda: sum(_epoch_rows(cluster, ids_b).values()) >= len(ids_b),
        takeover_bound(ttl) + 5,
        message="the standby to enqueue the killed batch",
    )
    first = cluster.first_enqueue_of_epoch(epoch_b)
    assert first is not None
    takeover = first.timestamp() - t_kill
    assert _epoch_rows(cluster, ids_b) == {epoch_b: len(ids_b)}
    assert takeover <= takeover_bound(ttl), f"takeover took {takeover:.2f} s"

    wait_until(
        lambda: cluster.one_shots_done(group_a + group_b),
        30,
        0.1,
        message="every one-shot firing to succeed",
    )
    cluster.finish()
    report = cluster.check()
    report.assert_clean()
    cluster.figures.update(
        lease_ttl_s=ttl,
        batch_size=len(ids_b),
        takeover_s=round(takeover, 3),
        takeover_bound_s=round(takeover_bound(ttl), 3),
        epochs=[epoch_a, epoch_b],
        ledger=report.summary(),
    )


# -- 2 -------------------------------------------------------------------------------------


@pytest.mark.timeout(150)
def test_sigstop_leader_past_its_lease_is_fenced_out(cluster: Cluster) -> None:
    """The leader freezes right before an enqueue for 3x its lease. Meanwhile a standby
    leads with a higher epoch. Woken up, the old leader's pending write is rejected by
    the fence (lease_lost), it accepts nothing more, and it stands by."""
    ttl = cluster.sizes.lease_ttl
    nth = 8
    a = cluster.start_scheduler("s-a", failpoints=f"dispatch.before_enqueue=stop@{nth}")
    cluster.wait_started([a])
    leader, epoch_a = cluster.wait_leader(15)
    assert leader is a
    b = cluster.start_scheduler("s-b")
    w = cluster.start_worker("w1")
    cluster.wait_started([b, w])
    for i in range(cluster.sizes.tickers):
        cluster.ticker(f"tick-{i}")

    wait_until(
        lambda: a.failpoint_hits("dispatch.before_enqueue") == 1,
        30,
        0.01,
        message="the leader to freeze at its failpoint",
    )
    t_freeze = time.time()
    wait_until(lambda: _state(a) == "T", 5, 0.01, message="the leader to be stopped")

    new_leader, epoch_b = cluster.wait_leader(takeover_bound(ttl) + 1, not_epoch=epoch_a)
    assert new_leader is b and epoch_b > epoch_a
    first_b = wait_until(
        lambda: cluster.first_enqueue_of_epoch(epoch_b), 5, message="the new leader's first enqueue"
    )
    takeover = first_b.timestamp() - t_freeze

    # keep it frozen for 3x its lease (a fixed fault duration, not a wait for a result)
    time.sleep(max(0.0, t_freeze + 3 * ttl - time.time()))
    t_cont = time.time()
    a.signal(signal.SIGCONT)
    lost = wait_until(lambda: a.events("lease_lost"), 10, message="the old leader's lease_lost")
    fenced = lost[0]
    step_down_s = parse_event_ts(fenced) - t_cont
    assert fenced["epoch"] == epoch_a
    assert "no longer held" in fenced["reason"], (
        f"expected the woken leader's enqueue to be fenced out, got {fenced}"
    )
    # it stands by: B keeps the lease for a while and A never acquires again
    t_check = time.monotonic()
    wait_until(lambda: time.monotonic() - t_check > ttl * 1.5, ttl * 2, 0.1)
    assert cluster.leader() is b
    assert len(a.events("lease_acquired")) == 1
    assert a.alive()

    cluster.finish()
    accepted_after = cluster.sql(
        "SELECT count(*) AS n FROM firings WHERE enqueued_epoch = %s"
        " AND enqueued_at >= to_timestamp(%s)",
        (epoch_a, t_freeze),
    )
    assert int(accepted_after[0]["n"]) == 0, "the frozen leader's epoch enqueued after its freeze"
    during = cluster.sql(
        "SELECT count(*) AS n FROM firings WHERE enqueued_epoch = %s"
        " AND enqueued_at BETWEEN to_timestamp(%s) AND to_timestamp(%s)",
        (epoch_b, t_freeze, t_cont),
    )
    assert int(during[0]["n"]) > 0, "no node enqueued while the leader was frozen"
    report = cluster.check()
    report.assert_clean()
    cluster.figures.update(
        lease_ttl_s=ttl,
        frozen_s=round(t_cont - t_freeze, 3),
        takeover_after_freeze_s=round(takeover, 3),
        fenced_lease_lost_after_sigcont_s=round(step_down_s, 3),
        fenced_writes=len(lost),
        epochs=[epoch_a, epoch_b],
        ledger=report.summary(),
    )


def parse_event_ts(event: dict[str, object]) -> float:
    return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()


# -- 7 -------------------------------------------------------------------------------------


@pytest.mark.timeout(150)
def test_terminating_leader_sessions_never_yields_unfenced_leadership(cluster: Cluster) -> None:
    """pg_terminate_backend on every session of the current leader, repeatedly. The
    processes survive, leadership is only ever taken by a committed lease write (each
    lease_acquired shows in the sampled lease row), and the ledger stays clean."""
    ttl = cluster.sizes.lease_ttl
    s1, s2 = cluster.start_scheduler("s-1"), cluster.start_scheduler("s-2")
    w = cluster.start_worker("w1")
    cluster.wait_started([s1, s2, w])
    cluster.wait_leader(15)
    for i in range(cluster.sizes.tickers):
        cluster.ticker(f"tick-{i}")
    wait_until(lambda: cluster.counts().get("succeeded", 0) >= 2, 10, message="warm-up")

    terminated: list[int] = []
    rounds = cluster.sizes.terminate_rounds
    for _ in range(rounds):
        leader = cluster.leader()
        if leader is not None:
            rows = cluster.sql(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS n"
                " FROM pg_stat_activity WHERE datname = %s AND application_name = %s",
                (cluster.db_name, leader.app_name),
            )
            terminated.append(int(rows[0]["n"]))
        time.sleep(0.7)  # pacing of the fault, not a wait for an outcome
    assert sum(terminated) > 0, "found no leader session to terminate"

    t_end = time.time()
    _, epoch = cluster.wait_leader(takeover_bound(ttl) + 3)
    wait_until(
        lambda: cluster.sql(
            "SELECT count(*) AS n FROM firings WHERE enqueued_at > to_timestamp(%s)", (t_end,)
        )[0]["n"],
        takeover_bound(ttl) + 3,
        message="enqueues to resume",
    )
    recovered = time.time() - t_end
    for p in cluster.procs:
        assert p.alive(), f"{p.name} died:\n" + "\n".join(p.lines()[-20:])
    cluster.assert_healthy_logs()
    cluster.finish()
    report = cluster.check()
    report.assert_clean()
    # leadership only through a committed write: every acquisition a process logged
    # was seen in the lease row (each epoch lives >= ttl: the sampler cannot miss it)
    terms = lease_terms(cluster.sampler.history())
    for e in cluster.acquired_events():
        assert e.epoch in terms and e.holder in terms[e.epoch]["holders"], e
    store_errors = {p.name: len(p.events("store_unavailable")) for p in cluster.procs}
    cluster.figures.update(
        rounds=rounds,
        sessions_terminated=sum(terminated),
        epochs_seen=sorted(terms),
        final_epoch=epoch,
        enqueue_resumed_after_last_round_s=round(recovered, 3),
        store_unavailable_events=store_errors,
        ledger=report.summary(),
    )


# -- 8 -------------------------------------------------------------------------------------


@pytest.mark.timeout(240 if os.environ.get("CRONWHEEL_FAULTS_FULL") else 120)
def test_leader_churn(cluster: Cluster) -> None:
    """Three schedulers; the leader is SIGKILLed every few seconds and a supervisor (the
    test) starts a replacement at once. Epochs strictly increase, no two leases overlap
    by database time, every takeover is within the bound, the ledger is clean."""
    ttl = cluster.sizes.lease_ttl
    schedulers = [cluster.start_scheduler(f"s-{i}") for i in range(3)]
    workers = [cluster.start_worker("w1"), cluster.start_worker("w2")]
    cluster.wait_started(schedulers + workers)
    _, epoch = cluster.wait_leader(15)
    for i in range(cluster.sizes.tickers):
        cluster.ticker(f"tick-{i}")

    takeovers: list[float] = []
    kills = 0
    started = time.monotonic()
    pending: tuple[float, int] | None = None  # (kill instant, killed epoch)
    while True:
        leader, epoch = cluster.wait_leader(takeover_bound(ttl) + 3, not_epoch=None)
        first = wait_until(
            lambda epoch=epoch: cluster.first_enqueue_of_epoch(epoch),
            takeover_bound(ttl) + 3,
            message=f"an enqueue under epoch {epoch}",
        )
        if pending is not None:
            t_kill, killed = pending
            assert epoch > killed
            takeovers.append(first.timestamp() - t_kill)
            pending = None
        if time.monotonic() - started > cluster.sizes.churn_s:
            break
        time.sleep(cluster.sizes.churn_every_s)  # the churn rhythm
        lease = cluster.lease()  # one read: the leader and the epoch it holds
        leader = cluster.leader(lease)
        if leader is None or lease is None:
            continue
        pending = (leader.kill(), int(lease["epoch"]))
        kills += 1
        cluster.start_scheduler(f"s-{len(cluster.schedulers())}")  # the supervisor

    assert kills >= 3
    bound = takeover_bound(ttl)
    assert all(t <= bound for t in takeovers), f"takeovers {takeovers} > {bound:.2f} s"
    cluster.finish()
    report = cluster.check()
    report.assert_clean()
    epochs = sorted(e.epoch for e in cluster.acquired_events())
    assert len(epochs) == len(set(epochs)) and len(epochs) >= kills + 1
    cluster.figures.update(
        lease_ttl_s=ttl,
        kills=kills,
        takeovers_s=[round(t, 3) for t in takeovers],
        takeover_max_s=round(max(takeovers), 3),
        takeover_bound_s=round(bound, 3),
        epochs=epochs,
        ledger=report.summary(),
    )
