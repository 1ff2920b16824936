"""SqliteStore: the embedded store (stdlib sqlite3, WAL).

Several processes on one host may share the file. Every write runs in
``BEGIN IMMEDIATE`` — SQLite's single writer lock — so the fence check, the
cursor compare-and-swap and the firing inserts of an enqueue are one atomic
step, and claims can never hand one firing to two workers. ``database is
locked`` is waited out (busy timeout, then bounded retries with backoff) and
surfaces as StoreUnavailableError, never as lost work.

SQLite has no server clock: the processes sharing a file share a host, so the
store judges leases and claims by the Clock it is given (the system clock in
production, a FakeClock in tests).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from cronwheel import failpoints
from cronwheel.domain.clock import Clock, SystemClock
from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import (
    ClaimedFiring,
    Epoch,
    Firing,
    FiringId,
    Job,
    JobEvent,
    JobId,
    JobSpec,
    Lease,
    NodeInfo,
)
from cronwheel.domain.policies import fair_deadline
from cronwheel.errors import (
    ConflictError,
    FiringNotFoundError,
    InvalidTransitionError,
    JobNotFoundError,
    LeaseLostError,
    NotFoundError,
    StoreError,
    StoreUnavailableError,
)
from cronwheel.store import codec
from cronwheel.store.claiming import Candidate, capped, plan_claim
from cronwheel.store.codec import duration_us, from_us, opt_us, to_us
from cronwheel.store.protocol import (
    AddedFirings,
    ApiToken,
    CancelResult,
    Completion,
    EnqueueResult,
    JobAdvance,
    StoreStatus,
)
from cronwheel.store.sql import load_queries
from cronwheel.wakeup import Doorbell, UdpWakeup, Wakeup

_PKG = "cronwheel.store.sqlite"
_LOCK_RETRY_S = 30.0


def _locked(exc: sqlite3.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


class SqliteStore:
    """The Store on one SQLite file (see the module docstring for its guarantees)."""

    def __init__(self, path: str, *, clock: Clock | None = None, busy_timeout_ms: int = 5000):
        self.path = path
        self._clock = clock or SystemClock()
        self._q = load_queries(_PKG, "queries.sql")
        self._lock = threading.RLock()
        if path != ":memory:":
            parent = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(parent):
                raise StoreError(f"directory {parent!r} does not exist", field="store")
        try:
            self._conn = sqlite3.connect(
                path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000
            )
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"cannot open {path!r}: {exc}", field="store") from exc
        self._conn.row_factory = sqlite3.Row
        with self._retrying():
            self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        self._doorbell = Doorbell(self._worker_wake_addresses)

    # -- plumbing -----------------------------------------------------------------
    @contextmanager
    def _retrying(self) -> Iterator[None]:
        deadline = time.monotonic() + _LOCK_RETRY_S
        delay = 0.005
        while True:
            try:
                yield
                return
            except sqlite3.OperationalError as exc:
                if not _locked(exc) or time.monotonic() > deadline:
                    raise StoreUnavailableError(f"sqlite: {exc}") from exc
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under SQLite's writer lock (BEGIN IMMEDIATE)."""
        conn = self._conn
        with self._lock:
            deadline = time.monotonic() + _LOCK_RETRY_S
            delay = 0.005
            while True:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    break
                except sqlite3.OperationalError as exc:
                    if not _locked(exc) or time.monotonic() > deadline:
                        raise StoreUnavailableError(f"sqlite: {exc}") from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.25)
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                conn.execute("ROLLBACK")
                raise StoreUnavailableError(f"sqlite commit: {exc}") from exc

    def _read(self, sql: str, params: dict[str, Any] | Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.OperationalError as exc:
                if _locked(exc):
                    raise StoreUnavailableError(f"sqlite: {exc}") from exc
                raise

    def _now_us(self) -> int:
        return to_us(self._clock.now())

    def now(self) -> datetime:
        return self._clock.now()

    # -- lifecycle ------------------------------------------------------------------
    def migrate(self) -> int:
        migrations = load_queries(_PKG, "schema.sql")
        with self._tx() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            version = int(row["value"]) if row else 0
            n = version
            while f"migration_{n + 1}" in migrations:
                n += 1
                for statement in _statements(migrations[f"migration_{n}"]):
                    conn.execute(statement)
            if n != version:
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (str(n),),
                )
            return n

    def close(self) -> None:
        self._doorbell.close()
        with self._lock:
            self._conn.close()

    # -- wake-ups -------------------------------------------------------------------
    def open_wakeup(self, callback: Callable[[], None]) -> Wakeup:
        return UdpWakeup(callback)

    def _worker_wake_addresses(self) -> list[str]:
        return [
            n.wake_addr
            for n in self.list_nodes(alive_within=timedelta(seconds=30))
            if n.kind == "worker" and n.wake_addr
        ]

    # -- jobs -------------------------------------------------------------------------
    def create_job(self, spec: JobSpec, *, first_fire_at: datetime | None) -> Job:
        params = codec.job_params(spec) | {
            "next_fire_at": opt_us(first_fire_at),
            "now": self._now_us(),
        }
        with self._tx() as conn:
            try:
                row = conn.execute(self._q["insert_job"], params).fetchone()
            except sqlite3.IntegrityError:
                raise ConflictError(
                    f"a job named {spec.name!r} already exists in namespace {spec.namespace!r}",
                    field="name",
                    code="job_exists",
                ) from None
            conn.execute(self._q["bump_jobs_version"])
        return codec.job_from_row(row)

    def create_jobs(self, items: Sequence[tuple[JobSpec, datetime | None]]) -> int:
        now = self._now_us()
        rows = [
            codec.job_params(spec) | {"next_fire_at": opt_us(first), "now": now}
            for spec, first in items
        ]
        with self._tx() as conn:
            try:
                conn.executemany(self._q["insert_job_bulk"], rows)
            except sqlite3.IntegrityError as exc:
                raise ConflictError(
                    f"a job in the batch already exists ({exc})", field="name", code="job_exists"
                ) from None
            conn.execute(self._q["bump_jobs_version"])
        return len(rows)

    def upsert_job(self, spec: JobSpec, *, first_fire_at: datetime | None) -> tuple[Job, bool]:
        params = codec.job_params(spec)
        with self._tx() as conn:
            row = conn.execute(
                "SELECT * FROM jobs WHERE namespace = ? AND name = ?", (spec.namespace, spec.name)
            ).fetchone()
            now = self._now_us()
            if row is None:
                row = conn.execute(
                    self._q["insert_job"],
                    params | {"next_fire_at": opt_us(first_fire_at), "now": now},
                ).fetchone()
            elif row["spec_hash"] == params["spec_hash"]:
                return codec.job_from_row(row), False
            else:
                same_schedule = row["schedule"] == params["schedule"]
                next_fire = row["next_fire_at"] if same_schedule else opt_us(first_fire_at)
                row = conn.execute(
                    self._q["update_job_spec"],
                    params | {"id": row["id"], "next_fire_at": next_fire, "now": now},
                ).fetchone()
            conn.execute(self._q["bump_jobs_version"])
        return codec.job_from_row(row), True

    def _job_row(self, namespace: str, name: str) -> sqlite3.Row:
        rows = self._read("SELECT * FROM jobs WHERE namespace = ? AND name = ?", (namespace, name))
        if not rows:
            raise JobNotFoundError(f"no job named {name!r}", field="name")
        return rows[0]

    def get_job(self, namespace: str, name: str) -> Job:
        return codec.job_from_row(self._job_row(namespace, name))

    def get_job_by_id(self, job_id: JobId) -> Job:
        rows = self._read("SELECT * FROM jobs WHERE id = ?", (job_id,))
        if not rows:
            raise JobNotFoundError(f"no job with id {job_id}", field="job_id")
        return codec.job_from_row(rows[0])

    def list_jobs(
        self,
        *,
        namespace: str | None = None,
        name_prefix: str | None = None,
        task: str | None = None,
        after_id: int = 0,
        limit: int = 100,
    ) -> list[Job]:
        where, params = ["id > ?"], [after_id]
        if namespace is not None:
            where.append("namespace = ?")
            params.append(namespace)  # type: ignore[arg-type]
        if task is not None:
            where.append("task = ?")
            params.append(task)  # type: ignore[arg-type]
        if name_prefix:
            # substr comparison: '%' and '_' in a prefix are literal, never LIKE patterns
            where.append("substr(name, 1, ?) = ?")
            params.extend([len(name_prefix), name_prefix])  # type: ignore[list-item]
        sql = f"SELECT * FROM jobs WHERE {' AND '.join(where)} ORDER BY id LIMIT ?"
        return [codec.job_from_row(r) for r in self._read(sql, [*params, limit])]

    def set_paused(self, namespace: str, name: str, paused: bool) -> Job:
        with self._tx() as conn:
            row = conn.execute(
                "UPDATE jobs SET paused = ?, updated_at = ? WHERE namespace = ? AND name = ? "
                "RETURNING *",
                (int(paused), self._now_us(), namespace, name),
            ).fetchone()
            if row is None:
                raise JobNotFoundError(f"no job named {name!r}", field="name")
            conn.execute(
                self._q["insert_event"],
                {
                    "job_id": row["id"],
                    "now": self._now_us(),
                    "kind": "paused" if paused else "resumed",
                    "first_at": None,
                    "last_at": None,
                    "count": 0,
                    "exact": 1,
                    "detail": None,
                },
            )
            conn.execute(self._q["bump_jobs_version"])
        return codec.job_from_row(row)

    def delete_job(self, namespace: str, name: str) -> None:
        with self._tx() as conn:
            cur = conn.execute(
                "DELETE FROM jobs WHERE namespace = ? AND name = ?", (namespace, name)
            )
            if cur.rowcount == 0:
                raise JobNotFoundError(f"no job named {name!r}", field="name")
            conn.execute(self._q["bump_jobs_version"])

    def due_jobs(
        self, horizon: datetime, *, limit: int, after: tuple[datetime, int] | None = None
    ) -> list[Job]:
        after_at, after_id = (-(2**62), 0) if after is None else (to_us(after[0]), after[1])
        rows = self._read(
            self._q["due_jobs"],
            {"horizon": to_us(horizon), "limit": limit, "after_at": after_at, "after_id": after_id},
        )
        return [codec.job_from_row(r) for r in rows]

    def jobs_version(self) -> int:
        rows = self._read("SELECT value FROM meta WHERE key = 'jobs_version'")
        return int(rows[0]["value"]) if rows else 0

    def job_events(self, job_id: JobId, *, limit: int = 100) -> list[JobEvent]:
        rows = self._read(
            "SELECT * FROM job_events WHERE job_id = ? ORDER BY id DESC LIMIT ?", (job_id, limit)
        )
        return [codec.event_from_row(r) for r in rows]

    # -- leadership -------------------------------------------------------------------
    def acquire_lease(self, name: str, holder: str, ttl: timedelta) -> Lease | None:
        now = self._now_us()
        with self._tx() as conn:
            row = conn.execute(
                self._q["acquire_lease"],
                {"name": name, "holder": holder, "now": now, "expires_at": now + duration_us(ttl)},
            ).fetchone()
        return None if row is None else _lease(row)

    def release_lease(self, lease: Lease) -> None:
        with self._tx() as conn:
            conn.execute(
                "UPDATE leases SET expires_at = ? WHERE name = ? AND holder = ? AND epoch = ?",
                (self._now_us(), lease.name, lease.holder, lease.epoch),
            )

    def get_lease(self, name: str) -> Lease | None:
        rows = self._read("SELECT * FROM leases WHERE name = ?", (name,))
        return _lease(rows[0]) if rows else None

    # -- dispatch ---------------------------------------------------------------------
    def enqueue(self, lease: Lease, advances: Sequence[JobAdvance]) -> EnqueueResult:
        result = EnqueueResult()
        with self._tx() as conn:
            now = self._now_us()
            fenced = conn.execute(
                self._q["fence_check"],
                {"name": lease.name, "holder": lease.holder, "epoch": lease.epoch, "now": now},
            ).fetchone()
            if fenced is None:
                raise LeaseLostError(
                    f"lease {lease.name!r} epoch {lease.epoch} is no longer held by {lease.holder}"
                )
            fair = _FairClocks(conn, self._q)
            for adv in advances:
                missed = sum(m.count for m in adv.missed)
                last_fired = max((f.scheduled_for for f in adv.firings), default=None)
                moved = conn.execute(
                    self._q["advance_job"],
                    {
                        "job_id": adv.job_id,
                        "expected": to_us(adv.expected_next_fire_at),
                        "new_next": opt_us(adv.new_next_fire_at),
                        "last_fired": opt_us(last_fired),
                        "missed": missed,
                        "runs": len(adv.firings),
                    },
                ).rowcount
                if not moved:
                    result.stale.append(adv.job_id)
                    continue
                for planned in adv.firings:
                    at = to_us(planned.scheduled_for)
                    due = to_us(planned.due_at or planned.scheduled_for)
                    cur = conn.execute(
                        self._q["insert_firing"],
                        {
                            "job_id": adv.job_id,
                            "scheduled_for": at,
                            "due_at": due,
                            "vdeadline": fair.deadline(adv.job_id, due),
                            "now": now,
                            "epoch": lease.epoch,
                            "note": planned.note,
                        },
                    )
                    if cur.rowcount:
                        result.inserted.append(FiringId(cur.lastrowid or 0))
                    else:
                        result.duplicates += 1
                for m in adv.missed:
                    conn.execute(
                        self._q["insert_event"],
                        {
                            "job_id": adv.job_id,
                            "now": now,
                            "kind": "missed",
                            "first_at": to_us(m.first),
                            "last_at": to_us(m.last),
                            "count": m.count,
                            "exact": int(m.exact),
                            "detail": m.reason,
                        },
                    )
            fair.save()
            failpoints.hit("store.enqueue.before_commit")
        if result.inserted:
            self._doorbell.ring()
        return result

    def requeue_expired(self, *, limit: int = 1000) -> int:
        with self._tx() as conn:
            now = self._now_us()
            rows = conn.execute(self._q["expired_claims"], {"now": now, "limit": limit}).fetchall()
            n = 0
            for row in rows:
                if conn.execute(self._q["expire_claim"], {"id": row["id"], "now": now}).rowcount:
                    n += 1
                    conn.execute(
                        self._q["insert_attempt"],
                        {
                            "firing_id": row["id"],
                            "attempt": row["attempt"],
                            "worker_id": row["worker_id"],
                            "started_at": row["started_at"],
                            "finished_at": now,
                            "outcome": "lease_expired",
                            "error": "lease expired",
                        },
                    )
            params = {"now": now, "limit": limit}
            n += conn.execute(self._q["cancel_deadline_passed"], params).rowcount
            n += conn.execute(self._q["start_deadline_passed"], params).rowcount
        return n

    # -- immediate work ---------------------------------------------------------------
    def enqueue_now(self, spec: JobSpec) -> Firing:
        now = self._now_us()
        params = codec.job_params(spec) | {"next_fire_at": None, "now": now}
        with self._tx() as conn:
            try:
                job = conn.execute(self._q["insert_job"], params).fetchone()
            except sqlite3.IntegrityError:
                raise ConflictError(
                    f"a job named {spec.name!r} already exists", field="name", code="job_exists"
                ) from None
            conn.execute("UPDATE jobs SET last_fired_at = ? WHERE id = ?", (now, job["id"]))
            fair = _FairClocks(conn, self._q)
            cur = conn.execute(
                self._q["insert_firing"],
                {
                    "job_id": job["id"],
                    "scheduled_for": now,
                    "due_at": now,
                    "vdeadline": fair.deadline(job["id"], now),
                    "now": now,
                    "epoch": None,
                    "note": None,
                },
            )
            fair.save()
            row = conn.execute("SELECT * FROM firings WHERE id = ?", (cur.lastrowid,)).fetchone()
        self._doorbell.ring()
        return codec.firing_from_row(row)

    # -- workers ------------------------------------------------------------------------
    def claim(
        self,
        worker_id: str,
        *,
        tasks: Sequence[str],
        limit: int,
        prefetch: timedelta = timedelta(0),
    ) -> list[ClaimedFiring]:
        if limit <= 0 or not tasks:
            return []
        with self._tx() as conn:
            rows, policies = self._claim_in(conn, worker_id, tasks, limit, prefetch)
        return codec.claimed_from_rows(rows, lambda r: policies[r["job_id"]])

    def complete_and_claim(
        self,
        completions: Sequence[Completion],
        worker_id: str,
        *,
        tasks: Sequence[str],
        limit: int,
        prefetch: timedelta = timedelta(0),
    ) -> tuple[list[bool], list[ClaimedFiring]]:
        """Both in one write transaction: one commit, one take of the writer lock."""
        with self._tx() as conn:
            accepted = self._complete_in(conn, completions)
            if limit <= 0 or not tasks:
                return accepted, []
            rows, policies = self._claim_in(conn, worker_id, tasks, limit, prefetch)
        return accepted, codec.claimed_from_rows(rows, lambda r: policies[r["job_id"]])

    def _claim_in(
        self,
        conn: sqlite3.Connection,
        worker_id: str,
        tasks: Sequence[str],
        limit: int,
        prefetch: timedelta,
    ) -> tuple[list[sqlite3.Row], dict[int, str]]:
        """The claimed rows and their jobs' stored policies, as read in the transaction;
        the caller decodes them after the commit, outside the writer lock."""
        now = self._now_us()
        rows = self._claim_rows(conn, worker_id, tasks, limit, now, now + duration_us(prefetch))
        if not rows:
            return [], {}
        job_ids = sorted({r["job_id"] for r in rows})
        marks = ",".join("?" * len(job_ids))
        policies = {
            r[0]: r[1]
            for r in conn.execute(f"SELECT id, policies FROM jobs WHERE id IN ({marks})", job_ids)
        }
        return rows, policies

    def _claim_rows(
        self,
        conn: sqlite3.Connection,
        worker_id: str,
        tasks: Sequence[str],
        limit: int,
        now: int,
        until: int,
    ) -> list[sqlite3.Row]:
        """Inside the claim transaction (SQLite's writer lock makes it atomic): plan with
        the overlap policies, apply the fates, claim the chosen firings."""
        found = conn.execute(
            self._q["claim_candidates"],
            # a few more than the claim may take: some may be skipped or held by a cap
            {"now": now, "until": until, "tasks": json.dumps(list(tasks)), "scan": limit + 32},
        ).fetchall()
        if all(r["unpolicied"] and not r["deadline_passed"] for r in found[:limit]):
            # the common case: nothing to decide before the claim is full
            return self._claim_ids(conn, [r["id"] for r in found[:limit]], worker_id, now)
        candidates: list[Candidate[int, int]] = []
        early: list[Candidate[int, int]] = []
        for r in found:
            c = Candidate(
                id=r["id"],
                job_id=r["job_id"],
                max_concurrency=r["max_concurrency"],
                overlap=r["overlap"],
                max_buffer=r["max_buffer"],
                overlap_override=r["overlap_override"],
                deadline_passed=bool(r["deadline_passed"]),
            )
            # a capped job's not-yet-due firing is decided when it is due, not early
            (early if capped(c) and r["due_at"] > now else candidates).append(c)
        jobs = {c.job_id for c in [*candidates, *early] if capped(c) or c.overlap_override}
        running = {
            j: conn.execute(self._q["running_count"], {"job_id": j}).fetchone()["n"] for j in jobs
        }
        due = {
            j: [
                r["id"]
                for r in conn.execute(self._q["due_queued_of_job"], {"job_id": j, "now": now})
            ]
            for j in jobs
        }
        plan = plan_claim(candidates, limit=limit, running=running, due_by_job=due, early=early)
        for state, items in (("skipped", plan.skip), ("missed", plan.missed)):
            for firing_id, reason in items:
                conn.execute(
                    self._q["finish_unrun"],
                    {"id": firing_id, "state": state, "reason": reason, "now": now},
                )
        for firing_id in plan.buffered:
            conn.execute(self._q["mark_buffered"], {"id": firing_id, "now": now})
        for job_id in plan.cancel_running:
            conn.execute(
                self._q["cancel_running_of_job"],
                {
                    "job_id": job_id,
                    "now": now,
                    "reason": "cancelled by overlap policy cancel_other",
                },
            )
        for job_id in plan.terminate_running:
            conn.execute(
                self._q["terminate_running_of_job"],
                {
                    "job_id": job_id,
                    "now": now,
                    "reason": "terminated by overlap policy terminate_other",
                },
            )
        return self._claim_ids(conn, plan.claim, worker_id, now)

    def _claim_ids(
        self, conn: sqlite3.Connection, ids: list[int], worker_id: str, now: int
    ) -> list[sqlite3.Row]:
        if not ids:
            return []
        return conn.execute(
            self._q["claim_ids"], {"ids": json.dumps(ids), "worker_id": worker_id, "now": now}
        ).fetchall()

    def next_due_at(self) -> datetime | None:
        rows = self._read(self._q["next_due_at"], {"now": self._now_us()})
        value = rows[0]["d"] if rows else None
        return None if value is None else from_us(value)

    def heartbeat(self, worker_id: str, claims: Sequence[tuple[FiringId, str]]) -> set[FiringId]:
        lost: set[FiringId] = set()
        if not claims:
            return lost
        with self._tx() as conn:
            now = self._now_us()
            for firing_id, token in claims:
                cur = conn.execute(
                    self._q["heartbeat"], {"id": firing_id, "token": token, "now": now}
                )
                if cur.rowcount == 0:
                    lost.add(firing_id)
        return lost

    def cancel_requested(self, claims: Sequence[tuple[FiringId, str]]) -> set[FiringId]:
        if not claims:
            return set()
        ids = [c[0] for c in claims]
        marks = ",".join("?" * len(ids))
        rows = self._read(
            f"SELECT id FROM firings WHERE id IN ({marks}) AND cancel_requested_at IS NOT NULL", ids
        )
        return {FiringId(r["id"]) for r in rows}

    def complete(self, completions: Sequence[Completion]) -> list[bool]:
        if not completions:
            return []
        with self._tx() as conn:
            return self._complete_in(conn, completions)

    def _complete_in(
        self, conn: sqlite3.Connection, completions: Sequence[Completion]
    ) -> list[bool]:
        # successes, the common case, in one statement; the others one by one
        successes = [
            [c.firing_id, c.claim_token, to_us(c.started_at), to_us(c.finished_at)]
            for c in completions
            if c.succeeded and not c.cancelled
        ]
        done: set[tuple[int, str]] = set()
        if successes:
            rows = conn.execute(self._q["complete_successes"], {"batch": json.dumps(successes)})
            done = {(r[0], r[1]) for r in rows}
        accepted: list[bool] = []
        for c in completions:
            if c.succeeded and not c.cancelled:
                accepted.append((c.firing_id, c.claim_token) in done)
                continue
            params = {
                "id": c.firing_id,
                "token": c.claim_token,
                "started_at": to_us(c.started_at),
                "finished_at": to_us(c.finished_at),
            }
            if c.cancelled:
                row = conn.execute(
                    self._q["complete_cancelled"], params | {"error": c.error}
                ).fetchone()
            else:
                row = conn.execute(
                    self._q["complete_failure"],
                    params | {"error": c.error, "retry_at": opt_us(c.retry_at)},
                ).fetchone()
                if row is not None:
                    conn.execute(
                        self._q["insert_attempt"],
                        {
                            "firing_id": c.firing_id,
                            "attempt": row["attempt"],
                            "worker_id": row["worker_id"],
                            "started_at": params["started_at"],
                            "finished_at": params["finished_at"],
                            "outcome": "failed",
                            "error": c.error,
                        },
                    )
            accepted.append(row is not None)
        return accepted

    # -- firings ------------------------------------------------------------------------
    def get_firing(self, firing_id: FiringId) -> Firing:
        rows = self._read("SELECT * FROM firings WHERE id = ?", (firing_id,))
        if not rows:
            raise FiringNotFoundError(f"no firing with id {firing_id}", field="firing_id")
        return codec.firing_from_row(rows[0])

    def list_firings(
        self,
        *,
        job_id: JobId | None = None,
        namespace: str | None = None,
        states: Sequence[FiringState] | None = None,
        before_id: int | None = None,
        limit: int = 100,
    ) -> list[Firing]:
        where: list[str] = []
        params: list[Any] = []
        if job_id is not None:
            where.append("job_id = ?")
            params.append(job_id)
        if namespace is not None:
            where.append("namespace = ?")
            params.append(namespace)
        if states:
            where.append(f"state IN ({','.join('?' * len(states))})")
            params.extend(s.value for s in states)
        if before_id is not None:
            where.append("id < ?")
            params.append(before_id)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = self._read(
            f"SELECT * FROM firings {clause} ORDER BY id DESC LIMIT ?", [*params, limit]
        )
        return [codec.firing_from_row(r) for r in rows]

    def cancel_firing(self, firing_id: FiringId) -> CancelResult:
        with self._tx() as conn:
            now = self._now_us()
            params = {"id": firing_id, "now": now}
            row = conn.execute(self._q["cancel_queued"], params).fetchone()
            if row is not None:
                return CancelResult(outcome="cancelled", firing=codec.firing_from_row(row))
            row = conn.execute(self._q["cancel_running"], params).fetchone()
            if row is not None:
                return CancelResult(outcome="cancel_requested", firing=codec.firing_from_row(row))
            row = conn.execute("SELECT * FROM firings WHERE id = ?", (firing_id,)).fetchone()
        if row is None:
            raise FiringNotFoundError(f"no firing with id {firing_id}", field="firing_id")
        return CancelResult(outcome="already_final", firing=codec.firing_from_row(row))

    def redrive_firing(self, firing_id: FiringId) -> Firing:
        with self._tx() as conn:
            now = self._now_us()
            row = conn.execute(self._q["redrive"], {"id": firing_id, "now": now}).fetchone()
            if row is None:
                current = conn.execute(
                    "SELECT state FROM firings WHERE id = ?", (firing_id,)
                ).fetchone()
                if current is None:
                    raise FiringNotFoundError(f"no firing with id {firing_id}", field="firing_id")
                raise InvalidTransitionError(
                    f"only a dead firing can be retried; this one is {current['state']}",
                    field="state",
                )
        self._doorbell.ring()
        return codec.firing_from_row(row)

    # -- nodes ------------------------------------------------------------------------
    def register_node(self, node: NodeInfo) -> None:
        with self._tx() as conn:
            conn.execute(
                self._q["register_node"],
                {
                    "id": node.id,
                    "kind": node.kind,
                    "hostname": node.hostname,
                    "pid": node.pid,
                    "started_at": to_us(node.started_at),
                    "now": self._now_us(),
                    "wake_addr": node.wake_addr,
                    "info": json.dumps(node.info),
                },
            )

    def heartbeat_node(self, node_id: str) -> None:
        with self._tx() as conn:
            conn.execute(
                "UPDATE nodes SET heartbeat_at = ? WHERE id = ?", (self._now_us(), node_id)
            )

    def remove_node(self, node_id: str) -> None:
        with self._tx() as conn:
            conn.execute("DELETE FROM nodes WHERE id = ?", (node_id,))

    def list_nodes(self, *, alive_within: timedelta | None = None) -> list[NodeInfo]:
        if alive_within is None:
            rows = self._read("SELECT * FROM nodes ORDER BY kind, id")
        else:
            rows = self._read(
                "SELECT * FROM nodes WHERE heartbeat_at >= ? ORDER BY kind, id",
                (self._now_us() - duration_us(alive_within),),
            )
        return [codec.node_from_row(r) for r in rows]

    def status(self) -> StoreStatus:
        now = self._now_us()
        since = now - 3_600_000_000
        counts: dict[str, int] = {}
        for row in self._read(self._q["status_counts"], {"since": since}):
            counts[row["state"]] = counts.get(row["state"], 0) + int(row["n"])
        jobs = self._read("SELECT count(*) AS n, coalesce(sum(paused), 0) AS p FROM jobs")[0]
        oldest = self._read("SELECT min(due_at) AS d FROM firings WHERE state = 'queued'")[0]["d"]
        lateness = [
            r["lateness_us"] / 1000
            for r in self._read(self._q["recent_lateness"], {"since": since, "limit": 1000})
        ]
        return StoreStatus(
            now=from_us(now),
            lease=self.get_lease("dispatcher"),
            counts=counts,
            jobs=int(jobs["n"]),
            paused_jobs=int(jobs["p"]),
            oldest_queued_due_at=None if oldest is None else from_us(oldest),
            nodes=self.list_nodes(),
            lateness_ms=lateness,
        )

    # -- HTTP API support (ApiStore) ----------------------------------------------------
    def ping(self) -> None:
        try:
            self._read("SELECT 1")
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"sqlite: {exc}") from exc

    def create_token(
        self, *, namespace: str, role: str, label: str | None, secret_hash: str
    ) -> ApiToken:
        params = {
            "namespace": namespace,
            "role": role,
            "label": label,
            "secret_hash": secret_hash,
            "now": self._now_us(),
        }
        with self._tx() as conn:
            row = conn.execute(self._q["insert_token"], params).fetchone()
        return _token(row)

    def get_token(self, token_id: int) -> ApiToken | None:
        rows = self._read("SELECT * FROM api_tokens WHERE id = ?", (token_id,))
        return _token(rows[0]) if rows else None

    def list_tokens(self, *, namespace: str | None = None) -> list[ApiToken]:
        if namespace is None:
            rows = self._read("SELECT * FROM api_tokens ORDER BY id")
        else:
            rows = self._read(
                "SELECT * FROM api_tokens WHERE namespace = ? ORDER BY id", (namespace,)
            )
        return [_token(r) for r in rows]

    def revoke_token(self, token_id: int) -> ApiToken:
        with self._tx() as conn:
            row = conn.execute(
                self._q["revoke_token"], {"id": token_id, "now": self._now_us()}
            ).fetchone()
        if row is None:
            raise NotFoundError(f"no token with id {token_id}", field="token_id")
        return _token(row)

    def search_jobs(
        self,
        namespace: str,
        *,
        state: str | None = None,
        task: str | None = None,
        name_prefix: str | None = None,
        after_id: int = 0,
        limit: int = 100,
    ) -> list[Job]:
        where: list[str] = ["namespace = ?", "id > ?"]
        params: list[Any] = [namespace, after_id]
        if state == "active":
            where.append("paused = 0 AND next_fire_at IS NOT NULL")
        elif state == "paused":
            where.append("paused = 1")
        elif state == "done":
            where.append("paused = 0 AND next_fire_at IS NULL")
        if task is not None:
            where.append("task = ?")
            params.append(task)
        if name_prefix:
            # substr comparison: '%' and '_' in a prefix are literal, never LIKE patterns
            where.append("substr(name, 1, ?) = ?")
            params.extend([len(name_prefix), name_prefix])
        sql = f"SELECT * FROM jobs WHERE {' AND '.join(where)} ORDER BY id LIMIT ?"
        return [codec.job_from_row(r) for r in self._read(sql, [*params, limit])]

    def list_job_firings(
        self,
        job_id: JobId,
        *,
        states: Sequence[FiringState] | None = None,
        scheduled_from: datetime | None = None,
        scheduled_to: datetime | None = None,
        before_id: int | None = None,
        limit: int = 100,
    ) -> list[Firing]:
        where: list[str] = ["job_id = ?"]
        params: list[Any] = [job_id]
        if states:
            where.append(f"state IN ({','.join('?' * len(states))})")
            params.extend(s.value for s in states)
        if scheduled_from is not None:
            where.append("scheduled_for >= ?")
            params.append(to_us(scheduled_from))
        if scheduled_to is not None:
            where.append("scheduled_for < ?")
            params.append(to_us(scheduled_to))
        if before_id is not None:
            where.append("id < ?")
            params.append(before_id)
        sql = f"SELECT * FROM firings WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT ?"
        return [codec.firing_from_row(r) for r in self._read(sql, [*params, limit])]

    def add_firings(
        self,
        namespace: str,
        name: str,
        scheduled_for: Sequence[datetime],
        *,
        note: str,
        overlap: str | None = None,
    ) -> AddedFirings:
        inserted: list[Firing] = []
        duplicates = 0
        with self._tx() as conn:
            job = conn.execute(
                "SELECT id FROM jobs WHERE namespace = ? AND name = ?", (namespace, name)
            ).fetchone()
            if job is None:
                raise JobNotFoundError(f"no job named {name!r}", field="name")
            now = self._now_us()
            fair = _FairClocks(conn, self._q)
            for instant in scheduled_for:
                at = to_us(instant)
                due = max(at, now)
                row = conn.execute(
                    self._q["insert_job_firing"],
                    {
                        "job_id": job["id"],
                        "scheduled_for": at,
                        "due_at": due,
                        "vdeadline": fair.deadline(job["id"], due),
                        "now": now,
                        "note": note,
                        "overlap": overlap,
                    },
                ).fetchone()
                if row is None:
                    duplicates += 1
                else:
                    inserted.append(codec.firing_from_row(row))
            fair.save()
        if inserted:
            self._doorbell.ring()
        return AddedFirings(inserted=inserted, duplicates=duplicates)

    def enqueue_now_once(
        self, spec: JobSpec, *, key_hash: str, request_hash: str
    ) -> tuple[Firing, bool]:
        key = {"namespace": spec.namespace, "key_hash": key_hash}
        now = self._now_us()
        with self._tx() as conn:
            seen = conn.execute(self._q["find_idempotency_key"], key).fetchone()
            if seen is not None:
                if seen["request_hash"] != request_hash:
                    raise ConflictError(
                        "this Idempotency-Key was used with a different request body",
                        field="Idempotency-Key",
                    )
                row = conn.execute(
                    "SELECT * FROM firings WHERE id = ?", (seen["firing_id"],)
                ).fetchone()
                return codec.firing_from_row(row), False
            # the same steps as enqueue_now, inside this transaction
            try:
                job = conn.execute(
                    self._q["insert_job"],
                    codec.job_params(spec) | {"next_fire_at": None, "now": now},
                ).fetchone()
            except sqlite3.IntegrityError:
                raise ConflictError(
                    f"a job named {spec.name!r} already exists", field="name", code="job_exists"
                ) from None
            conn.execute("UPDATE jobs SET last_fired_at = ? WHERE id = ?", (now, job["id"]))
            fair = _FairClocks(conn, self._q)
            row = conn.execute(
                self._q["insert_job_firing"],
                {
                    "job_id": job["id"],
                    "scheduled_for": now,
                    "due_at": now,
                    "vdeadline": fair.deadline(job["id"], now),
                    "now": now,
                    "note": None,
                    "overlap": None,
                },
            ).fetchone()
            fair.save()
            conn.execute(
                self._q["insert_idempotency_key"],
                key | {"request_hash": request_hash, "firing_id": row["id"], "now": now},
            )
        self._doorbell.ring()
        return codec.firing_from_row(row), True

    def job_backlog(self, namespace: str, *, limit: int = 50) -> dict[str, int]:
        rows = self._read(self._q["job_backlog"], {"namespace": namespace, "limit": limit})
        return {r["job_name"]: int(r["n"]) for r in rows}


