"""Cancellation under real processes, on both SQL stores (SQLite file, PostgreSQL).

Cancels go through the public path a user takes: ``Client`` against a ``cronwheel
api`` process on the scenario's store. What ran is read from the ledger the handler
writes itself (``tests/faults/ledger_app.py``: the append-only execution log and the
effect table), never from the store it is checked against.

1. A crowd claimed early (held CLAIMED by two workers before its instant), half of it
   cancelled through the API as soon as each firing is seen held: every cancel
   answered before the instant answers ``cancelled`` (on this machine: all of them;
   under load a few may land after the instant and find their firing started at its
   instant, which is allowed and counted; fewer than half in time fails the test as
   too slow to show anything); none of the cancelled ran, every other ran exactly once.
1b. A crowd held by a worker SIGKILLed before its instant: half cancelled (every answer
   ``cancelled``), the rest given back to the queue with their attempt and run once by
   a second worker.
2. A running firing is cancelled (``cancel_requested``) and its worker SIGKILLed: after
   the visibility timeout the reaper ends it CANCELLED with a reason; no attempt 2.
2b. The same with the worker SIGSTOPped instead: CANCELLED; thawed, its late success is
   rejected and the firing stays CANCELLED.

Scenario 4 (cancels racing claims, starts and completions) is in test_cancel_race.py.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from cronwheel import Client
from cronwheel.domain.firing import TERMINAL_STATES, FiringState
from cronwheel.domain.models import Firing
from cronwheel.domain.results import CancelResult
from tests.faults.cancels import (
    ENGINES,
    effects,
    firings_of,
    key_of,
    log_by_key,
    setup,
    wait_terminal,
)
from tests.faults.harness import SIZES, Cluster, wait_until

pytestmark = pytest.mark.slow

# scenario 1: firings due at one instant (half cancelled within the ~0.5 s they are held:
# ~100 API cancels fit in it on a loaded 2-core machine, not many more)
CROWD = 120 if SIZES.full else 40
RACE_ROUNDS = 40 if SIZES.full else 6  # scenario 4: rounds, each of RACE_BATCH firings
RACE_BATCH = 10 if SIZES.full else 8
RACE_BUDGET_S = 120.0 if SIZES.full else 15.0  # scenario 4: no new round after this
MARGIN_S = 1.5
CANCELLERS = 8  # scenario 1: concurrent API clients cancelling


# -- 1 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("cluster", ENGINES, indirect=True)
@pytest.mark.timeout(150)
def test_crowd_held_before_its_instant_cancelled_half_never_runs(
    cluster: Cluster, closing: list[Client]
) -> None:
    env = setup(cluster)
    closing.append(env.api)
    # the leader enqueues 0.5 s ahead; the workers claim at once and hold (prefetch)
    when = datetime.now(UTC) + timedelta(seconds=3.0 + CROWD * 0.03)
    handles = [
        cluster.one_shot(f"crowd-{i:04d}", when, task="record", visibility_timeout=cluster.sizes.vt)
        for i in range(CROWD)
    ]
    job_ids = {h.expectation.job_id for h in handles}
    assert datetime.now(UTC) < when - timedelta(seconds=1.5), "creating the crowd took too long"

    # the cancelling clients, connected before the window opens (it is ~0.5 s: the
    # leader enqueues the crowd its lead ahead of the instant, the workers hold it)
    clients = [Client(env.api.url, timeout=10) for _ in range(CANCELLERS)]
    closing.extend(clients)
    assert all(c.ready() for c in clients)

    # half the crowd (every other job) is cancelled, each firing as soon as it is seen
    # held; one of the others is read through the API while held
    cancel_jobs = {h.expectation.job_id for h in handles[::2]}
    answers: dict[int, tuple[CancelResult, datetime]] = {}
    took: list[float] = []
    lock = threading.Lock()

    def cancel(fid: int) -> None:
        client = clients.pop()  # as many threads as clients
        try:
            t0 = time.monotonic()
            result = client.cancel_firing(cluster.shown("firing", fid))
            with lock:
                answers[fid] = (result, datetime.now(UTC))
                took.append(time.monotonic() - t0)
        finally:
            clients.append(client)

    def show(fid: int) -> tuple[Firing, datetime]:
        client = clients.pop()
        try:
            return client.get_firing(cluster.shown("firing", fid)), datetime.now(UTC)
        finally:
            clients.append(client)

    held: dict[int, Firing] = {}  # each firing as first seen CLAIMED, before the instant
    futures: list[Future[None]] = []
    shown: Future[tuple[Firing, datetime]] | None = None
    with ThreadPoolExecutor(len(clients)) as pool:
        while len(held) < CROWD and datetime.now(UTC) < when:
            for fid, f in firings_of(cluster, job_ids).items():
                if f.state != FiringState.CLAIMED or fid in held:
                    continue
                held[fid] = f
                if f.job_id in cancel_jobs:
                    futures.append(pool.submit(cancel, fid))
                elif shown is None:
                    shown = pool.submit(show, fid)
            time.sleep(0.005)  # the next look at the store (bounded by the instant)
        t_held = datetime.now(UTC)
        for fu in futures:
            fu.result(timeout=30)
    t_cancelled = datetime.now(UTC)
    assert len(held) == CROWD, (
        f"only {len(held)} of {CROWD} firings were held before their instant: "
        + str(Counter(f.state.value for f in firings_of(cluster, job_ids).values()))
    )
    workers = {f.worker_id for f in held.values()}
    cancel_ids = sorted(fid for fid, f in held.items() if f.job_id in cancel_jobs)
    assert shown is not None
    firing, read_at = shown.result()
    if read_at < when:  # shown as it is: held, not started
        assert firing.state == FiringState.CLAIMED and firing.started_at is None, firing
    # a cancel answered before the instant found its firing held: cancelled at once
    on_time = {fid: r for fid, (r, t) in answers.items() if t < when}
    wrong = {fid: r.outcome for fid, r in on_time.items() if r.outcome != "cancelled"}
    assert not wrong, f"held firings not cancelled at once: {wrong}"
    assert all(r.firing.state == FiringState.CANCELLED for r in on_time.values())
    assert len(on_time) * 2 >= len(cancel_ids), (
        f"only {len(on_time)} of {len(cancel_ids)} cancels answered before the instant (the"
        f" last firing held {(when - t_held).total_seconds():.3f} s before it; answers took"
        f" {sorted(round(t, 3) for t in took)} s): the machine is too slow for this test"
    )
    # one answered after the instant may have found its firing started (at its instant)
    cancelled = {fid for fid, (r, _) in answers.items() if r.outcome == "cancelled"}
    late_started = {fid: r.outcome for fid, (r, _) in answers.items() if fid not in cancelled}
    keep_ids = sorted(set(held) - cancelled)

    wait_terminal(cluster, job_ids, CROWD, (when - datetime.now(UTC)).total_seconds() + 30)
    final = firings_of(cluster, job_ids)
    log, runs = log_by_key(cluster), effects(cluster)
    ran_cancelled = [
        fid for fid in cancelled if key_of(final[fid]) in log or key_of(final[fid]) in runs
    ]
    assert not ran_cancelled, f"cancelled firings that ran: {ran_cancelled}"
    assert all(final[fid].state == FiringState.CANCELLED for fid in cancelled)
    assert all(final[fid].started_at is None for fid in cancelled)
    early = [
        fid
        for fid in late_started
        if (final[fid].started_at or final[fid].scheduled_for) < final[fid].scheduled_for
    ]
    assert not early, f"started before their instant: {early}"
    not_once = {
        fid: (
            final[fid].state.value,
            len(log.get(key_of(final[fid]), [])),
            runs.get(key_of(final[fid])),
        )
        for fid in keep_ids
        if final[fid].state != FiringState.SUCCEEDED
        or len(log.get(key_of(final[fid]), [])) != 1
        or runs.get(key_of(final[fid])) != 1
        or final[fid].attempt != 1
    }
    assert not not_once, f"kept firings that did not run exactly once: {not_once}"
    lost = {w.name: len(w.events("claim_lost")) for w in env.workers}
    assert not any(lost.values()), f"a cancel reported as a lost claim: {lost}"
    cluster.assert_healthy_logs()
    lateness = [
        (min(e["start"] for e in log[key_of(final[fid])]) - when.timestamp()) for fid in keep_ids
    ]
    cluster.figures.update(
        engine=cluster.engine,
        crowd=CROWD,
        cancels=len(cancel_ids),
        cancelled=len(cancelled),
        cancels_answered_after_instant=len(answers) - len(on_time),
        found_started=len(late_started),
        holding_workers=len(workers),
        all_held_before_instant_s=round((when - t_held).total_seconds(), 3),
        cancels_done_before_instant_s=round((when - t_cancelled).total_seconds(), 3),
        kept_start_lateness_max_s=round(max(lateness), 3),
        cancel_answer_ms_max=round(max(took) * 1000, 1),
    )


# -- 2 -------------------------------------------------------------------------------------


def redelivery_bound(vt: float) -> float:
    """A dead worker's claim expires at most one visibility timeout after its last
    heartbeat; the leader's reaper runs every second."""
    return vt + 1.0 + MARGIN_S


