"""Crashes on the real clock: kill -9 of a whole node mid-burst, and of a worker mid-run.

P2 exactly one enqueue per firing, P3 a crashed node loses no firing (misfire
policy on restart), P4 a worker crash loses no firing (claims are leases), P5
the idempotency key is stable across redeliveries.
"""

from __future__ import annotations

import itertools
import math
import os
import signal
import time
from datetime import UTC, datetime, timedelta

import pytest

from cronwheel import App, FiringState, at, idempotency_key, now
from cronwheel.web.ids import ids_for
from tests.acceptance.conftest import Cluster, check_ledger, executions, wait_until

BURST = 300
BURST_SLEEP_S = 0.05  # each burst execution takes a little while: the kill lands mid-burst
KILL_AFTER_DONE = 40


def _burst_states(cluster: Cluster) -> dict[str, int]:
    return dict(
        cluster.query(
            "SELECT state, count(*) FROM firings WHERE job_name LIKE 'burst-%' GROUP BY state"
        )
    )


@pytest.mark.slow
def test_kill_node_mid_burst_then_restart_loses_nothing(cluster: Cluster) -> None:
    serve = cluster.start("serve", env={"LEDGER_JOBS": "catchup"}, name="serve-1")
    wait_until(
        lambda: serve.events("worker_started") and serve.events("lease_acquired"),
        30,
        message=lambda: f"the node to come up; {cluster.diagnostics()}",
    )

    # 300 one-shot jobs due in the same (whole) second, a few seconds ahead.
    burst_at = datetime.fromtimestamp(math.ceil(time.time() + 3), UTC)
    registering = time.monotonic()
    app = App(cluster.store_url)
    try:
        jobs = [
            app.schedule(
                "record",
                at(burst_at),
                name=f"burst-{i:03d}",
                args=(BURST_SLEEP_S,),
                visibility_timeout=2,
                retries=3,
            )
            for i in range(BURST)
        ]
    finally:
        app.close()
    print(f"\nregistered {BURST} jobs in {time.monotonic() - registering:.2f} s")
    assert datetime.now(UTC) < burst_at, "registering the burst took longer than its lead time"
    expected = {idempotency_key(job.id, burst_at) for job in jobs}

    # SIGKILL serve and its children (one process group) while the burst runs.
    wait_until(
        lambda: len(executions(cluster.ledger(), job_prefix="burst-")) >= KILL_AFTER_DONE,
        30,
        interval=0.02,
        message=lambda: f"{KILL_AFTER_DONE} burst executions; {cluster.diagnostics()}",
    )
    cluster.kill(serve)
    killed = time.monotonic()
    done_at_kill = len(executions(cluster.ledger(), job_prefix="burst-"))
    with cluster.store() as store:
        in_flight = {
            f.idempotency_key
            for f in store.list_firings(states=[FiringState.RUNNING], limit=10_000)
        }
        cursor_at_kill = store.get_job("default", "catchup").next_fire_at
        epoch_before = store.get_lease("dispatcher").epoch
    assert cursor_at_kill is not None
    print(
        f"killed {(datetime.now(UTC) - burst_at).total_seconds():+.2f} s after the burst "
        f"instant: {done_at_kill} burst executions logged, "
        f"store states {_burst_states(cluster)}, "
        f"{len(in_flight)} firings RUNNING"
    )

    # Down until the dead leader's lease has expired (and at least ~5 s), then restart.
    def lease_expired() -> bool:
        with cluster.store() as store:
            lease = store.get_lease("dispatcher")
            return lease is None or lease.expires_at <= store.now()

    wait_until(
        lambda: time.monotonic() - killed >= 5 and lease_expired(),
        30,
        message="the dead leader's lease to expire",
    )
    serve2 = cluster.start("serve", env={"LEDGER_JOBS": "catchup"}, name="serve-2")
    wait_until(
        lambda: _burst_states(cluster) == {"succeeded": BURST},
        30,
        interval=0.1,
        message=lambda: (
            f"all {BURST} burst firings to succeed, have {_burst_states(cluster)}; {serve2.tail()}"
        ),
    )

    # Zero duplicate enqueues: exactly one firing row per burst job.
    rows = cluster.query(
        "SELECT job_name, count(*), max(attempt) FROM firings "
        "WHERE job_name LIKE 'burst-%' GROUP BY job_name"
    )
    assert len(rows) == BURST
    assert all(n == 1 for _, n, _ in rows), [r for r in rows if r[1] != 1]
    # Zero lost, zero phantom; a duplicate execution only for a firing RUNNING at the kill.
    report = check_ledger(expected, executions(cluster.ledger(), job_prefix="burst-"))
    print(f"burst ledger: {report.summary()}; in flight at the kill: {len(in_flight)}")
    assert not report.lost, report.summary()
    assert not report.phantom, report.summary()
    assert set(report.duplicates) <= in_flight, set(report.duplicates) - in_flight
    # Only a firing that was running at the kill needed a second attempt.
    with cluster.store() as store:
        burst = [f for f in store.list_firings(limit=10_000) if f.job_name.startswith("burst-")]
        lease = store.get_lease("dispatcher")
    retried = {f.idempotency_key for f in burst if f.attempt > 1}
    assert retried <= in_flight, retried - in_flight
    assert lease is not None
    assert lease.epoch > epoch_before

    _check_catch_up(cluster, cursor_at_kill, lease.acquired_at, in_flight)


