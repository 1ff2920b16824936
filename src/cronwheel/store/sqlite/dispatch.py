"""SQLite: the writes that create work (the leader's enqueue, immediate and backfilled
firings, bulk job registration) and the reaper. Under the writer lock each is one
atomic step: the fence check, the cursor compare-and-swaps and the inserts."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from cronwheel import failpoints
from cronwheel.domain.models import FiringId, JobSpec, Lease
from cronwheel.domain.quotas import Quota
from cronwheel.errors import ConflictError, JobNotFoundError, LeaseLostError
from cronwheel.store import codec
from cronwheel.store.codec import Row, opt_us, to_us
from cronwheel.store.core import CoreStore, FairClocks, Tx
from cronwheel.store.core.bulk import by_name, job_exists
from cronwheel.store.protocol import EnqueueResult, JobAdvance
from cronwheel.store.sqlite.db import SqliteDb, SqliteTx


class _JobClocks:
    """FairClocks keyed by job: each job's namespace and priority read once."""

    def __init__(self, tx: Tx) -> None:
        self.tx = tx
        self.fair = FairClocks()
        self._jobs: dict[int, tuple[str, float]] = {}

    def deadline(self, job_id: int, due_us: int, known: tuple[str, float] | None = None) -> int:
        """``known``: the job's namespace and priority, when the caller has them (a job
        it just inserted): no read once its namespace's clock is known."""
        if known is not None and known[0] in self.fair.clocks:
            self._jobs.setdefault(job_id, known)
        if job_id not in self._jobs:
            row = self.tx.one("fair_clock", {"job_id": job_id})
            assert row is not None
            self._jobs[job_id] = (row["namespace"], float(row["priority"]))
            self.fair.seen(row["namespace"], row["vclock"])
        namespace, priority = self._jobs[job_id]
        return self.fair.deadline(namespace, priority, due_us)

    def namespace(self, job_id: int) -> str:
        return self._jobs[job_id][0]

    def save(self) -> None:
        for namespace, vclock in self.fair.clocks.items():
            self.tx.run("save_fair_clock", {"namespace": namespace, "vclock": vclock})