@pytest.mark.parametrize("cluster", ENGINES, indirect=True)
@pytest.mark.timeout(120)
def test_cancelled_running_firing_whose_worker_is_killed_ends_cancelled(
    cluster: Cluster, closing: list[Client]
) -> None:
    vt = cluster.sizes.vt
    env = setup(cluster)
    closing.append(env.api)
    # cancel_grace far beyond the test: only the lease expiry can end it
    h = cluster.one_shot(
        "slow-cancel-kill",
        datetime.now(UTC) + timedelta(seconds=1.0),
        task="slow",
        visibility_timeout=vt,
        cancel_grace=3600,
        retries=5,
        kwargs={"seconds": 600},
    )
    job_id = h.expectation.job_id
    first = wait_until(
        lambda: [e for e in cluster.executions_log() if e["key"].startswith(f"{job_id}:")],
        15,
        message="the slow firing to start",
    )[0]
    fid, key = int(first["firing_id"]), first["key"]
    victim = cluster.by_pid(first["pid"])
    assert victim in env.workers and first["attempt"] == 1
    answer = env.api.cancel_firing(cluster.shown("firing", fid))
    assert answer.outcome == "cancel_requested", answer
    assert answer.firing.state == FiringState.RUNNING and answer.firing.cancel_requested_at
    t_kill = victim.kill()
    cluster.disrupted[victim.pid] = "worker SIGKILLed after its running firing was cancelled"

    def ended_yet() -> Firing | None:
        f = env.api.get_firing(cluster.shown("firing", fid))
        return f if f.state in TERMINAL_STATES else None

    ended = wait_until(
        ended_yet,
        redelivery_bound(vt) + 3,
        0.05,
        message=lambda: f"the firing to end: {env.api.get_firing(cluster.shown('firing', fid))}",
    )
    ended_after = time.time() - t_kill
    assert ended is not None
    assert ended.state == FiringState.CANCELLED, ended
    assert ended.attempt == 1 and ended.reason, ended
    assert ended_after <= redelivery_bound(vt) + 0.5, f"ended {ended_after:.2f} s after the kill"
    # a barrier, not a sleep: a firing enqueued now runs on the surviving worker once the
    # reaper's and that worker's next turns have passed; attempt 2 would have started by then
    survivor = next(w for w in env.workers if w is not victim)
    probe = cluster.one_shot(
        "probe", datetime.now(UTC) + timedelta(seconds=1.0), visibility_timeout=vt
    )
    probe_key = f"{probe.expectation.job_id}:"
    wait_until(
        lambda: [e for e in cluster.executions_log() if e["key"].startswith(probe_key)],
        15,
        message="the probe firing to run on the surviving worker",
    )
    runs = [e for e in cluster.executions_log() if e["key"] == key]
    assert [(e["phase"], e["attempt"], e["pid"]) for e in runs] == [("start", 1, victim.pid)], runs
    assert key not in effects(cluster)
    final = env.api.get_firing(cluster.shown("firing", fid))
    assert (final.state, final.attempt) == (FiringState.CANCELLED, 1), final
    assert survivor.alive()
    cluster.assert_healthy_logs()
    cluster.figures.update(
        engine=cluster.engine,
        visibility_timeout_s=vt,
        cancelled_after_kill_s=round(ended_after, 3),
        bound_s=round(redelivery_bound(vt), 3),
        reason=final.reason,
    )


