"""Scenario 4: cancels racing claims, starts and completions, on both SQL stores.

Round after round (bounded in count and time), firings of the ``cooperative`` task
(it stops on a cancellation request, and says so in the ledger) are made due now or
due in under a second (the leader enqueues those its lead ahead and the workers hold
them CLAIMED), and each is cancelled through the API at a random moment around its
instant — while queued, held, being started, running or already finished. Two
workers with few slots keep firings waiting for a slot too.

For every firing, against the ledger the handler writes itself:

- exactly one terminal state, one attempt, at most one handler start;
- ``cancelled``: the firing ends CANCELLED and its handler never started;
- ``cancel_requested`` (it was RUNNING): it ends CANCELLED or SUCCEEDED as the
  handler itself ended (a ``cancelled`` line: CANCELLED, a ``done`` line: SUCCEEDED);
  a handler that never started ends CANCELLED without running;
- ``already_final``: the answer shows a final state, which is the final state, and a
  success's handler finished before the answer.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronwheel import Client
from cronwheel.domain.firing import TERMINAL_STATES, FiringState
from cronwheel.domain.models import Firing, JobId, JobPolicies, JobSpec
from cronwheel.domain.results import CancelResult
from cronwheel.domain.schedules import NowSchedule
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

ROUNDS = 40 if SIZES.full else 5
BATCH = 12 if SIZES.full else 8  # firings per round
BUDGET_S = 150.0 if SIZES.full else 12.0  # no new round after this
VT_S = 2.0  # the workers poll cancel requests every third of it
HANDLER_S = (0.0, 0.0, 0.05, 0.3, 1.2)  # how long the handler waits for a cancel


@dataclass
class Race:
    job_id: int
    planned: float  # Unix seconds the cancel is meant to be sent
    firing_id: int | None = None
    result: CancelResult | None = None
    sent: float = 0.0
    answered: float = 0.0


def _firing_id(cluster: Cluster, job_id: int, timeout: float) -> int:
    found = wait_until(
        lambda: cluster.client.store.list_firings(job_id=JobId(job_id), limit=1),
        timeout,
        0.01,
        message=f"job {job_id}'s firing to be enqueued",
    )
    return int(found[0].id)


def _round(
    cluster: Cluster, rng: random.Random, pool: ThreadPoolExecutor, clients: list[Client], r: int
) -> list[Race]:
    """Make one round's firings and send their cancels; returns once every cancel answered."""
    cancels: list[Race] = []
    lock = threading.Lock()

    def send(c: Race) -> None:
        if c.firing_id is None:
            c.firing_id = _firing_id(cluster, c.job_id, 10)
        time.sleep(max(0.0, c.planned - time.time()))
        with lock:
            client = clients.pop()
        try:
            c.sent = time.time()
            c.result = client.cancel_firing(cluster.shown("firing", c.firing_id))  # the API's id
            c.answered = time.time()
        finally:
            with lock:
                clients.append(client)

    futures: list[Future[None]] = []
    for i in range(BATCH):
        kwargs = {"seconds": rng.choice(HANDLER_S)}
        if rng.random() < 0.5:  # due now: claimed and started at once, or held for a slot
            spec = JobSpec(
                name=f"race-{r}-{i}-{uuid.uuid4().hex[:6]}",
                task="cooperative",
                schedule=NowSchedule(),
                kwargs=kwargs,
                policies=JobPolicies(visibility_timeout=timedelta(seconds=VT_S)),
            )
            firing = cluster.client.store.enqueue_now(spec)
            # at once (racing the claim), within its first 50 ms (the start, a short
            # handler's completion), or later (a running handler)
            delay = rng.choice([0.0, rng.uniform(0.0, 0.05), rng.uniform(0.05, 0.8)])
            c = Race(int(firing.job_id), time.time() + delay, int(firing.id))
        else:  # due soon: enqueued its lead ahead, held CLAIMED until its instant
            when = datetime.now(UTC) + timedelta(seconds=rng.uniform(0.7, 1.0))
            h = cluster.one_shot(
                f"race-{r}-{i}", when, task="cooperative", visibility_timeout=VT_S, kwargs=kwargs
            )
            # while held (up to its lead before the instant), at the start, or after it
            c = Race(h.expectation.job_id, when.timestamp() + rng.uniform(-0.45, 0.3))
        cancels.append(c)
        futures.append(pool.submit(send, c))
    for f in futures:
        f.result(timeout=30)
    return cancels


