"""A PostgreSQL store at schema version 15 (before firings were partitioned) holding
data in every state: the starting point of the partition migration's tests."""

from __future__ import annotations

import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from cronwheel.domain.models import ClaimedFiring
from cronwheel.domain.schedules import every
from cronwheel.domain.schedules import now as now_schedule
from cronwheel.store import codec
from cronwheel.store.core.flows import CoreStore
from cronwheel.store.core.quotas import QuotaFlows
from cronwheel.store.postgres import DbTime, PostgresStore
from cronwheel.store.protocol import DISPATCHER_LEASE, JobAdvance, PlannedFiring
from tests.conftest import PG_URL
from tests.contract.conftest import spec

NS = "legacy"
TASK = "legacy-task"
DAY = timedelta(days=1)


@dataclass
class Legacy:
    """What the version-15 database holds, by name."""

    jobs: dict[str, int] = field(default_factory=dict)
    running: ClaimedFiring | None = None
    claimed: ClaimedFiring | None = None
    queued: int = 0
    idempotent: int = 0


def open_at_version_15(schema: str, db_time: DbTime | None = None) -> PostgresStore:
    store = PostgresStore(PG_URL, schema=schema, pool_size=4, db_time=db_time)
    every_one = store.db.migrations()
    old = {k: v for k, v in every_one.items() if int(k.split("_")[1]) <= 15}
    store.db.migrations = lambda: old  # type: ignore[method-assign]
    assert store.migrate() == 15
    store.db.migrations = lambda: every_one  # type: ignore[method-assign]
    return store


def fill(store: PostgresStore) -> Legacy:
    """Jobs and firings in every state in namespace ``legacy`` (task ``legacy-task``):
    three days of finished history, a DEAD firing with its failed attempts, QUEUED,
    CLAIMED and RUNNING ones, a cancelled and a skipped one, a one-shot enqueued with an
    idempotency key.

    Version 15 has neither claim function of today's claims (migrations 17 and 18): the
    fill claims and fails attempts as version 15 did (``claim_v15``, ``fail_v15``),
    with claim tokens that carry no instant, which the store then starts and completes
    after the migration. Nor the jobs counter's shards and job_changes (migration 20):
    it counts jobs and versions the job set as version 15 did (``_jobs_as_v15``). Nor the
    one-statement immediate enqueue (migration 25): it enqueues as version 15 did."""
    with _jobs_as_v15(store):
        return _fill(store)


_BUMP_V15 = """
INSERT INTO meta (key, value) VALUES ('jobs_version', '1')
ON CONFLICT (key) DO UPDATE SET value = (meta.value::bigint + 1)::text
"""


@contextmanager
def _jobs_as_v15(store: PostgresStore) -> Iterator[None]:
    """Job creations count in quota_usage and bump meta's jobs_version (the store
    core's charge, the statement of before migration 20), in the store core's
    transaction (the one-statement creation is migration 23's)."""
    q: Any = store.db.q
    bump = q["bump_jobs_version"]
    q["bump_jobs_version"] = _BUMP_V15
    charge: Any = store
    charge._take_jobs = types.MethodType(QuotaFlows._take_jobs, store)
    charge.create_job = types.MethodType(CoreStore.create_job, store)
    charge._enqueue_now_in = types.MethodType(_enqueue_now_v15, store)
    try:
        yield
    finally:
        q["bump_jobs_version"] = bump
        del charge._take_jobs
        del charge.create_job
        del charge._enqueue_now_in


_ENQUEUE_NOW_V15 = """
WITH job AS (
    INSERT INTO jobs (namespace, name, task, schedule, payload, policies, spec_hash, priority,
                      max_attempts, visibility_us, paused, next_fire_at, last_fired_at,
                      created_at, updated_at, shard, overlap, cancel_grace_us)
    VALUES (%(namespace)s, %(name)s, %(task)s, %(schedule)s::jsonb, %(payload)s::json,
            %(policies)s::jsonb, %(spec_hash)s, %(priority)s, %(max_attempts)s,
            %(visibility_us)s, false, NULL, %(now)s, %(now)s, %(now)s, %(shard)s,
            %(overlap)s, %(cancel_grace_us)s)
    RETURNING *
)
INSERT INTO firings (job_id, namespace, job_name, task, payload, scheduled_for, due_at,
                     vdeadline, state, max_attempts, priority, visibility_us, enqueued_at,
                     shard)
SELECT id, namespace, name, task, payload, %(now)s, %(now)s,
       %(now)s::timestamptz + interval '1 second', 'queued', max_attempts, priority,
       visibility_us, %(now)s, shard
FROM job
RETURNING *
"""


def _enqueue_now_v15(store: PostgresStore, tx: Any, spec_: Any) -> Any:
    """An immediate enqueue as version 15 wrote it (migration 25's statement is not
    there yet): the one-shot job and its firing due now, charged by the store core."""
    params = codec.job_params(spec_) | {"now": store.now()}
    row = tx.conn.execute(_ENQUEUE_NOW_V15, params).fetchone()
    QuotaFlows._charge_firings(store, tx, spec_.namespace, 1)
    return row