# -- held by a dead worker --------------------------------------------------------------------


@pytest.mark.parametrize("cluster", ENGINES, indirect=True)
@pytest.mark.timeout(120)
def test_held_by_a_killed_worker_cancelled_half_never_runs_the_rest_runs_once(
    cluster: Cluster, closing: list[Client]
) -> None:
    """A crowd held by one worker, SIGKILLed before the instant: the held firings stay
    CLAIMED until their lease expires; half are cancelled meanwhile (every answer
    ``cancelled``: nothing can start them); the reaper gives the rest back to the queue
    with their attempt, and a second worker runs each once, as attempt 1."""
    vt = cluster.sizes.vt
    env = setup(cluster, workers=1)
    closing.append(env.api)
    (victim,) = env.workers
    n = CROWD // 2
    when = datetime.now(UTC) + timedelta(seconds=2.5 + n * 0.03)
    handles = [
        cluster.one_shot(f"held-{i:04d}", when, task="record", visibility_timeout=vt)
        for i in range(n)
    ]
    job_ids = {h.expectation.job_id for h in handles}

    def all_held() -> dict[int, Firing] | None:
        fs = firings_of(cluster, job_ids)
        held = {i: f for i, f in fs.items() if f.state == FiringState.CLAIMED}
        return held if len(held) == n else None

    held = wait_until(
        all_held,
        (when - datetime.now(UTC)).total_seconds(),
        0.01,
        message=lambda: (
            "the crowd held before its instant: "
            + str(Counter(f.state.value for f in firings_of(cluster, job_ids).values()))
        ),
    )
    assert held is not None
    t_kill = victim.kill()
    assert datetime.now(UTC) < when, "the worker was killed after the instant"
    cluster.disrupted[victim.pid] = "worker SIGKILLed while holding a crowd"
    survivor = cluster.start_worker("w2")
    ids = sorted(held)
    cancel_ids, keep_ids = set(ids[::2]), ids[1::2]
    answers = {
        fid: env.api.cancel_firing(cluster.shown("firing", fid)) for fid in sorted(cancel_ids)
    }
    wrong = {fid: r.outcome for fid, r in answers.items() if r.outcome != "cancelled"}
    assert not wrong, f"firings held by a dead worker not cancelled at once: {wrong}"
    cluster.wait_started([survivor])

    wait_terminal(cluster, job_ids, n, vt + 15)
    ended_after = time.time() - t_kill
    final = firings_of(cluster, job_ids)
    log, runs = log_by_key(cluster), effects(cluster)
    for fid in cancel_ids:
        f = final[fid]
        assert f.state == FiringState.CANCELLED and f.started_at is None, f
        assert key_of(f) not in log and key_of(f) not in runs, f
    survivor_id = str(survivor.events("worker_started")[0]["worker_id"])
    bad = {
        fid: (final[fid].state.value, final[fid].attempt, final[fid].worker_id)
        for fid in keep_ids
        if final[fid].state != FiringState.SUCCEEDED
        or final[fid].attempt != 1  # the held attempt was given back
        or final[fid].worker_id != survivor_id
        or runs.get(key_of(final[fid])) != 1
        or [e["pid"] for e in log.get(key_of(final[fid]), [])] != [survivor.pid]
    }
    assert not bad, f"held firings not run exactly once by the survivor: {bad}"
    cluster.wait_drained(5)  # nothing else left queued, held or running
    cluster.assert_healthy_logs()
    cluster.figures.update(
        engine=cluster.engine,
        held=n,
        cancelled=len(cancel_ids),
        visibility_timeout_s=vt,
        all_ended_after_kill_s=round(ended_after, 3),
    )


