"""PostgresStore: the Store for more than one host (psycopg 3, psycopg_pool).

Semantics mirror SqliteStore one for one (the contract suite runs both); what differs
is how they are kept:

- Time is the database's: every lease, claim and expiry comparison uses the server's
  ``now()`` in SQL (see ``:now`` in queries.sql), never a node's clock. The ``clock``
  argument exists only for signature compatibility with SqliteStore and is ignored.
- Fencing: an enqueue reads its lease row ``FOR SHARE`` in the same transaction as the
  cursor compare-and-swaps and the inserts, and a takeover updates that row, so the two
  serialize on the row lock; the loser sees the winner's committed row.
- Claims and the reaper pick rows with ``FOR UPDATE SKIP LOCKED``. A claim whose
  candidates include a capped job (or an overlap override, or a passed start deadline)
  is planned by store/claiming.py inside one transaction, under row locks that
  serialize the claimers of each capped job (see ``claim``); otherwise it is one
  statement.
- Fair clocks: every transaction that inserts QUEUED firings locks its namespaces'
  ``fair_clocks`` rows, computes the virtual deadlines in Python (fair_deadline) and
  writes the clocks back with the inserts.
- Batches are a few statements over arrays (``unnest``), not one statement per row.
- Wake-ups are ``pg_notify`` in the writing transaction (delivered at commit) and a
  LISTEN connection per listener (listen.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from psycopg import errors as pgerrors
from psycopg.rows import DictRow

from cronwheel import failpoints
from cronwheel.domain.clock import Clock
from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import (
    ClaimedFiring,
    Firing,
    FiringId,
    Job,
    JobEvent,
    JobId,
    JobSpec,
    Lease,
    NodeInfo,
)
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
from cronwheel.store.postgres.db import Conn, Database, DbTime, load_sql, query
from cronwheel.store.postgres.listen import PgListenWakeup
from cronwheel.store.postgres.params import (
    FairClocks,
    advance_params,
    complete_params,
    insert_params,
    job_params,
    lease_from_row,
    rounds,
    utc,
)
from cronwheel.store.protocol import (
    DISPATCHER_LEASE,
    AddedFirings,
    ApiStore,
    ApiToken,
    CancelResult,
    Completion,
    EnqueueResult,
    JobAdvance,
    Store,
    StoreStatus,
)
from cronwheel.wakeup import Wakeup

_BEGINNING = datetime(1, 1, 2, tzinfo=UTC)  # before any cursor: the first page's lower bound


class PostgresStore:
    """The Store on a PostgreSQL database (see the module docstring for its guarantees).

    ``schema`` confines the store to one schema (``search_path``); ``db_time`` lets
    tests share a frozen/offset clock between stores (production leaves it unset).
    """

    def __init__(
        self,
        url: str,
        *,
        clock: Clock | None = None,  # ignored: leases are judged by now() in SQL
        schema: str | None = None,
        pool_size: int = 8,
        timeout_s: float = 5.0,
        db_time: DbTime | None = None,
    ) -> None:
        self.url = url
        self.schema = schema
        self.db_time = db_time or DbTime()
        self._q = load_sql("queries.sql")
        self._db = Database(
            url, schema=schema, pool_size=pool_size, timeout_s=timeout_s, time=self.db_time
        )
        # task sets whose last claim needed a policy decision (a hint, see claim)
        self._planned_tasks: set[frozenset[str]] = set()

    @property
    def time_offset(self) -> timedelta:
        """Test-only: added to the server's clock in every "now" (0 in production)."""
        return self.db_time.offset

    @time_offset.setter
    def time_offset(self, value: timedelta) -> None:
        self.db_time.offset = value

    # -- plumbing -----------------------------------------------------------------------
    def _exec(self, conn: Conn, name: str, params: dict[str, Any] | None = None) -> list[DictRow]:
        cur = conn.execute(query(self._q[name]), self._db.params(params))
        return cur.fetchall() if cur.description is not None else []

    def _one(self, conn: Conn, name: str, params: dict[str, Any] | None = None) -> DictRow | None:
        rows = self._exec(conn, name, params)
        return rows[0] if rows else None

    def _read(self, sql: str, params: dict[str, Any] | None = None) -> list[DictRow]:
        def body(conn: Conn) -> list[DictRow]:
            return conn.execute(query(sql), self._db.params(params)).fetchall()

        return self._db.run(body, write=False)

    def now(self) -> datetime:
        rows = self._read(self._q["now"])
        return utc(rows[0]["now"])

    # -- lifecycle ----------------------------------------------------------------------
    def migrate(self) -> int:
        migrations = load_sql("schema.sql")

        def body(conn: Conn) -> int:
            # a transaction-level advisory lock (released at commit) serializes
            # concurrent migrators of this schema; session-level locks are never used
            conn.execute(
                "SELECT pg_advisory_xact_lock("
                "hashtextextended('cronwheel.migrate:' || coalesce(current_schema(), ''), 0))"
            )
            conn.execute(
                "CREATE TABLE IF NOT EXISTS meta (key text PRIMARY KEY, value text NOT NULL)"
            )
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            version = int(row["value"]) if row else 0
            n = version
            while f"migration_{n + 1}" in migrations:
                n += 1
                conn.execute(query(migrations[f"migration_{n}"]))  # no params: many statements
            if n != version:
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (str(n),),
                )
            return n

        return self._db.run(body, write=True)

    def close(self) -> None:
        self._db.close()

    # -- wake-ups -----------------------------------------------------------------------
    def open_wakeup(self, callback: Callable[[], None]) -> Wakeup:
        return PgListenWakeup(self._db.conninfo, callback)

    # -- jobs -----------------------------------------------------------------------------
    def create_job(self, spec: JobSpec, *, first_fire_at: datetime | None) -> Job:
        params = job_params(spec) | {"next_fire_at": first_fire_at}

        def body(conn: Conn) -> DictRow:
            try:
                row = self._one(conn, "insert_job", params)
            except pgerrors.UniqueViolation:
                raise ConflictError(
                    f"a job named {spec.name!r} already exists in namespace {spec.namespace!r}",
                    field="name",
                    code="job_exists",
                ) from None
            self._exec(conn, "bump_jobs_version")
            assert row is not None
            return row

        return codec.job_from_row(self._db.run(body, write=True))

    def create_jobs(self, items: Sequence[tuple[JobSpec, datetime | None]]) -> int:
        """The bulk path: one COPY (a fraction of the server work and client work of as
        many INSERTs), created_at/updated_at the store's clock read in the same
        transaction."""
        rows = [job_params(spec) | {"next_fire_at": first} for spec, first in items]

        def body(conn: Conn) -> int:
            now = self._exec(conn, "now")[0]["now"]
            try:
                if rows:
                    # job_params' keys (in one order for every row) and the timestamps
                    columns = ", ".join([*rows[0], "created_at", "updated_at"])
                    with (
                        conn.cursor() as cur,
                        cur.copy(query(f"COPY jobs ({columns}) FROM STDIN")) as copy,
                    ):
                        for r in rows:
                            copy.write_row([*r.values(), now, now])
            except pgerrors.UniqueViolation as exc:
                raise ConflictError(
                    f"a job in the batch already exists ({exc.diag.message_detail})",
                    field="name",
                    code="job_exists",
                ) from None
            self._exec(conn, "bump_jobs_version")
            return len(rows)

        return self._db.run(body, write=True)

    def upsert_job(self, spec: JobSpec, *, first_fire_at: datetime | None) -> tuple[Job, bool]:
        params = job_params(spec) | {"next_fire_at": first_fire_at}
        key = {"namespace": spec.namespace, "name": spec.name}

        def body(conn: Conn) -> tuple[DictRow, bool]:
            row = self._one(conn, "job_for_update", key)
            if row is None:
                row = self._one(conn, "insert_job_if_absent", params)
                if row is not None:
                    self._exec(conn, "bump_jobs_version")
                    return row, True
                row = self._one(conn, "job_for_update", key)  # lost a race with a create
                assert row is not None
            if row["spec_hash"] == params["spec_hash"]:
                return row, False
            # the cursor moves to first_fire_at only when the schedule changed (in SQL)
            updated = self._one(conn, "update_job_spec", params | {"id": row["id"]})
            assert updated is not None
            self._exec(conn, "bump_jobs_version")
            return updated, True

        row, changed = self._db.run(body, write=True)
        return codec.job_from_row(row), changed

    def get_job(self, namespace: str, name: str) -> Job:
        rows = self._read(
            "SELECT * FROM jobs WHERE namespace = %(ns)s AND name = %(name)s",
            {"ns": namespace, "name": name},
        )
        if not rows:
            raise JobNotFoundError(f"no job named {name!r}", field="name")
        return codec.job_from_row(rows[0])

    def get_job_by_id(self, job_id: JobId) -> Job:
        rows = self._read("SELECT * FROM jobs WHERE id = %(id)s", {"id": job_id})
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
        where = ["id > %(after_id)s"]
        params: dict[str, Any] = {"after_id": after_id, "limit": limit}
        if namespace is not None:
            where.append("namespace = %(namespace)s")
            params["namespace"] = namespace
        if task is not None:
            where.append("task = %(task)s")
            params["task"] = task
        if name_prefix:
            # starts_with: '%' and '_' in a prefix are literal, never LIKE patterns
            where.append("starts_with(name, %(prefix)s)")
            params["prefix"] = name_prefix
        sql = "SELECT * FROM jobs WHERE " + " AND ".join(where) + " ORDER BY id LIMIT %(limit)s"
        return [codec.job_from_row(r) for r in self._read(sql, params)]

    def set_paused(
        self, namespace: str, name: str, paused: bool, *, resume_from: datetime | None = None
    ) -> Job:
        def body(conn: Conn) -> DictRow:
            row = self._one(
                conn,
                "set_paused",
                {
                    "paused": paused,
                    "namespace": namespace,
                    "name": name,
                    "kind": "paused" if paused else "resumed",
                },
            )
            if row is None:
                raise JobNotFoundError(f"no job named {name!r}", field="name")
            self._exec(conn, "bump_jobs_version")
            return row

        return codec.job_from_row(self._db.run(body, write=True))

    def delete_job(self, namespace: str, name: str) -> None:
        def body(conn: Conn) -> None:
            cur = conn.execute(
                "DELETE FROM jobs WHERE namespace = %s AND name = %s", (namespace, name)
            )
            if cur.rowcount == 0:
                raise JobNotFoundError(f"no job named {name!r}", field="name")
            self._exec(conn, "bump_jobs_version")

        self._db.run(body, write=True)

    def due_jobs(
        self, horizon: datetime, *, limit: int, after: tuple[datetime, int] | None = None
    ) -> list[Job]:
        after_at, after_id = (_BEGINNING, 0) if after is None else after
        rows = self._read(
            self._q["due_jobs"],
            {"horizon": horizon, "limit": limit, "after_at": after_at, "after_id": after_id},
        )
        return [codec.job_from_row(r) for r in rows]

    def jobs_version(self) -> int:
        rows = self._read("SELECT value FROM meta WHERE key = 'jobs_version'")
        return int(rows[0]["value"]) if rows else 0

    def job_events(self, job_id: JobId, *, limit: int = 100) -> list[JobEvent]:
        rows = self._read(
            "SELECT * FROM job_events WHERE job_id = %(id)s ORDER BY id DESC LIMIT %(limit)s",
            {"id": job_id, "limit": limit},
        )
        return [codec.event_from_row(r) for r in rows]

    # -- leadership ---------------------------------------------------------------------
    def acquire_lease(self, name: str, holder: str, ttl: timedelta) -> Lease | None:
        def body(conn: Conn) -> DictRow | None:
            return self._one(conn, "acquire_lease", {"name": name, "holder": holder, "ttl": ttl})

        row = self._db.run(body, write=True, atomic=False)
        return None if row is None else lease_from_row(row)

    def release_lease(self, lease: Lease) -> None:
        params = {"name": lease.name, "holder": lease.holder, "epoch": lease.epoch}
        self._db.run(
            lambda conn: self._exec(conn, "release_lease", params), write=True, atomic=False
        )

    def get_lease(self, name: str) -> Lease | None:
        rows = self._read("SELECT * FROM leases WHERE name = %(name)s", {"name": name})
        return lease_from_row(rows[0]) if rows else None

    # -- dispatch -------------------------------------------------------------------------
    def enqueue(self, lease: Lease, advances: Sequence[JobAdvance]) -> EnqueueResult:
        fence = {"name": lease.name, "holder": lease.holder, "epoch": lease.epoch}
        # a job named twice in one batch moves in order, as one statement pair per round
        batches = rounds(advances, lambda a: a.job_id)

        def body(conn: Conn) -> EnqueueResult:
            result = EnqueueResult()
            if self._one(conn, "fence_check", fence) is None:
                raise LeaseLostError(
                    f"lease {lease.name!r} epoch {lease.epoch} is no longer held by {lease.holder}"
                )
            fair = FairClocks()
            for batch in batches:
                moved: dict[int, tuple[str, float]] = {}
                for r in self._exec(conn, "enqueue_advance", advance_params(batch)):
                    moved[r["id"]] = (r["namespace"], float(r["priority"]))
                    if r["vclock"] is not None:
                        fair.seen(r["namespace"], r["vclock"])
                result.stale.extend(a.job_id for a in batch if a.job_id not in moved)
                planned = sum(len(a.firings) for a in batch if a.job_id in moved)
                if planned == 0 and not any(a.missed for a in batch if a.job_id in moved):
                    continue
                params = insert_params(batch, moved, fair, lease.epoch)
                inserted = sorted(r["id"] for r in self._exec(conn, "enqueue_insert", params))
                result.inserted.extend(FiringId(i) for i in inserted)
                result.duplicates += planned - len(inserted)
            failpoints.hit("store.enqueue.before_commit")
            return result

        return self._db.run(body, write=True)

    def requeue_expired(self, *, limit: int = 1000) -> int:
        def body(conn: Conn) -> int:
            row = self._one(conn, "requeue_expired", {"limit": limit})
            return int(row["n"]) if row else 0

        return self._db.run(body, write=True, atomic=False)

    # -- immediate work -------------------------------------------------------------------
    def enqueue_now(self, spec: JobSpec) -> Firing:
        return codec.firing_from_row(
            self._db.run(lambda conn: self._enqueue_now(conn, spec, None), write=True)
        )

    def _enqueue_now(self, conn: Conn, spec: JobSpec, idem: dict[str, str] | None) -> DictRow:
        """Inside a transaction: the one-shot job, its firing due now (virtual deadline
        from the namespace's fair clock), the idempotency key if given, the wake-up."""
        try:
            job = self._one(conn, "insert_now_job", job_params(spec))
        except pgerrors.UniqueViolation:
            raise ConflictError(
                f"a job named {spec.name!r} already exists", field="name", code="job_exists"
            ) from None
        assert job is not None
        namespace = job["namespace"]
        fair = FairClocks()
        fair.seen(namespace, job["vclock"])
        at = utc(job["now"])
        params = {
            "job_id": job["id"],
            "at": at,
            "vdeadline": fair.deadline(namespace, float(job["priority"]), at),
            "namespace": namespace,
            "vclock": fair.clocks[namespace],
            "key_hash": None,
            "request_hash": None,
        }
        row = self._one(conn, "insert_now_firing", params | (idem or {}))
        assert row is not None
        return row

    # -- workers --------------------------------------------------------------------------
    def claim(
        self,
        worker_id: str,
        *,
        tasks: Sequence[str],
        limit: int,
        prefetch: timedelta = timedelta(0),
    ) -> list[ClaimedFiring]:
        """One statement (claim_fast) while no candidate needs a policy decision; else the
        planned claim in one transaction (``_claim_planned``). Which of the two a task set
        needed last time is remembered, so a worker of capped jobs does not try the
        one-statement path in vain on every call."""
        if limit <= 0 or not tasks:
            return []
        key = frozenset(tasks)
        if key not in self._planned_tasks:
            fast = self._db.run(
                lambda conn: self._exec(
                    conn, "claim_fast", _claim_params(worker_id, tasks, limit, prefetch)
                ),
                write=True,
                atomic=False,
            )
            if not fast or fast[0]["simple"]:
                return _claimed(fast)
            self._remember_planned(key, True)
        params = _claim_params(worker_id, tasks, limit, prefetch, planned=True)
        rows, planned = self._db.run(lambda conn: self._claim_planned(conn, params), write=True)
        self._remember_planned(key, planned)
        return _claimed(rows)

    def complete_and_claim(
        self,
        completions: Sequence[Completion],
        worker_id: str,
        *,
        tasks: Sequence[str],
        limit: int,
        prefetch: timedelta = timedelta(0),
    ) -> tuple[list[bool], list[ClaimedFiring]]:
        """complete_batch then claim_fast in one transaction: one commit (one WAL flush)
        where there were two. The one-statement claim never waits for a lock, so joining
        it to the completions adds no lock wait to a transaction holding their rows.
        A claim that needs policy decisions runs after the completions committed, in its
        own transaction as in ``claim`` (its job locks are not taken while completed
        rows are held); if that claim fails, the outcomes are returned with no claims."""
        if not completions:
            return [], self.claim(worker_id, tasks=tasks, limit=limit, prefetch=prefetch)
        key = frozenset(tasks)
        if limit <= 0 or not tasks or key in self._planned_tasks:
            accepted = self.complete(completions)
            return accepted, self._claim_after(worker_id, tasks, limit, prefetch)
        params = _claim_params(worker_id, tasks, limit, prefetch)
        batches = _completion_rounds(completions)

        def body(conn: Conn) -> tuple[list[bool], list[DictRow]]:
            accepted = self._complete_in(conn, completions, batches)
            return accepted, self._exec(conn, "claim_fast", params)

        accepted, fast = self._db.run(body, write=True)
        if not fast or fast[0]["simple"]:
            return accepted, _claimed(fast)
        self._remember_planned(key, True)
        return accepted, self._claim_after(worker_id, tasks, limit, prefetch)

    def _claim_after(
        self, worker_id: str, tasks: Sequence[str], limit: int, prefetch: timedelta
    ) -> list[ClaimedFiring]:
        try:
            return self.claim(worker_id, tasks=tasks, limit=limit, prefetch=prefetch)
        except StoreUnavailableError:
            return []  # the outcomes are recorded; the worker's next claim retries

    def _remember_planned(self, key: frozenset[str], planned: bool) -> None:
        if not planned:
            self._planned_tasks.discard(key)
        elif len(self._planned_tasks) < 1024:  # a hint only: bounded
            self._planned_tasks.add(key)

    def _claim_planned(self, conn: Conn, params: dict[str, Any]) -> tuple[list[DictRow], bool]:
        """The claim with the job policies, inside one READ COMMITTED transaction.

        Lock order, the same in every claimer: candidate firings (SKIP LOCKED, never
        waits) -> the capped jobs' rows in id order (waits: this serializes the claimers
        deciding for one job) -> those jobs' other due firings (SKIP LOCKED) -> their
        RUNNING firings, in id order, when the plan cancels or terminates them (may wait
        for a worker's heartbeat or completion, which take no job locks). No cycle.
        Returns the claimed rows, and whether any policy decision was needed.
        """
        found = self._exec(conn, "claim_candidates", params)
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
            (early if capped(c) and r["early"] else candidates).append(c)
        jobs = sorted({c.job_id for c in [*candidates, *early] if capped(c) or c.overlap_override})
        running: dict[int, int] = {}
        due: dict[int, list[int]] = {}
        if jobs:
            self._exec(conn, "claim_lock_jobs", {"jobs": jobs})
            # a new statement: its snapshot sees what the claimers we waited for committed
            for r in self._exec(conn, "claim_facts", {"jobs": jobs}):
                running[r["job_id"]] = int(r["running"])
                due[r["job_id"]] = list(r["due"])
        planned = bool(jobs) or any(c.deadline_passed for c in candidates)
        plan = plan_claim(
            candidates, limit=params["limit"], running=running, due_by_job=due, early=early
        )
        fates = [(i, "skipped", why) for i, why in plan.skip]
        fates += [(i, "missed", why) for i, why in plan.missed]
        stop = plan.cancel_running | plan.terminate_running
        if plan.buffered:
            self._exec(conn, "mark_buffered", {"ids": plan.buffered})
        if not (plan.claim or fates or stop):
            return [], planned
        rows = self._exec(
            conn,
            "claim_apply",
            {
                "worker_id": params["worker_id"],
                "claim_ids": plan.claim,
                "fate_ids": [f[0] for f in fates],
                "fate_states": [f[1] for f in fates],
                "fate_reasons": [f[2] for f in fates],
                "stop_jobs": sorted(stop),
                "cancel_jobs": sorted(plan.cancel_running),
                "cancel_reason": "cancelled by overlap policy cancel_other",
                "terminate_jobs": sorted(plan.terminate_running),
                "terminate_reason": "terminated by overlap policy terminate_other",
            },
        )
        return rows, planned

    def next_due_at(self) -> datetime | None:
        """When the earliest QUEUED firing not yet due becomes due (None: there is none)."""
        rows = self._read(self._q["next_due_at"])
        value = rows[0]["d"] if rows else None
        return None if value is None else utc(value)

    def heartbeat(self, worker_id: str, claims: Sequence[tuple[FiringId, str]]) -> set[FiringId]:
        if not claims:
            return set()
        ordered = sorted(claims)  # rows locked in id order, as everywhere
        params = {"ids": [c[0] for c in ordered], "tokens": [c[1] for c in ordered]}
        rows = self._db.run(
            lambda conn: self._exec(conn, "heartbeat", params),
            write=True,
            atomic=False,
            durable=False,
        )
        held = {r["id"] for r in rows}
        return {FiringId(fid) for fid, _ in claims if fid not in held}

    def cancel_requested(self, claims: Sequence[tuple[FiringId, str]]) -> set[FiringId]:
        if not claims:
            return set()
        rows = self._read(self._q["cancel_requested"], {"ids": [c[0] for c in claims]})
        return {FiringId(r["id"]) for r in rows}

    def complete(self, completions: Sequence[Completion]) -> list[bool]:
        if not completions:
            return []
        batches = _completion_rounds(completions)
        return self._db.run(
            lambda conn: self._complete_in(conn, completions, batches),
            write=True,
            atomic=len(batches) > 1,
        )

    def _complete_in(
        self, conn: Conn, completions: Sequence[Completion], batches: list[list[int]]
    ) -> list[bool]:
        accepted = [False] * len(completions)
        for batch in batches:
            params = complete_params([completions[i] for i in batch])
            done = {r["id"] for r in self._exec(conn, "complete_batch", params)}
            for i in batch:
                accepted[i] = completions[i].firing_id in done
        return accepted

    # -- firings --------------------------------------------------------------------------
    def get_firing(self, firing_id: FiringId) -> Firing:
        rows = self._read("SELECT * FROM firings WHERE id = %(id)s", {"id": firing_id})
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
        params: dict[str, Any] = {"limit": limit}
        if job_id is not None:
            where.append("job_id = %(job_id)s")
            params["job_id"] = job_id
        if namespace is not None:
            where.append("namespace = %(namespace)s")
            params["namespace"] = namespace
        if states:
            where.append("state = ANY (%(states)s::text[])")
            params["states"] = [s.value for s in states]
        if before_id is not None:
            where.append("id < %(before_id)s")
            params["before_id"] = before_id
        clause = "WHERE " + " AND ".join(where) if where else ""
        rows = self._read(
            f"SELECT * FROM firings {clause} ORDER BY id DESC LIMIT %(limit)s", params
        )
        return [codec.firing_from_row(r) for r in rows]

    def cancel_firing(self, firing_id: FiringId) -> CancelResult:
        key = {"id": firing_id}

        def body(conn: Conn) -> tuple[str, DictRow | None]:
            row = self._one(conn, "cancel_queued", key)
            if row is not None:
                return "cancelled", row
            row = self._one(conn, "cancel_running", key)
            if row is not None:
                return "cancel_requested", row
            rows = conn.execute("SELECT * FROM firings WHERE id = %(id)s", key).fetchall()
            return "already_final", rows[0] if rows else None

        outcome, row = self._db.run(body, write=True)
        if row is None:
            raise FiringNotFoundError(f"no firing with id {firing_id}", field="firing_id")
        return CancelResult(outcome=outcome, firing=codec.firing_from_row(row))

    def redrive_firing(self, firing_id: FiringId) -> Firing:
        def body(conn: Conn) -> DictRow:
            row = self._one(conn, "redrive", {"id": firing_id})
            if row is None:
                current = conn.execute(
                    "SELECT state FROM firings WHERE id = %s", (firing_id,)
                ).fetchone()
                if current is None:
                    raise FiringNotFoundError(f"no firing with id {firing_id}", field="firing_id")
                raise InvalidTransitionError(
                    f"only a dead firing can be retried; this one is {current['state']}",
                    field="state",
                )
            self._exec(conn, "notify_work")
            return row

        return codec.firing_from_row(self._db.run(body, write=True))

    # -- nodes ----------------------------------------------------------------------------
    def register_node(self, node: NodeInfo) -> None:
        params = {
            "id": node.id,
            "kind": node.kind,
            "hostname": node.hostname,
            "pid": node.pid,
            "started_at": node.started_at,
            "wake_addr": node.wake_addr,
            "info": json.dumps(node.info),
        }
        self._db.run(
            lambda conn: self._exec(conn, "register_node", params), write=True, atomic=False
        )

    def heartbeat_node(self, node_id: str) -> None:
        params = {"id": node_id}
        self._db.run(
            lambda conn: self._exec(conn, "heartbeat_node", params), write=True, atomic=False
        )

    def remove_node(self, node_id: str) -> None:
        self._db.run(
            lambda conn: conn.execute("DELETE FROM nodes WHERE id = %s", (node_id,)),
            write=True,
            atomic=False,
        )

    def list_nodes(self, *, alive_within: timedelta | None = None) -> list[NodeInfo]:
        if alive_within is None:
            rows = self._read("SELECT * FROM nodes ORDER BY kind, id")
        else:
            rows = self._read(self._q["list_nodes_alive"], {"within": alive_within})
        return [codec.node_from_row(r) for r in rows]

    def status(self) -> StoreStatus:
        def body(conn: Conn) -> tuple[dict[str, int], DictRow, list[float]]:
            counts: dict[str, int] = {}
            for row in self._exec(conn, "status_counts"):
                counts[row["state"]] = counts.get(row["state"], 0) + int(row["n"])
            jobs = self._one(conn, "status_jobs")
            assert jobs is not None
            lateness = [
                float(r["lateness_ms"])
                for r in self._exec(conn, "recent_lateness", {"limit": 1000})
            ]
            return counts, jobs, lateness

        counts, jobs, lateness = self._db.run(body, write=False)
        return StoreStatus(
            now=utc(jobs["now"]),
            lease=self.get_lease(DISPATCHER_LEASE),
            counts=counts,
            jobs=int(jobs["n"]),
            paused_jobs=int(jobs["p"]),
            oldest_queued_due_at=None if jobs["oldest"] is None else utc(jobs["oldest"]),
            nodes=self.list_nodes(),
            lateness_ms=lateness,
        )

    # -- HTTP API support (ApiStore) ------------------------------------------------------
    def ping(self) -> None:
        try:
            self._read("SELECT 1 AS one")
        except StoreUnavailableError:
            raise
        except StoreError as exc:
            raise StoreUnavailableError(exc.message) from exc

    def create_token(
        self, *, namespace: str, role: str, label: str | None, secret_hash: str
    ) -> ApiToken:
        params = {"namespace": namespace, "role": role, "label": label, "secret_hash": secret_hash}
        row = self._db.run(
            lambda conn: self._one(conn, "insert_token", params), write=True, atomic=False
        )
        assert row is not None
        return _token(row)

    def get_token(self, token_id: int) -> ApiToken | None:
        rows = self._read("SELECT * FROM api_tokens WHERE id = %(id)s", {"id": token_id})
        return _token(rows[0]) if rows else None

    def list_tokens(self, *, namespace: str | None = None) -> list[ApiToken]:
        if namespace is None:
            rows = self._read("SELECT * FROM api_tokens ORDER BY id")
        else:
            rows = self._read(
                "SELECT * FROM api_tokens WHERE namespace = %(ns)s ORDER BY id", {"ns": namespace}
            )
        return [_token(r) for r in rows]

    def revoke_token(self, token_id: int) -> ApiToken:
        row = self._db.run(
            lambda conn: self._one(conn, "revoke_token", {"id": token_id}),
            write=True,
            atomic=False,
        )
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
        where = ["namespace = %(namespace)s", "id > %(after_id)s"]
        params: dict[str, Any] = {"namespace": namespace, "after_id": after_id, "limit": limit}
        if state == "active":
            where.append("NOT paused AND next_fire_at IS NOT NULL")
        elif state == "paused":
            where.append("paused")
        elif state == "done":
            where.append("NOT paused AND next_fire_at IS NULL")
        if task is not None:
            where.append("task = %(task)s")
            params["task"] = task
        if name_prefix:
            # starts_with: '%' and '_' in a prefix are literal, never LIKE patterns
            where.append("starts_with(name, %(prefix)s)")
            params["prefix"] = name_prefix
        sql = "SELECT * FROM jobs WHERE " + " AND ".join(where) + " ORDER BY id LIMIT %(limit)s"
        return [codec.job_from_row(r) for r in self._read(sql, params)]

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
        where = ["job_id = %(job_id)s"]
        params: dict[str, Any] = {"job_id": job_id, "limit": limit}
        if states:
            where.append("state = ANY (%(states)s::text[])")
            params["states"] = [s.value for s in states]
        if scheduled_from is not None:
            where.append("scheduled_for >= %(from)s")
            params["from"] = scheduled_from
        if scheduled_to is not None:
            where.append("scheduled_for < %(to)s")
            params["to"] = scheduled_to
        if before_id is not None:
            where.append("id < %(before_id)s")
            params["before_id"] = before_id
        sql = (
            "SELECT * FROM firings WHERE "
            + " AND ".join(where)
            + " ORDER BY id DESC LIMIT %(limit)s"
        )
        return [codec.firing_from_row(r) for r in self._read(sql, params)]

    def add_firings(
        self,
        namespace: str,
        name: str,
        scheduled_for: Sequence[datetime],
        *,
        note: str,
        overlap: str | None = None,
    ) -> AddedFirings:
        instants = list(scheduled_for)

        def body(conn: Conn) -> list[DictRow]:
            job = self._one(conn, "add_firings_job", {"namespace": namespace, "name": name})
            if job is None:
                raise JobNotFoundError(f"no job named {name!r}", field="name")
            if not instants:
                return []
            now = utc(job["now"])
            priority = float(job["priority"])
            fair = FairClocks()
            fair.seen(namespace, job["vclock"])
            due = [max(at, now) for at in instants]
            params = {
                "job_id": job["id"],
                "f_at": instants,
                "f_due": due,
                "f_vd": [fair.deadline(namespace, priority, d) for d in due],
                "note": note,
                "overlap": overlap,
                "namespace": namespace,
                "vclock": fair.clocks[namespace],
            }
            return self._exec(conn, "add_firings", params)

        rows = sorted(self._db.run(body, write=True), key=lambda r: r["id"])
        inserted = [codec.firing_from_row(r) for r in rows]
        return AddedFirings(inserted=inserted, duplicates=len(instants) - len(inserted))

    def enqueue_now_once(
        self, spec: JobSpec, *, key_hash: str, request_hash: str
    ) -> tuple[Firing, bool]:
        key = {"namespace": spec.namespace, "key_hash": key_hash}

        def body(conn: Conn) -> tuple[DictRow, bool]:
            self._exec(conn, "idempotency_lock", key)
            seen = self._one(conn, "find_idempotency_key", key)
            if seen is not None:
                if seen["request_hash"] != request_hash:
                    raise ConflictError(
                        "this Idempotency-Key was used with a different request body",
                        field="Idempotency-Key",
                    )
                return seen, False
            idem = {"key_hash": key_hash, "request_hash": request_hash}
            return self._enqueue_now(conn, spec, idem), True

        row, created = self._db.run(body, write=True)
        return codec.firing_from_row(row), created

    def job_backlog(self, namespace: str, *, limit: int = 50) -> dict[str, int]:
        rows = self._read(self._q["job_backlog"], {"namespace": namespace, "limit": limit})
        return {r["job_name"]: int(r["n"]) for r in rows}


