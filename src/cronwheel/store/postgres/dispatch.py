"""PostgreSQL: the writes that create work (the leader's enqueue, immediate and
backfilled firings, bulk job registration) and the reaper.

- Fencing: an enqueue reads its lease row ``FOR SHARE`` in the same transaction as the
  cursor compare-and-swaps and the inserts, and a takeover updates that row, so the two
  serialize on the row lock; the loser sees the winner's committed row.
- Fair clocks: every transaction that inserts QUEUED firings locks its namespaces'
  ``fair_clocks`` rows, computes the virtual deadlines in Python (core/fair.py) and
  writes the clocks back with the inserts.
- Batches are a few statements over JSON documents or arrays, not one per row.
- Wake-ups are ``pg_notify`` in the writing transaction (delivered at commit).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg import errors as pgerrors

from cronwheel import failpoints
from cronwheel.domain.models import Firing, FiringId, JobSpec, Lease
from cronwheel.domain.policies import fair_steps
from cronwheel.domain.quotas import DEFAULT_QUOTA, Quota
from cronwheel.errors import ConflictError, JobNotFoundError, LeaseLostError
from cronwheel.store import codec
from cronwheel.store.codec import Row
from cronwheel.store.core import CoreStore, FairClocks, Tx
from cronwheel.store.core.bulk import by_name, job_exists
from cronwheel.store.core.quotas import refuse_over_rate
from cronwheel.store.postgres.db import Database, PgTx
from cronwheel.store.postgres.jobs_quota import unless_decided
from cronwheel.store.postgres.params import (
    advance_params,
    clock_params,
    fair_deadline_at,
    insert_params,
    rounds,
    utc,
)
from cronwheel.store.protocol import EnqueueResult, JobAdvance

# the columns of bulk_jobs_copy (dispatch.sql) after `ord`, before the two instants
_BULK_COLUMNS = (
    "namespace",
    "name",
    "task",
    "schedule",
    "payload",
    "policies",
    "spec_hash",
    "priority",
    "max_attempts",
    "visibility_us",
    "paused",
    "shard",
    "max_concurrency",
    "overlap",
    "max_buffer",
    "cancel_grace_us",
    "start_deadline_us",
    "bounds",
    "remaining_runs",
    "trace_context",
)


class PgDispatch(CoreStore[Database]):
    def create_jobs(self, items: Sequence[tuple[JobSpec, datetime | None]]) -> int:
        """The bulk path: one COPY (a fraction of the server work and client work of as
        many INSERTs), created_at/updated_at the store's clock read in the same
        transaction."""
        rows = [codec.job_params(spec) | {"next_fire_at": first} for spec, first in items]

        def body(tx: PgTx) -> int:
            quotas: dict[str, Quota] = {}  # each namespace's quota, read once
            for spec, first in items:
                self._check_schedule(tx, spec, first, quotas)
            clock = tx.one("now")
            assert clock is not None
            now = clock["now"]
            try:
                if rows:
                    # job_params' keys (in one order for every row) and the timestamps
                    columns = ", ".join([*rows[0], "created_at", "updated_at"])
                    copied = ([*r.values(), now, now] for r in rows)
                    tx.copy_rows(f"COPY jobs ({columns}) FROM STDIN", copied)
            except pgerrors.UniqueViolation as exc:
                raise ConflictError(
                    f"a job in the batch already exists ({exc.diag.message_detail})",
                    field="name",
                    code="job_exists",
                ) from None
            self._charge_jobs(tx, [spec for spec, _ in items], quotas)
            tx.run("bump_jobs_version")
            return len(rows)

        return self.db.write(body)

    def _insert_jobs_in(self, tx: Tx, rows: Sequence[dict[str, Any]]) -> list[Row | None]:
        return self._bulk_jobs(tx, rows, fired_at=None)

    def _bulk_jobs(
        self, tx: Tx, rows: Sequence[dict[str, Any]], *, fired_at: datetime | None
    ) -> list[Row | None]:
        """COPY the rows into a temporary table, then one INSERT ... SELECT of them in
        order, passing over names that exist: each item's new row (id, namespace,
        name, priority, created_at), or None where its name was taken."""
        assert isinstance(tx, PgTx)
        if not rows:
            return []
        tx.run("bulk_jobs_table")
        tx.copy_rows(
            tx.db.q["bulk_jobs_copy"],
            (
                [i, *[r[k] for k in _BULK_COLUMNS], r["next_fire_at"], fired_at]
                for i, r in enumerate(rows)
            ),
        )
        inserted = tx.all("bulk_jobs_insert")
        tx.run("bulk_jobs_drop")  # a caller's transaction may hold another batch
        return by_name(rows, inserted)

    def _enqueue_now_many_in(self, tx: Tx, specs: Sequence[JobSpec]) -> list[Row | None]:
        """The one-shot jobs (bulk_jobs), their namespaces' fair clocks locked, then their
        firings due now in one INSERT and the clocks written back; one wake-up."""
        clock = tx.one("now")
        assert clock is not None
        at = utc(clock["now"])
        params = [codec.job_params(spec) | {"next_fire_at": None} for spec in specs]
        jobs = self._bulk_jobs(tx, params, fired_at=at)
        made = [j for j in jobs if j is not None]
        if not made:
            return [None] * len(specs)
        fair = FairClocks()
        namespaces = sorted({j["namespace"] for j in made})
        for c in tx.all("bulk_lock_clocks", {"ns": namespaces}):
            fair.seen(c["namespace"], c["vclock"])
        vds = [fair_deadline_at(fair, j["namespace"], float(j["priority"]), at) for j in made]
        firing_params = {"f_job": [j["id"] for j in made], "f_vd": vds, "at": at}
        firings = tx.all("bulk_now_firings", firing_params | clock_params(fair))
        by_job = {f["job_id"]: f for f in firings}
        return [None if j is None else by_job[j["id"]] for j in jobs]

    def enqueue_now(self, spec: JobSpec) -> Firing:
        """One autocommitted statement (``enqueue_now_one``, schema.sql migration_25):
        one round trip where the transaction made six. Over the namespace's
        firings_per_minute the statement writes nothing (CW001) and the transaction
        runs, to refuse with its retry-after; likewise inside a caller's transaction
        (``Database.own_units`` false: a CW001 would leave its savepoint aborted)."""
        if not self.db.own_units:
            return super().enqueue_now(spec)
        params = enqueue_now_params(spec, refuse=True)
        row = self.db.write(
            lambda tx: unless_decided(lambda: _enqueue_now_one(tx, spec, params)), atomic=False
        )
        if row is None:
            return super().enqueue_now(spec)
        return codec.firing_from_row(row)

    def _enqueue_now_in(self, tx: Tx, spec: JobSpec) -> Row:
        """``enqueue_now_one`` in the caller's transaction: over the rate, the charge it
        answers refuses (429) and the transaction rolls back."""
        row = _enqueue_now_one(tx, spec, enqueue_now_params(spec, refuse=False))
        refuse_over_rate(
            "firings_per_minute",
            int(row["charge_limit"]),
            spec.namespace,
            row["charged"],
            row["charge_window"],
            row["charge_now_us"],
        )
        return row

    def _add_firings_in(
        self, tx: Tx, namespace: str, name: str, instants: list[datetime], extra: dict[str, Any]
    ) -> Sequence[Row]:
        job = tx.one("add_firings_job", {"namespace": namespace, "name": name})
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
            "f_vd": [fair_deadline_at(fair, namespace, priority, d) for d in due],
            "namespace": namespace,
            "vclock": fair.clocks[namespace],
        }
        return tx.all("add_firings", params | extra)

    def enqueue(self, lease: Lease, advances: Sequence[JobAdvance]) -> EnqueueResult:
        fence = {"name": lease.name, "holder": lease.holder, "epoch": lease.epoch}
        # a job named twice in one batch moves in order, as one statement pair per round
        batches = rounds(advances, lambda a: a.job_id)

        def body(tx: PgTx) -> EnqueueResult:
            result = EnqueueResult()
            if tx.one("fence_check", fence) is None:
                raise LeaseLostError(
                    f"lease {lease.name!r} epoch {lease.epoch} is no longer held by {lease.holder}"
                )
            fair = FairClocks()
            per_namespace: dict[str, list[int]] = {}
            for batch in batches:
                moved: dict[int, tuple[str, float]] = {}
                for r in tx.all("enqueue_advance", advance_params(batch)):
                    moved[r["id"]] = (r["namespace"], float(r["priority"]))
                    if r["vclock"] is not None:
                        fair.seen(r["namespace"], r["vclock"])
                result.stale.extend(a.job_id for a in batch if a.job_id not in moved)
                planned = sum(len(a.firings) for a in batch if a.job_id in moved)
                if planned == 0 and not any(a.missed for a in batch if a.job_id in moved):
                    continue
                params = insert_params(batch, moved, fair, lease.epoch)
                rows = tx.all("enqueue_insert", params)
                for r in sorted(rows, key=lambda r: r["id"]):
                    per_namespace.setdefault(r["namespace"], []).append(r["id"])
                result.duplicates += planned - len(rows)
            over = self._skip_over_rate(tx, per_namespace)
            inserted = sorted(i for ids in per_namespace.values() for i in ids)
            result.inserted.extend(FiringId(i) for i in inserted if i not in over)
            result.over_quota.extend(FiringId(i) for i in sorted(over))
            failpoints.hit("store.enqueue.before_commit")
            return result

        return self.db.write(body)

    def requeue_expired(self, *, limit: int = 1000) -> int:
        """The reaper, one statement (see requeue_expired in dispatch.sql)."""
        row = self.db.write(lambda tx: tx.one("requeue_expired", {"limit": limit}), atomic=False)
        return int(row["n"]) if row else 0


def enqueue_now_params(spec: JobSpec, *, refuse: bool) -> dict[str, Any]:
    base_us, quantum_us = fair_steps(float(spec.policies.priority))
    return codec.job_params(spec) | {
        "base_us": base_us,
        "quantum_us": quantum_us,
        "default_rate": DEFAULT_QUOTA.firings_per_minute,
        "refuse": refuse,
    }


def _enqueue_now_one(tx: Tx, spec: JobSpec, params: dict[str, Any]) -> Row:
    """``enqueue_now_one``'s firing row (with the charge it made); a name the namespace
    has is 409."""
    try:
        row = tx.one("enqueue_now_one", params)
    except pgerrors.UniqueViolation:
        raise job_exists(spec) from None
    assert row is not None
    return row