# -- 2b ------------------------------------------------------------------------------------


@pytest.mark.parametrize("cluster", ENGINES, indirect=True)
@pytest.mark.timeout(120)
def test_cancelled_running_firing_of_a_frozen_worker_stays_cancelled_after_it_thaws(
    cluster: Cluster, closing: list[Client]
) -> None:
    """Cancel requested, then the worker SIGSTOPped past its visibility timeout: the
    reaper ends the firing CANCELLED; thawed, the worker's handler (it ignores the
    request) finishes and its success is rejected; the firing stays CANCELLED, no
    attempt 2 ever starts."""
    vt = cluster.sizes.vt
    env = setup(cluster)
    closing.append(env.api)
    run_s = redelivery_bound(vt) + 4.0  # still running for a while after the thaw
    h = cluster.one_shot(
        "slow-cancel-freeze",
        datetime.now(UTC) + timedelta(seconds=1.0),
        task="slow",
        visibility_timeout=vt,
        cancel_grace=3600,
        retries=5,
        kwargs={"seconds": run_s},
    )
    job_id = h.expectation.job_id
    first = wait_until(
        lambda: [e for e in cluster.executions_log() if e["key"].startswith(f"{job_id}:")],
        15,
        message="the slow firing to start",
    )[0]
    fid, key = int(first["firing_id"]), first["key"]
    zombie = cluster.by_pid(first["pid"])
    assert zombie in env.workers
    assert env.api.cancel_firing(cluster.shown("firing", fid)).outcome == "cancel_requested"
    zombie.signal(signal.SIGSTOP)
    cluster.disrupted[zombie.pid] = "worker SIGSTOPped after its running firing was cancelled"
    try:
        wait_until(
            lambda: env.api.get_firing(cluster.shown("firing", fid)).state == FiringState.CANCELLED,
            redelivery_bound(vt) + 3,
            0.05,
            message=lambda: (
                f"the firing to end cancelled: {env.api.get_firing(cluster.shown('firing', fid))}"
            ),
        )
    finally:
        zombie.signal(signal.SIGCONT)
    rejected = wait_until(
        lambda: [e for e in zombie.events("completion_rejected") if e["firing_id"] == fid],
        run_s + 10,
        0.1,
        message="the thawed worker's late result to be rejected",
    )
    final = env.api.get_firing(cluster.shown("firing", fid))
    assert (final.state, final.attempt) == (FiringState.CANCELLED, 1), final
    assert final.reason, final
    runs = [
        (e["phase"], e["attempt"], e["pid"]) for e in cluster.executions_log() if e["key"] == key
    ]
    assert runs == [("start", 1, zombie.pid), ("done", 1, zombie.pid)], runs
    assert effects(cluster).get(key) == 1  # the handler ignored the request: its one run
    cluster.assert_healthy_logs()
    cluster.figures.update(
        engine=cluster.engine, visibility_timeout_s=vt, rejected_events=len(rejected)
    )