def _check_catch_up(
    cluster: Cluster, cursor_at_kill: datetime, acquired_at: datetime, in_flight: set[str]
) -> None:
    """The every-1s ``catchup`` job (fire_once, grace 1 s) after the ~5 s outage."""
    second, grace = timedelta(seconds=1), timedelta(seconds=1)

    def firings() -> list:
        with cluster.store() as store:
            job = store.get_job("default", "catchup")
            return sorted(
                store.list_firings(job_id=job.id, limit=10_000), key=lambda f: f.scheduled_for
            )

    wait_until(
        lambda: any(
            f.scheduled_for >= acquired_at + 2 * second and f.state is FiringState.SUCCEEDED
            for f in firings()
        ),
        30,
        interval=0.1,
        message="catchup firings after the restart",
    )
    all_firings = firings()
    shown = cluster.cli_json("jobs", "show", "catchup")
    missed = [e for e in shown["missed"] if e["kind"] == "missed"]
    print(
        f"catchup: cursor at kill {cursor_at_kill:%H:%M:%S}, new lease at "
        f"{acquired_at:%H:%M:%S.%f}, missed_total {shown['missed_total']}, events {missed}"
    )

    assert shown["missed_total"] > 0, shown
    assert len(missed) == 1, missed
    event = missed[0]
    first = datetime.fromisoformat(event["first"].replace("Z", "+00:00"))
    last = datetime.fromisoformat(event["last"].replace("Z", "+00:00"))
    catch_up = last + second  # fire_once: the latest missed instant fires, older ones are missed
    assert first == cursor_at_kill, event
    assert event["exact"] is True, event
    assert event["count"] == shown["missed_total"] == round((last - first) / second) + 1, event
    # It is the *latest* missed instant: the next one was not a misfire any more.
    assert catch_up + second >= acquired_at - grace, (catch_up, acquired_at)

    post = [f for f in all_firings if f.scheduled_for >= cursor_at_kill]
    assert post, "no catchup firing after the restart"
    assert post[0].scheduled_for == catch_up, [f.scheduled_for for f in post[:3]]
    assert (post[0].enqueued_at - catch_up) > grace, "the catch-up firing was enqueued on time?"
    gaps = {b.scheduled_for - a.scheduled_for for a, b in itertools.pairwise(post)}
    assert gaps <= {second}, sorted(gaps)
    # Before the kill the job fired every second too, and the store never holds a duplicate.
    pre = [f for f in all_firings if f.scheduled_for < cursor_at_kill]
    assert pre, "the catchup job never fired before the kill"
    assert {b.scheduled_for - a.scheduled_for for a, b in itertools.pairwise(pre)} <= {second}
    assert len({f.scheduled_for for f in all_firings}) == len(all_firings)

    finished = {f.idempotency_key for f in all_firings if f.state is FiringState.SUCCEEDED}
    report = check_ledger(
        finished, [e for e in executions(cluster.ledger(), job="catchup") if e["key"] in finished]
    )
    assert not report.lost, report.summary()
    assert set(report.duplicates) <= in_flight, report.summary()
    assert report.counts[post[0].idempotency_key] == 1


