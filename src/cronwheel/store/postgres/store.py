"""PostgresStore: the Store for more than one host (psycopg 3, psycopg_pool).

Semantics mirror SqliteStore one for one (the contract suite runs both); what differs
is how they are kept:

- Time is the database's: every lease, claim and expiry comparison uses the server's
  ``now()`` in SQL (see ``:now`` in queries.sql), never a node's clock. The ``clock``
  argument exists only for signature compatibility with SqliteStore and is ignored.
- Fencing: an enqueue reads its lease row ``FOR SHARE`` in the same transaction as the
  cursor compare-and-swaps and the inserts, and a takeover updates that row, so the two
  serialize on the row lock; the loser sees the winner's committed row.
- Claims and the reaper pick rows with ``FOR UPDATE SKIP LOCKED``.
- Batches are a few statements over arrays (``unnest``), not one statement per row.
- Wake-ups are ``pg_notify`` in the writing transaction (delivered at commit) and a
  LISTEN connection per listener (listen.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
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
    JobPolicies,
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
)
from cronwheel.store import codec
from cronwheel.store.postgres.db import NOW_SQL, Conn, Database, DbTime, load_sql, query
from cronwheel.store.postgres.listen import PgListenWakeup
from cronwheel.store.postgres.params import (
    BASE_LATENCY_US,
    complete_params,
    enqueue_params,
    job_params,
    lease_from_row,
    rounds,
    utc,
)
from cronwheel.store.protocol import (
    DISPATCHER_LEASE,
    CancelResult,
    Completion,
    EnqueueResult,
    JobAdvance,
    Store,
    StoreStatus,
)
from cronwheel.wakeup import Wakeup


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
        rows = [
            self._db.params(job_params(spec) | {"next_fire_at": first}) for spec, first in items
        ]

        def body(conn: Conn) -> int:
            try:
                with conn.cursor() as cur:
                    cur.executemany(query(self._q["insert_job_bulk"]), rows)
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
                conn, "set_paused", {"paused": paused, "namespace": namespace, "name": name}
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

    def due_jobs(self, horizon: datetime, *, limit: int) -> list[Job]:
        rows = self._read(self._q["due_jobs"], {"horizon": horizon, "limit": limit})
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
        # a job named twice in one batch moves in order, as one statement per round
        batches = rounds(advances, lambda a: a.job_id)

        def body(conn: Conn) -> EnqueueResult:
            result = EnqueueResult()
            if self._one(conn, "fence_check", fence) is None:
                raise LeaseLostError(
                    f"lease {lease.name!r} epoch {lease.epoch} is no longer held by {lease.holder}"
                )
            for batch in batches:
                rows = self._exec(conn, "enqueue_batch", enqueue_params(batch, lease.epoch))
                moved = {r["id"] for r in rows if r["kind"] == "moved"}
                inserted = sorted(r["id"] for r in rows if r["kind"] == "inserted")
                planned = sum(len(a.firings) for a in batch if a.job_id in moved)
                result.inserted.extend(FiringId(i) for i in inserted)
                result.duplicates += planned - len(inserted)
                result.stale.extend(a.job_id for a in batch if a.job_id not in moved)
            if result.inserted:
                self._exec(conn, "notify_work")  # delivered at commit
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
        params = job_params(spec) | {"next_fire_at": None}

        def body(conn: Conn) -> DictRow:
            try:
                job = self._one(conn, "insert_job", params)
            except pgerrors.UniqueViolation:
                raise ConflictError(
                    f"a job named {spec.name!r} already exists", field="name", code="job_exists"
                ) from None
            assert job is not None
            conn.execute(
                query(f"UPDATE jobs SET last_fired_at = {NOW_SQL} WHERE id = %(id)s"),
                self._db.params({"id": job["id"]}),
            )
            row = self._one(
                conn,
                "insert_now_firing",
                {"job_id": job["id"], "base_latency_us": BASE_LATENCY_US},
            )
            self._exec(conn, "notify_work")
            assert row is not None
            return row

        return codec.firing_from_row(self._db.run(body, write=True))

    # -- workers --------------------------------------------------------------------------
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
        params = {
            "worker_id": worker_id,
            "tasks": list(tasks),
            "limit": limit,
            "prefetch": prefetch,
        }
        rows = self._db.run(
            lambda conn: self._exec(conn, "claim", params), write=True, atomic=False
        )
        rows.sort(key=lambda r: (r["vdeadline"], r["id"]))
        policies: dict[int, JobPolicies] = {}
        claimed = []
        for r in rows:
            firing = codec.firing_from_row(r)
            if r["job_id"] not in policies:
                policies[r["job_id"]] = JobPolicies.from_dict(r["job_policies"])
            assert firing.lease_until is not None
            claimed.append(
                ClaimedFiring(
                    firing=firing,
                    claim_token=r["claim_token"],
                    lease_until=firing.lease_until,
                    policies=policies[r["job_id"]],
                )
            )
        return claimed

    def heartbeat(self, worker_id: str, claims: Sequence[tuple[FiringId, str]]) -> set[FiringId]:
        if not claims:
            return set()
        params = {"ids": [c[0] for c in claims], "tokens": [c[1] for c in claims]}
        rows = self._db.run(
            lambda conn: self._exec(conn, "heartbeat", params), write=True, atomic=False
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
        # a firing reported twice in one batch is decided in order, one round each
        batches = rounds(range(len(completions)), lambda i: completions[i].firing_id)

        def body(conn: Conn) -> list[bool]:
            accepted = [False] * len(completions)
            for batch in batches:
                params = complete_params([completions[i] for i in batch])
                done = {r["id"] for r in self._exec(conn, "complete_batch", params)}
                for i in batch:
                    accepted[i] = completions[i].firing_id in done
            return accepted

        return self._db.run(body, write=True, atomic=len(batches) > 1)

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


if TYPE_CHECKING:  # PostgresStore keeps the Store protocol (checked by mypy)

    def _conforms(store: PostgresStore) -> Store:
        return store
