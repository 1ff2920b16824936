"""The memory store against the SQLite store it follows.

The same seeded, bounded random sequences of operations (jobs with random policies,
fenced enqueues, immediate work, triggers, claims, outcomes, heartbeats, cancels,
redrives, reaper passes, clock moves) run on both stores on equal fake clocks; after
every step their answers, firings and jobs must be equal. The contract suite says what
any store must do; this checks that the memory store does what SQLite does where the
contract leaves room (ids, reasons, which firings a claim decides for, claim order).

The sequences stay off the paths where the SQL stores have known bugs, which the
memory store does not copy (tests/contract/test_transitions.py, xfail): a RUNNING
firing asked to cancel stops at once, as a cooperating handler does; no job uses
``cancel_other`` (which asks running firings to cancel); a firing of a job that buffers
is never retried (a retry is where a stale buffered mark shows).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cronwheel.domain.clock import FakeClock
from cronwheel.domain.models import FiringId, JobPolicies, JobSpec
from cronwheel.domain.overlap import OverlapPolicy
from cronwheel.domain.schedules import every, now
from cronwheel.errors import CronwheelError
from cronwheel.store.memory import MemoryStore
from cronwheel.store.protocol import DISPATCHER_LEASE, Completion, JobAdvance, PlannedFiring
from cronwheel.store.sqlite import SqliteStore

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)
SEC = timedelta(seconds=1)
STEPS = 120
OVERLAPS = [p for p in OverlapPolicy if p is not OverlapPolicy.CANCEL_OTHER]
OPS = (  # job, claim, complete and advance twice as likely as the others
    "job",
    "job",
    "enqueue",
    "now",
    "trigger",
    "claim",
    "claim",
    "complete",
    "complete",
    "beat",
    "cancel",
    "redrive",
    "reap",
    "advance",
    "advance",
    "pause",
)
BUFFERING = {OverlapPolicy.BUFFER_ONE.value, OverlapPolicy.BUFFER_ALL.value}


def _plain(value: Any) -> Any:
    """Comparable form of an answer: dataclasses as dicts, claim tokens left out (each
    store draws its own)."""
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, set):
        return sorted(_plain(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _plain(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if f.name != "claim_token"
        }
    return value


class Twins:
    """One memory store and one SQLite store, driven alike."""

    def __init__(self, tmp_path: Path) -> None:
        self.clocks = [FakeClock(T0), FakeClock(T0)]
        self.stores: list[Any] = [
            MemoryStore(clock=self.clocks[0]),
            SqliteStore(str(tmp_path / "twin.db"), clock=self.clocks[1]),
        ]
        for s in self.stores:
            s.migrate()
        self.tokens: list[dict[FiringId, str]] = [{}, {}]  # held claims, per store

    def both(self, what: str, op: Callable[[int, Any], Any]) -> Any:
        answers = []
        for i, store in enumerate(self.stores):
            try:
                answers.append(_plain(op(i, store)))
            except CronwheelError as exc:
                answers.append(f"raised {type(exc).__name__}")
        assert answers[0] == answers[1], f"{what}: memory {answers[0]} != sqlite {answers[1]}"
        firings = [_plain(s.list_firings(limit=100_000)) for s in self.stores]
        assert firings[0] == firings[1], f"after {what}: the firings differ"
        jobs = [_plain(s.list_jobs(limit=100_000)) for s in self.stores]
        assert jobs[0] == jobs[1], f"after {what}: the jobs differ"
        return answers[0]

    def close(self) -> None:
        for s in self.stores:
            s.close()


def _step(t: Twins, rnd: random.Random, n: int) -> None:
    mem = t.stores[0]
    firings = mem.list_firings(limit=100_000)
    jobs = [j for j in mem.list_jobs(limit=100_000) if j.spec.schedule.kind == "every"]
    op = rnd.choice(OPS)
    if op == "job":
        policies = JobPolicies(
            max_attempts=rnd.choice([1, 2, 3]),
            overlap=rnd.choice(OVERLAPS),
            visibility_timeout=rnd.choice([5, 30]) * SEC,
            cancel_grace=rnd.choice([1, 10]) * SEC,
            start_deadline=rnd.choice([None, 3 * SEC, 20 * SEC]),
            max_concurrency=rnd.choice([None, 1, 2]),
            priority=rnd.choice([1.0, 5.0]),
            max_buffer=rnd.choice([1, 2, 100]),
        )
        spec = JobSpec(
            name=f"j{n}",
            task=rnd.choice("ab"),
            schedule=every(rnd.choice(["1s", "3s"])),
            policies=policies,
        )
        t.both(f"create {spec}", lambda i, s: s.create_job(spec, first_fire_at=t.clocks[i].now()))
    elif op == "enqueue" and jobs:
        name, k = rnd.choice(jobs).name, rnd.choice([1, 2, 3])

        def enqueue(i: int, s: Any) -> Any:
            lease = s.acquire_lease(DISPATCHER_LEASE, "leader", 1000 * SEC)
            job = s.get_job("default", name)
            if job.next_fire_at is None or job.paused:
                return None
            at = job.next_fire_at
            planned = [PlannedFiring(scheduled_for=at + j * SEC) for j in range(k)]
            advance = JobAdvance(
                job_id=job.id,
                expected_next_fire_at=at,
                new_next_fire_at=at + k * SEC,
                firings=planned,
            )
            return s.enqueue(lease, [advance])

        t.both(f"enqueue {name} x{k}", enqueue)
    elif op == "now":
        spec = JobSpec(name=f"n{n}", task=rnd.choice("ab"), schedule=now())
        t.both(f"enqueue_now {spec.name}", lambda i, s: s.enqueue_now(spec))
    elif op == "trigger" and jobs:
        job, offset = rnd.choice(jobs), rnd.choice([-5, 0, 2, 5]) * SEC
        override = rnd.choice([None, "allow", "skip", "buffer_all", "terminate_other"])
        taken = [f.scheduled_for for f in firings if f.job_id == job.id]
        again = rnd.choice(taken) if taken and rnd.random() < 0.5 else None  # a duplicate

        def trigger(i: int, s: Any) -> Any:
            at = t.clocks[i].now() + offset if again is None else again
            return s.add_firings("default", job.name, [at], note="x", overlap=override)

        t.both(f"trigger {job.name} {again or offset} {override}", trigger)
    elif op == "claim":
        tasks = rnd.sample(["a", "b"], rnd.choice([1, 2]))
        limit, prefetch = rnd.choice([1, 2, 5]), rnd.choice([0, 0, 3]) * SEC

        def claim(i: int, s: Any) -> Any:
            claims = s.claim("w", tasks=tasks, limit=limit, prefetch=prefetch)
            t.tokens[i].update({c.firing.id: c.claim_token for c in claims})
            return claims

        t.both(f"claim {tasks} {limit} {prefetch}", claim)
    elif op == "complete" and t.tokens[0]:
        fid = rnd.choice(sorted(t.tokens[0]))
        kind = rnd.choice(["ok", "fail", "retry", "stop", "stale"])
        job = mem.get_job_by_id(mem.get_firing(fid).job_id)
        if kind == "retry" and job.spec.policies.overlap.value in BUFFERING:
            kind = "fail"

        def complete(i: int, s: Any) -> Any:
            at = t.clocks[i].now()
            return s.complete(
                [
                    Completion(
                        firing_id=fid,
                        claim_token="x" * 32 if kind == "stale" else t.tokens[i][fid],
                        succeeded=kind == "ok",
                        started_at=at,
                        finished_at=at,
                        error=None if kind == "ok" else "boom",
                        retry_at=at + 2 * SEC if kind == "retry" else None,
                        cancelled=kind == "stop",
                    )
                ]
            )

        t.both(f"complete {fid} {kind}", complete)
    elif op == "beat" and t.tokens[0]:
        fid = rnd.choice(sorted(t.tokens[0]))
        t.both(f"heartbeat {fid}", lambda i, s: s.heartbeat("w", [(fid, t.tokens[i][fid])]))
    elif op == "cancel" and firings:
        fid = rnd.choice(firings).id

        def cancel(i: int, s: Any) -> Any:
            result = s.cancel_firing(fid)
            if result.outcome == "cancel_requested" and fid in t.tokens[i]:
                at = t.clocks[i].now()
                stop = Completion(
                    firing_id=fid,
                    claim_token=t.tokens[i][fid],
                    succeeded=False,
                    cancelled=True,
                    started_at=at,
                    finished_at=at,
                )
                return result, s.complete([stop])  # the handler stops at once
            return result, None

        t.both(f"cancel {fid}", cancel)
    elif op == "redrive" and firings:
        fid = rnd.choice(firings).id
        t.both(f"redrive {fid}", lambda i, s: s.redrive_firing(fid))
    elif op == "reap":
        t.both("reap", lambda i, s: s.requeue_expired())
    elif op == "advance":
        seconds = rnd.choice([0.5, 1, 2, 5, 11])
        for clock in t.clocks:
            clock.advance(seconds)
        t.both("hints", lambda i, s: (s.next_due_at(), s.status().counts, s.job_backlog("default")))
    elif op == "pause" and jobs:
        name, paused = rnd.choice(jobs).name, rnd.choice([True, False])
        t.both(f"pause {name} {paused}", lambda i, s: s.set_paused("default", name, paused))


@pytest.mark.parametrize("seed", range(4))
def test_random_sequences_answer_alike(tmp_path: Path, seed: int) -> None:
    twins = Twins(tmp_path)
    rnd = random.Random(seed)
    try:
        for n in range(STEPS):
            _step(twins, rnd, n)
        firings = twins.stores[0].list_firings(limit=100_000)
        assert any(f.attempt for f in firings)  # the sequence claimed work, not only queued it
    finally:
        twins.close()