def _verdict(
    c: Race, f: Firing, lines: list[dict[str, Any]], runs: int | None
) -> tuple[str, str | None]:
    """(kind, problem): ``kind`` classifies the race's outcome for the figures; ``problem``
    is None when the firing kept every promise."""
    assert c.result is not None
    phases = Counter(e["phase"] for e in lines)
    answer, shown = c.result.outcome, c.result.firing.state
    if f.state not in TERMINAL_STATES:
        return "open", f"not final: {f.state}"
    # attempt 0: never claimed (cancelled while queued); never a second attempt
    if f.attempt > 1 or phases["start"] > 1 or (runs or 0) > 1:
        return "repeated", f"attempt {f.attempt}, {phases['start']} starts, {runs} effects"
    ended = "done" if phases["done"] else "cancelled" if phases["cancelled"] else None
    if phases["start"] and ended is None:
        return "unfinished", "the handler started and never ended"
    if ended == "done" and (f.state != FiringState.SUCCEEDED or runs != 1):
        return "inconsistent", f"the handler succeeded, the firing is {f.state} ({runs} effects)"
    if ended == "cancelled" and (f.state != FiringState.CANCELLED or runs):
        return "inconsistent", f"the handler stopped on the cancel, the firing is {f.state}"
    if answer == "cancelled":
        if shown != FiringState.CANCELLED or f.state != FiringState.CANCELLED:
            return "cancelled", f"answered cancelled, shown {shown}, ended {f.state}"
        if lines or runs:
            return "cancelled", f"answered cancelled, yet its handler started: {lines}"
        held = c.result.firing.cancel_requested_at is not None  # set when it was CLAIMED
        return ("cancelled while held" if held else "cancelled while queued"), None
    if answer == "cancel_requested":
        if shown != FiringState.RUNNING:
            return "cancel_requested", f"answered cancel_requested, shown {shown}"
        if f.state not in {FiringState.CANCELLED, FiringState.SUCCEEDED}:
            return "cancel_requested", f"answered cancel_requested, ended {f.state}"
        if not phases["start"]:
            if f.state != FiringState.CANCELLED:
                return "cancel_requested", f"never ran, yet ended {f.state}"
            return "requested, stopped before its handler", None
        return f"requested, handler {ended}", None
    if answer == "already_final":
        if shown not in TERMINAL_STATES or shown != f.state:
            return "already_final", f"answered already_final, shown {shown}, ended {f.state}"
        if ended == "done" and max(e["end"] for e in lines if e["end"]) > c.answered:
            return "already_final", "answered already_final before its handler finished"
        return f"already_final ({shown.value})", None
    return answer, f"unknown answer {answer!r}"


@pytest.mark.parametrize("cluster", ENGINES, indirect=True)
@pytest.mark.timeout(240 if SIZES.full else 120)
def test_cancel_races_claim_start_and_completion(cluster: Cluster, closing: list[Client]) -> None:
    env = setup(cluster, workers=2, concurrency=3)
    closing.append(env.api)
    clients = [Client(env.api.url, timeout=10) for _ in range(BATCH)]
    closing.extend(clients)
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    cancels: list[Race] = []
    t0 = time.monotonic()
    rounds = 0
    with ThreadPoolExecutor(BATCH) as pool:
        while rounds < ROUNDS and time.monotonic() - t0 < BUDGET_S:
            cancels += _round(cluster, rng, pool, clients, rounds)
            rounds += 1
    job_ids = {c.job_id for c in cancels}
    wait_terminal(cluster, job_ids, len(cancels), 60)
    final = firings_of(cluster, job_ids)
    log, runs = log_by_key(cluster), effects(cluster)
    kinds: Counter[str] = Counter()
    problems = []
    late_starts = 0  # handlers called after their (running) firing's cancel was answered
    for c in cancels:
        assert c.firing_id is not None
        f = final[c.firing_id]
        kind, problem = _verdict(c, f, log.get(key_of(f), []), runs.get(key_of(f)))
        kinds[kind] += 1
        starts = [e["start"] for e in log.get(key_of(f), []) if e["phase"] == "start"]
        if c.result and c.result.outcome == "cancel_requested" and starts:
            late_starts += starts[0] > c.answered
        if problem is not None:
            problems.append((c.firing_id, f.job_name, problem))
    cluster.figures.update(
        engine=cluster.engine,
        seed=seed,
        rounds=rounds,
        firings=len(cancels),
        outcomes=dict(kinds),
        answers=dict(Counter(c.result.outcome for c in cancels if c.result)),
        handler_started_after_cancel_requested=late_starts,
    )
    assert not problems, f"seed {seed}: {len(problems)} broken promises: {problems[:10]}"
    # the race reached both sides: firings cancelled before they started, and running
    answered = Counter(c.result.outcome for c in cancels if c.result)
    assert answered["cancelled"] and answered["cancel_requested"], kinds
    # no fault here: a cancel is never reported as a lost claim (the zombie alarm)
    lost = {w.name: len(w.events("claim_lost")) for w in env.workers}
    assert not any(lost.values()), f"claim_lost without a fault: {lost}"
    cluster.assert_healthy_logs()