_CLAIM_V15 = """
UPDATE firings f
SET state = CASE WHEN %(start)s THEN 'running' ELSE 'claimed' END,
    started_at = CASE WHEN %(start)s THEN %(now)s::timestamptz END,
    attempt = f.attempt + 1, claim_token = replace(gen_random_uuid()::text, '-', ''),
    worker_id = %(worker)s, claimed_at = %(now)s::timestamptz, finished_at = NULL,
    lease_until = %(now)s::timestamptz + f.visibility_us * interval '1 microsecond'
WHERE f.id = (SELECT q.id FROM firings q
              WHERE q.state = 'queued' AND q.task = %(task)s AND q.due_at <= %(now)s
              ORDER BY q.vdeadline LIMIT 1 FOR UPDATE)
RETURNING f.id, f.job_id, f.claim_token, f.lease_until
"""


_FAIL_V15 = """
WITH f AS (
    UPDATE firings
    SET state = CASE WHEN attempt >= max_attempts THEN 'dead' ELSE 'queued' END,
        vdeadline = CASE WHEN attempt >= max_attempts THEN vdeadline
                         ELSE %(retry_at)s + (vdeadline - due_at) END,
        due_at = CASE WHEN attempt >= max_attempts THEN due_at ELSE %(retry_at)s END,
        finished_at = CASE WHEN attempt >= max_attempts THEN %(now)s::timestamptz END,
        started_at = %(now)s, claim_token = NULL, lease_until = NULL, error = %(error)s
    WHERE id = %(id)s AND claim_token = %(token)s AND state = 'running'
    RETURNING id, attempt, worker_id, claimed_at
)
INSERT INTO firing_attempts (firing_id, attempt, worker_id, claimed_at, started_at,
                             finished_at, outcome, error)
SELECT id, attempt, worker_id, claimed_at, %(now)s, %(now)s, 'failed', %(error)s FROM f
"""


def fail_v15(store: PostgresStore, c: ClaimedFiring, error: str, *, retry_at: datetime) -> None:
    """A failed attempt of ``c`` recorded as version 15 recorded it (queued again for
    ``retry_at`` while attempts are left, else DEAD)."""
    params = {
        "now": store.now(),
        "retry_at": retry_at,
        "error": error,
        "id": c.firing.id,
        "token": c.claim_token,
    }
    n = store.db.write(lambda tx: tx.conn.execute(_FAIL_V15, params).rowcount)
    assert n == 1, "the attempt was not recorded"


def claim_v15(store: PostgresStore, worker: str, *, start: bool = True) -> ClaimedFiring:
    """The oldest due firing of ``TASK`` claimed as version 15 wrote a claim (a token of
    32 random hex digits)."""
    params = {"start": start, "now": store.now(), "worker": worker, "task": TASK}
    row = store.db.write(lambda tx: tx.conn.execute(_CLAIM_V15, params).fetchone())
    assert row is not None, "no due firing to claim"
    return ClaimedFiring(
        firing=store.get_firing(row["id"]),
        claim_token=row["claim_token"],
        lease_until=row["lease_until"],
        policies=store.get_job_by_id(row["job_id"]).spec.policies,
    )


def _fill(store: PostgresStore) -> Legacy:
    out = Legacy()
    now = store.now()
    lease = store.acquire_lease(DISPATCHER_LEASE, "leader", timedelta(minutes=5))
    assert lease is not None
    sched = every("1h")
    for name in ("hist", "work", "fail", "skip"):
        j = store.create_job(
            spec(name, task=TASK, namespace=NS, schedule=sched, max_attempts=2, overlap="allow"),
            first_fire_at=now - 3 * DAY,
        )
        out.jobs[name] = j.id
    store.load_history(
        first_job=out.jobs["hist"], jobs=1, start=now - 3 * DAY, step=timedelta(hours=1), count=70
    )

    def fire(name: str, *instants: datetime) -> list[int]:
        job = store.get_job_by_id(out.jobs[name])
        res = store.enqueue(
            lease,
            [
                JobAdvance(
                    job_id=job.id,
                    expected_next_fire_at=job.next_fire_at,
                    new_next_fire_at=instants[-1] + timedelta(hours=1),
                    firings=[PlannedFiring(scheduled_for=t) for t in instants],
                )
            ],
        )
        return list(res.inserted)

    # a DEAD firing with two failed attempts
    fire("fail", now - 2 * DAY)
    for _ in range(2):
        c = claim_v15(store, "w-old")
        fail_v15(store, c, "boom", retry_at=now)
    # RUNNING, CLAIMED (held, not started), then QUEUED, CANCELLED and SKIPPED ones
    fire("work", now - 2 * H, now - H, now - 30 * M, now - 20 * M)
    out.running = claim_v15(store, "w-old")
    out.claimed = claim_v15(store, "w-old", start=False)
    queued = [f for f in store.list_firings(namespace=NS, limit=100) if f.state.value == "queued"]
    out.queued = queued[0].id
    store.cancel_firing(queued[1].id)
    store.skip_occurrences(NS, "skip", [now - 3 * DAY + H], "maintenance")
    f, created = store.enqueue_now_once(
        spec("once", task=TASK, namespace=NS, schedule=now_schedule()),
        key_hash="k" * 64,
        request_hash="r" * 64,
    )
    assert created
    out.idempotent = f.id
    store.release_lease(lease)
    return out


H = timedelta(hours=1)
M = timedelta(minutes=1)


def snapshot(store: PostgresStore) -> dict[str, Any]:
    """Every row of firings, firing_attempts and idempotency_keys, as dicts."""

    def body(tx: Any) -> dict[str, Any]:
        return {
            t: sorted(map(dict, tx.conn.execute(f"SELECT * FROM {t}").fetchall()), key=repr)
            for t in ("firings", "firing_attempts", "idempotency_keys")
        }

    return store.db.read(body)


def midnight(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