class _FairClocks:
    """Per-namespace virtual clocks within one transaction (domain.policies.fair_deadline)."""

    def __init__(self, conn: sqlite3.Connection, queries: dict[str, str]) -> None:
        self._conn = conn
        self._q = queries
        self._jobs: dict[int, tuple[str, float]] = {}
        self._clocks: dict[str, int] = {}

    def deadline(self, job_id: int, due_us: int) -> int:
        if job_id not in self._jobs:
            row = self._conn.execute(self._q["fair_clock"], {"job_id": job_id}).fetchone()
            self._jobs[job_id] = (row["namespace"], float(row["priority"]))
            self._clocks.setdefault(row["namespace"], int(row["vclock"]))
        namespace, priority = self._jobs[job_id]
        vdeadline, self._clocks[namespace] = fair_deadline(
            self._clocks[namespace], due_us, priority
        )
        return vdeadline

    def save(self) -> None:
        for namespace, vclock in self._clocks.items():
            self._conn.execute(
                self._q["save_fair_clock"], {"namespace": namespace, "vclock": vclock}
            )


def _statements(script: str) -> list[str]:
    """Split a script into statements (sqlite3.complete_statement knows about quotes)."""
    out: list[str] = []
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                out.append(buf.strip())
            buf = ""
    if buf.strip() and not all(
        ln.strip().startswith("--") or not ln.strip() for ln in buf.splitlines()
    ):
        raise StoreError(f"incomplete statement in schema: {buf[:80]!r}")
    return out


def _lease(row: sqlite3.Row) -> Lease:
    return Lease(
        name=row["name"],
        holder=row["holder"],
        epoch=Epoch(row["epoch"]),
        expires_at=from_us(row["expires_at"]),
        acquired_at=from_us(row["acquired_at"]),
    )


def _token(row: sqlite3.Row) -> ApiToken:
    return ApiToken(
        id=int(row["id"]),
        namespace=row["namespace"],
        role=row["role"],
        label=row["label"],
        secret_hash=row["secret_hash"],
        created_at=from_us(row["created_at"]),
        revoked_at=codec.opt_dt(row["revoked_at"]),
    )