def _claim_params(
    worker_id: str, tasks: Sequence[str], limit: int, prefetch: timedelta, *, planned: bool = False
) -> dict[str, Any]:
    """Parameters of claim_fast, or (``planned``) of the planned claim's statements."""
    return {
        "worker_id": worker_id,
        "tasks": list(tasks),
        "limit": limit,
        "prefetch": prefetch,
        # Candidates scanned (and locked). The one-statement claim locks only the rows it
        # takes: a row lock is a heap write and a WAL record. The planned claim looks at a
        # few more than it may claim (some are skipped or held by a cap); each capped
        # candidate's job is locked and examined, so twice the limit made that work 2.5
        # times the claim.
        "scan": limit + 32 if planned else limit,
    }


def _claimed(rows: Sequence[DictRow]) -> list[ClaimedFiring]:
    """Claimed rows (claim_fast's or claim_apply's) as ClaimedFirings, in claim order
    (claim_fast's row without a claim, when it claimed nothing, is left out)."""
    return codec.claimed_from_rows(
        (r for r in rows if r["id"] is not None), lambda r: r["job_policies"]
    )


def _completion_rounds(completions: Sequence[Completion]) -> list[list[int]]:
    """Indexes of ``completions`` in rounds: a firing reported twice in one batch is
    decided in order, one round each; within a round, rows in id order."""
    return [
        sorted(batch, key=lambda i: completions[i].firing_id)
        for batch in rounds(range(len(completions)), lambda i: completions[i].firing_id)
    ]


def _token(row: DictRow) -> ApiToken:
    return ApiToken(
        id=int(row["id"]),
        namespace=row["namespace"],
        role=row["role"],
        label=row["label"],
        secret_hash=row["secret_hash"],
        created_at=utc(row["created_at"]),
        revoked_at=None if row["revoked_at"] is None else utc(row["revoked_at"]),
    )


if TYPE_CHECKING:  # PostgresStore keeps the Store and ApiStore protocols (checked by mypy)

    def _conforms(store: PostgresStore) -> Store:
        return store

    def _conforms_api(store: PostgresStore) -> ApiStore:
        return store