@pytest.mark.slow
def test_worker_killed_mid_run_is_redelivered_with_the_same_key(cluster: Cluster) -> None:
    app = App(cluster.store_url)
    try:
        job = app.schedule("sleepy", now(), name="slow", visibility_timeout=2, retries=3)
    finally:
        app.close()
    scheduler = cluster.start("scheduler", "--lease-ttl", "2")
    worker_a = cluster.start(
        "worker", "--concurrency", "2", env={"LEDGER_SLEEP_S": "30"}, name="worker-a"
    )

    def starts() -> list[dict]:
        return [e for e in cluster.ledger() if e["phase"] == "start" and e["job"] == "slow"]

    first = wait_until(
        starts, 30, message=lambda: f"worker A to start the firing; {cluster.diagnostics()}"
    )[0]
    assert (first["pid"], first["attempt"]) == (worker_a.pid, 1)
    cluster.kill(worker_a)
    killed = time.monotonic()

    worker_b = cluster.start(
        "worker", "--concurrency", "2", env={"LEDGER_SLEEP_S": "0.2"}, name="worker-b"
    )

    def firing():
        with cluster.store() as store:
            return store.list_firings(job_id=job.id, limit=10)

    done = wait_until(
        lambda: [f for f in firing() if f.state is FiringState.SUCCEEDED],
        30,
        message=lambda: f"the redelivered firing to succeed; {cluster.diagnostics()}",
    )
    print(
        f"\nredelivered and finished {time.monotonic() - killed:.2f} s after the kill "
        f"(visibility timeout 2 s)"
    )
    firings = firing()
    assert len(firings) == 1, firings  # one firing, not a second enqueue
    final = done[0]
    assert final.attempt == first["attempt"] + 1 == 2
    assert final.idempotency_key == first["key"] == idempotency_key(job.id, final.scheduled_for)

    ledger = [e for e in cluster.ledger() if e["job"] == "slow"]
    starts_seen = [(e["pid"], e["attempt"], e["key"]) for e in ledger if e["phase"] == "start"]
    runs = executions(ledger)
    assert len(runs) == 1, runs  # exactly one execution ran to its end ...
    assert runs[0]["attempt"] == 2  # ... the redelivery, on worker B, with the same key
    assert runs[0]["key"] == first["key"]
    assert len(starts_seen) == 2, starts_seen
    assert starts_seen[0][1:] == (1, first["key"])
    assert starts_seen[1][1:] == (2, first["key"])
    assert starts_seen[0][0] != starts_seen[1][0]  # two different worker processes

    with cluster.store() as store:  # the CLI takes and shows the ids users see
        shown_id = ids_for(store).encode("firing", final.id)
    shown = cluster.cli_json("firings", "show", str(shown_id))
    assert shown["state"] == "succeeded"
    assert shown["attempt"] == 2
    assert shown["idempotency_key"] == first["shown_key"]  # the handler's own key
    assert shown["worker_id"] == final.worker_id
    assert f":{worker_b.pid}:" in final.worker_id
    assert scheduler.events("claims_requeued"), "the reaper never re-queued the expired claim"


@pytest.mark.slow
def test_a_stale_worker_cannot_overwrite_the_redelivered_result(cluster: Cluster) -> None:
    """Worker A is paused (SIGSTOP) mid-run past its visibility timeout; B runs the
    redelivery and succeeds; A resumes and finishes: its completion must be rejected by
    the claim-token compare-and-swap, leaving B's attempt as the recorded outcome."""
    app = App(cluster.store_url)
    try:
        job = app.schedule("sleepy", now(), name="slow", visibility_timeout=2, retries=3)
    finally:
        app.close()
    cluster.start("scheduler", "--lease-ttl", "2")
    worker_a = cluster.start("worker", env={"LEDGER_SLEEP_S": "3"}, name="worker-a")
    wait_until(
        lambda: [e for e in cluster.ledger() if e["phase"] == "start"],
        30,
        message=lambda: f"worker A to start the firing; {cluster.diagnostics()}",
    )
    cluster.pause(worker_a)
    try:
        worker_b = cluster.start("worker", env={"LEDGER_SLEEP_S": "0.2"}, name="worker-b")

        def firing():
            with cluster.store() as store:
                (f,) = store.list_firings(job_id=job.id, limit=10)
                return f

        done = wait_until(
            lambda: (f := firing()).state is FiringState.SUCCEEDED and f,
            30,
            message=lambda: f"B to finish the redelivery; {cluster.diagnostics()}",
        )
    finally:
        os.kill(worker_a.pid, signal.SIGCONT)
    rejected = wait_until(
        lambda: worker_a.events("completion_rejected"),
        20,
        message=lambda: f"A's late completion to be rejected; {worker_a.tail()}",
    )
    assert rejected[0]["firing_id"] == done.id
    after = firing()
    assert (after.state, after.attempt, after.worker_id) == (
        FiringState.SUCCEEDED,
        2,
        done.worker_id,
    )
    assert f":{worker_b.pid}:" in after.worker_id
    assert (after.started_at, after.finished_at) == (done.started_at, done.finished_at)
    runs = executions(cluster.ledger(), job="slow")
    # At-least-once: both ran to the end, with the same key; only B's result counts.
    assert sorted((e["pid"], e["attempt"]) for e in runs) == sorted(
        [(worker_a.pid, 1), (worker_b.pid, 2)]
    )
    assert {e["key"] for e in runs} == {done.idempotency_key}