class SqliteDispatch(CoreStore[SqliteDb]):
    # a pruning batch's write holds the writer lock: small enough that a claim waiting
    # behind it waits a few milliseconds (measured in tests/contract/test_retention.py)
    prune_batch = 50
    vacuum_pages = 512  # free pages returned to the file system after a batch, at most

    def upkeep(self) -> None:
        self.db.checkpoint()

    def _after_prune_batch(self) -> None:
        """The pages a pruning batch freed, returned to the file system (the file is
        created with auto_vacuum=INCREMENTAL): a short write of its own."""

        def body(tx: Tx) -> None:
            row = tx.one("freelist_count")
            assert row is not None
            for _ in range(min(int(row["n"]), self.vacuum_pages)):
                tx.run("incremental_vacuum")

        self.db.write(body)

    def create_jobs(self, items: Sequence[tuple[JobSpec, datetime | None]]) -> int:
        rows = [codec.job_params(spec) | {"next_fire_at": opt_us(first)} for spec, first in items]
        with self.db.transaction() as tx:
            quotas: dict[str, Quota] = {}  # each namespace's quota, read once
            for spec, first in items:
                self._check_schedule(tx, spec, first, quotas)
            before = tx.conn.total_changes
            tx.many("insert_job", rows)  # ON CONFLICT DO NOTHING: count what was inserted
            if tx.conn.total_changes - before != len(rows):
                raise ConflictError(
                    "a job in the batch already exists (or the batch names one twice)",
                    field="name",
                    code="job_exists",
                )
            self._charge_jobs(tx, [spec for spec, _ in items], quotas)
            tx.run("bump_jobs_version")
        return len(rows)

    def _insert_jobs_in(self, tx: Tx, rows: Sequence[dict[str, Any]]) -> list[Row | None]:
        """One executemany of insert_job (a taken name inserts nothing), then the new
        rows read back by id: under the writer lock they are the ids above the highest."""
        assert isinstance(tx, SqliteTx)
        if not rows:
            return []
        before = tx.one("jobs_max_id")
        assert before is not None
        tx.many("insert_job", rows)
        return by_name(rows, tx.all("jobs_after_id", {"after_id": before["id"]}))

    def _now_firing(self, tx: Tx, spec: JobSpec, clocks: _JobClocks) -> Row | None:
        """The one-shot job of ``spec`` (fired now) and its firing due now; None when the
        name is taken."""
        params = codec.job_params(spec)
        try:
            job = tx.one("insert_now_job", params)
        except sqlite3.IntegrityError:
            return None
        assert job is not None
        now = job["last_fired_at"]  # the unit of work's clock: the firing is due now
        known = (spec.namespace, params["priority"])
        firing = {"job_id": job["id"], "scheduled_for": now, "due_at": now}
        row = tx.one(
            "insert_job_firing",
            firing
            | {
                "vdeadline": clocks.deadline(job["id"], now, known),
                "note": None,
                "overlap": None,
            },
        )
        assert row is not None
        return row

    def _enqueue_now_in(self, tx: Tx, spec: JobSpec) -> Row:
        clocks = _JobClocks(tx)
        row = self._now_firing(tx, spec, clocks)
        if row is None:
            raise job_exists(spec)
        clocks.save()
        self._charge_firings(tx, spec.namespace, 1)
        tx.wake_workers()
        return row

    def _enqueue_now_many_in(self, tx: Tx, specs: Sequence[JobSpec]) -> list[Row | None]:
        clocks = _JobClocks(tx)
        rows = [self._now_firing(tx, spec, clocks) for spec in specs]
        clocks.save()
        if any(r is not None for r in rows):
            tx.wake_workers()  # one doorbell for the batch
        return rows

    def _add_firings_in(
        self, tx: Tx, namespace: str, name: str, instants: list[datetime], extra: dict[str, Any]
    ) -> list[Row]:
        job = tx.one("get_job", {"namespace": namespace, "name": name})
        if job is None:
            raise JobNotFoundError(f"no job named {name!r}", field="name")
        clocks = _JobClocks(tx)
        clock = tx.one("now")
        assert clock is not None
        inserted = []
        for instant in instants:
            at = to_us(instant)
            due = max(at, clock["now"])
            params = {"job_id": job["id"], "scheduled_for": at, "due_at": due} | extra
            row = tx.one(
                "insert_job_firing", params | {"vdeadline": clocks.deadline(job["id"], due)}
            )
            if row is not None:
                inserted.append(row)
        clocks.save()
        if inserted:
            tx.wake_workers()
        return inserted

    def enqueue(self, lease: Lease, advances: Sequence[JobAdvance]) -> EnqueueResult:
        result = EnqueueResult()
        with self.db.transaction() as tx:
            fence = {"name": lease.name, "holder": lease.holder, "epoch": lease.epoch}
            if tx.one("fence_check", fence) is None:
                raise LeaseLostError(
                    f"lease {lease.name!r} epoch {lease.epoch} is no longer held by {lease.holder}"
                )
            clocks = _JobClocks(tx)
            per_namespace: dict[str, list[int]] = {}
            for adv in advances:
                moved = tx.run(
                    "advance_job",
                    {
                        "job_id": adv.job_id,
                        "expected": to_us(adv.expected_next_fire_at),
                        "new_next": opt_us(adv.new_next_fire_at),
                        "last_fired": opt_us(
                            max((f.scheduled_for for f in adv.firings), default=None)
                        ),
                        "missed": sum(m.count for m in adv.missed),
                        "runs": len(adv.firings),
                    },
                )
                if not moved:
                    result.stale.append(adv.job_id)
                    continue
                for planned in adv.firings:
                    due = to_us(planned.due_at or planned.scheduled_for)
                    cur = tx.conn.execute(
                        tx.queries["insert_firing"],
                        {
                            "job_id": adv.job_id,
                            "scheduled_for": to_us(planned.scheduled_for),
                            "due_at": due,
                            "vdeadline": clocks.deadline(adv.job_id, due),
                            "now": tx.now_us,
                            "epoch": lease.epoch,
                            "note": planned.note,
                        },
                    )
                    if cur.rowcount:
                        ids = per_namespace.setdefault(clocks.namespace(adv.job_id), [])
                        ids.append(cur.lastrowid or 0)
                    else:
                        result.duplicates += 1
                for m in adv.missed:
                    tx.run(
                        "insert_missed_event",
                        {
                            "job_id": adv.job_id,
                            "first_at": to_us(m.first),
                            "last_at": to_us(m.last),
                            "count": m.count,
                            "exact": int(m.exact),
                            "detail": m.reason,
                        },
                    )
            clocks.save()
            over = self._skip_over_rate(tx, per_namespace)
            inserted = sorted(i for ids in per_namespace.values() for i in ids)
            result.inserted.extend(FiringId(i) for i in inserted if i not in over)
            result.over_quota.extend(FiringId(i) for i in sorted(over))
            failpoints.hit("store.enqueue.before_commit")
            if result.inserted:
                tx.wake_workers()
        return result

    def requeue_expired(self, *, limit: int = 1000) -> int:
        """The reaper: expired claims back to QUEUED (or DEAD), their attempt recorded;
        cancel-requested firings past their grace CANCELLED; queued firings past their
        start deadline MISSED."""
        with self.db.transaction() as tx:
            n = 0
            for row in tx.all("expired_claims", {"limit": limit}):
                if not tx.run("expire_claim", {"id": row["id"]}):
                    continue
                n += 1
                if row["state"] == "running":  # a held firing never ran: no attempt
                    tx.run(
                        "insert_attempt",
                        {
                            "firing_id": row["id"],
                            "attempt": row["attempt"],
                            "worker_id": row["worker_id"],
                            "claimed_at": row["claimed_at"],
                            "started_at": row["started_at"],
                            "finished_at": tx.now_us,
                            "outcome": "lease_expired",
                            "error": "lease expired",
                        },
                    )
            n += tx.run("cancel_deadline_passed", {"limit": limit})
            n += tx.run("start_deadline_passed", {"limit": limit})
        return n
